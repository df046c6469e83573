"""``PublishRequest`` bytes encoded from Arrow columns parse back, with the generated protobuf
classes, to exactly the messages the columns hold; with at most one attribute they are the bytes
the generated classes write themselves."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from google.pubsub_v1.types import PublishRequest, PubsubMessage

from pubsub_connect.model.pubsub_wire import FramedMessages, framed_messages, request_bounds, topic_field

ATTRIBUTES = pa.map_(pa.string(), pa.string())
Row = tuple[bytes, "dict[str, str] | None", "str | None"]


def corpus(count: int, seed: int = 7) -> list[Row]:
    """Payload lengths around every varint width change, empty and null attribute maps, empty
    keys and values, non-ASCII text, empty and null ordering keys."""
    rnd = random.Random(seed)
    rows: list[Row] = []
    for i in range(count):
        size = rnd.choice([0, 1, 5, 127, 128, 129, 300, 16_383, 16_384, 20_000])
        data = rnd.randbytes(size)
        attributes = None if i % 5 == 0 else {
            f"k{j}é": "v" * rnd.choice([0, 1, 200]) for j in range(rnd.choice([0, 1, 3]))}
        if i % 7 == 0 and attributes is not None:
            attributes[""] = "empty key"
        key = rnd.choice([None, "", "ord", "ü" * 100])
        rows.append((data, attributes, key))
    return rows


def columns(rows: list[Row]) -> tuple[pa.Array, pa.MapArray, pa.Array]:
    return (pa.array([d for d, _, _ in rows], pa.binary()),
            pa.array([list(a.items()) if a is not None else None for _, a, _ in rows], ATTRIBUTES),
            pa.array([k for _, _, k in rows], pa.string()))


def parse(topic: str, framed: FramedMessages) -> list[Row]:
    request = PublishRequest.pb().FromString(topic_field(topic) + framed.buffer.to_pybytes())
    assert request.topic == topic
    return [(m.data, dict(m.attributes), m.ordering_key) for m in request.messages]


def normalised(rows: list[Row]) -> list[Row]:
    return [(d, a or {}, k or "") for d, a, k in rows]


def test_every_message_parses_back_to_its_columns() -> None:
    rows = corpus(2000)
    framed = framed_messages(*columns(rows))
    assert len(framed) == 2000
    assert framed.data_bytes == sum(len(d) for d, _, _ in rows)
    assert parse("projects/p/topics/t", framed) == normalised(rows)


def test_without_ordering_keys_the_field_is_absent() -> None:
    rows = [(b"x", {"a": "1"}, None), (b"", {"b": ""}, None)]
    data, attributes, _ = columns(rows)
    assert parse("t", framed_messages(data, attributes)) == normalised(rows)
    assert parse("t", framed_messages(data)) == [(b"x", {}, ""), (b"", {}, "")]


@pytest.mark.parametrize("index", range(0, 400, 3))
def test_bytes_are_those_of_the_generated_classes(index: int) -> None:
    data, attributes, key = corpus(400)[index]
    if attributes is not None and len(attributes) > 1:
        attributes = dict(list(attributes.items())[:1])  # map order is the writer's choice beyond one
    row: Row = (data, attributes, key)
    expected = PublishRequest.pb()(topic="projects/p/topics/t", messages=[PubsubMessage.pb()(
        data=data, attributes=attributes or {}, ordering_key=key or "")]).SerializeToString()
    assert topic_field("projects/p/topics/t") + framed_messages(*columns([row])).buffer.to_pybytes() == expected


def test_sliced_columns_encode_only_their_rows() -> None:
    rows = corpus(120)
    data, attributes, keys = columns(rows)
    framed = framed_messages(data.slice(5, 50), attributes.slice(5, 50), keys.slice(5, 50))
    assert parse("t", framed) == normalised(rows[5:55])


def test_requests_hold_at_most_max_messages_and_max_bytes_and_never_nothing() -> None:
    sizes = [10, 10, 10, 500, 10, 10, 10, 10]
    framed = FramedMessages(buffer=pa.py_buffer(b""), ends=np.cumsum(sizes), data_bytes=0)
    assert request_bounds(framed, max_messages=3, max_bytes=1000) == [(0, 3), (3, 6), (6, 8)]
    # 35 bytes with 5 of overhead: three messages of 10 fit, the 500-byte one goes alone
    assert request_bounds(framed, max_messages=100, max_bytes=35, overhead=5) == [
        (0, 3), (3, 4), (4, 7), (7, 8)]
    assert request_bounds(framed, max_messages=0, max_bytes=0) == [(i, i + 1) for i in range(8)]


def test_large_arrow_types_encode_like_the_plain_ones() -> None:
    """Spark sends ``large_binary``/``large_string`` with ``useLargeVarTypes``: same bytes."""
    rows = corpus(300, seed=11)
    data, attributes, keys = columns(rows)
    large = framed_messages(data.cast(pa.large_binary()),
                            attributes.cast(pa.map_(pa.large_string(), pa.large_string())),
                            keys.cast(pa.large_string()))
    assert large.buffer.to_pybytes() == framed_messages(data, attributes, keys).buffer.to_pybytes()
    assert parse("t", large) == normalised(rows)
