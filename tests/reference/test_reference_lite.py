"""Differential tests of the Pub/Sub Lite connectors: Google's and ours on the same input.

Google's ``PubSubLiteSinkConnector`` and ``PubSubLiteSourceConnector`` (the 1.3.3 jar, unmodified,
in Kafka Connect) reach the local Lite server through the fronts (``reference.fronts``: their
regional endpoint ``us-central1-pubsublite.googleapis.com:443`` is tunnelled to it); ours run as
``pubsub-connect run --once`` in a subprocess that trusts the server's certificate (see
``e2e/test_lite_sink.py`` for why a subprocess).

Sink: a deterministic corpus of Kafka records (keys incl. null, empty and non-UTF-8; values incl.
null, binary and Unicode; repeated, binary, empty and number-, JSON- or boolean-looking header
values) goes through Google's sink and ours into separate Lite topics, in the DEFAULT ordering
mode (key-hash routing) and in KAFKA mode (same partition number). Every Lite message must be
the same: key, data, attributes (values in order, incl. the ``x-goog-pubsublite-source-kafka-*``
ones the connector adds), event time, partition and, in KAFKA mode, its offset.

Source: a deterministic corpus of Lite messages (empty and binary keys, multi-valued and binary
attributes, event times with sub-millisecond digits, messages without event time) is read by
one subscription per connector run; Google's source and ours write to separate Kafka topics.
Every record must be the same: key, value, headers, partition and timestamp, under three
converter set-ups (the worker's converters serialize what the source task returns, so they
change the Kafka bytes).

Where the two differ on purpose, the difference is asserted as exactly that.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from google.cloud.pubsublite_v1.types import common
from google.protobuf import struct_pb2

from e2e.test_lite_sink import PROJECT, ZONE, cli, lite_path, write_connector, write_worker
from integration.kafka_helpers import Rec, consume_all, create_topic
from lite_server import LiteServer
from reference.conftest import TIMINGS
from reference.connect import LITE_SINK_CONNECTOR_CLASS, LITE_SOURCE_CONNECTOR_CLASS, ConnectStandalone
from reference.fronts import lite_endpoint
from waiting import wait_until

pytestmark = [pytest.mark.slow]

PubSubMessage = common.PubSubMessage.pb()

BYTES = "org.apache.kafka.connect.converters.ByteArrayConverter"
STRING = "org.apache.kafka.connect.storage.StringConverter"
JSON = "org.apache.kafka.connect.json.JsonConverter"
PARTITIONS = 3
#: A fixed CreateTime base (2024-01-02T03:04:05.678Z): timestamps are part of what is compared.
BASE_MS = 1_704_164_645_678
PARTITION_ATTR = "x-goog-pubsublite-source-kafka-partition"
OFFSET_ATTR = "x-goog-pubsublite-source-kafka-offset"

# ----------------------------------------------------------------------------------------------
# Corpora
# ----------------------------------------------------------------------------------------------

SINK_KEYS: tuple[bytes | None, ...] = (b"k1", None, "ключ".encode(), b"", b"k2", b"\xff\xfe\x00raw", b"k1")
#: Header values Google's sink publishes changed, because Connect's default header converter
#: (``SimpleHeaderConverter``) parses header text into typed values and the sink then prints
#: those: value Kafka had → value Google's sink publishes. Ours publishes the bytes Kafka had
#: (deliberate: the original loses data, or turns text into protobuf bytes).
GOOGLE_HEADER_REWRITES: dict[bytes, bytes] = {
    b"\x00\x01\xff": "\x00\x01\ufffd".encode(),  # not UTF-8: decoded with U+FFFD
    b"007": b"7",  # an INT8
    b"1.10": b"1.100000023841858",  # a FLOAT32, printed as a double
    b"[1,2]": struct_pb2.Value(list_value=struct_pb2.ListValue(values=[
        struct_pb2.Value(number_value=1), struct_pb2.Value(number_value=2)])).SerializeToString(),
    b'{"a":1}': struct_pb2.Value(struct_value=struct_pb2.Struct(fields={
        "a": struct_pb2.Value(number_value=1)})).SerializeToString(),
}
SINK_HEADER_VALUES: tuple[bytes, ...] = (
    b"plain", "значение ü".encode(), b"", b"\x00\x01\xff", b"007", b"1.10", b"-42", b"true",
    b"[1,2]", b'{"a":1}',
)
#: Header values whose parsed form Google's sink cannot print: its task dies for good (Connect's
#: ``errors.tolerance`` does not cover ``put``), on the first such record. Value → the exception.
#: ``None`` is a header without a value (which ours skips, as its Cloud Pub/Sub sink does).
GOOGLE_TASK_KILLERS: dict[bytes | None, str] = {
    None: 'NullPointerException: Cannot invoke "Object.toString()" because "object" is null',
    b"null": 'NullPointerException: Cannot invoke "Object.toString()" because "object" is null',
    b"2024-01-02": "ClassCastException: class java.util.Date cannot be cast to class java.lang.Number",
}


def sink_corpus(count: int = 120) -> list[dict[str, Any]]:
    """``count`` Kafka records: explicit partitions and CreateTime timestamps, so Kafka's
    coordinates (which the sinks publish as attributes and event time) are known."""
    records = []
    for i in range(count):
        headers: list[tuple[str, bytes]] = []
        if i % 4 != 3:
            headers.append(("h", SINK_HEADER_VALUES[i % len(SINK_HEADER_VALUES)]))
        if i % 5 == 0:
            headers += [("dup", b"first"), ("other", b"x"), ("dup", b"second")]
        value: bytes | None
        if i % 10 == 9:
            value = None
        elif i % 3 == 0:
            value = bytes([i % 256, 0, 255]) + b"binary"
        elif i % 3 == 1:
            value = f"värde {i} ✓".encode()
        else:
            value = b"" if i % 6 == 2 else f"value-{i}".encode()
        records.append({"key": SINK_KEYS[i % len(SINK_KEYS)], "value": value, "headers": headers or None,
                        "partition": i % PARTITIONS, "timestamp": BASE_MS + i * 1001})
    return records


STRUCT_SCHEMA = {"type": "struct", "optional": False, "fields": [
    {"field": "name", "type": "string", "optional": False},
    {"field": "n", "type": "int32", "optional": False},
    {"field": "big", "type": "int64", "optional": False},
    {"field": "f", "type": "float", "optional": False},
    {"field": "d", "type": "double", "optional": False},
    {"field": "ok", "type": "boolean", "optional": False},
    {"field": "raw", "type": "bytes", "optional": False},
    {"field": "tags", "type": "array", "items": {"type": "string", "optional": False}, "optional": False},
    {"field": "counts", "type": "map", "keys": {"type": "string", "optional": False},
     "values": {"type": "int32", "optional": False}, "optional": False},
    {"field": "inner", "type": "struct", "optional": False, "fields": [
        {"field": "x", "type": "double", "optional": False}, {"field": "when", "type": "int64", "optional": False}]},
]}


def json_sink_corpus(count: int = 40) -> list[dict[str, Any]]:
    """``count`` Kafka records whose values are JsonConverter envelopes of a STRUCT with every
    kind of field (the Lite sink writes such a value as a serialized ``google.protobuf.Value``),
    alternating with top-level ARRAY, MAP, number, boolean and BYTES values."""
    import base64
    import json

    records = []
    for i in range(count):
        kind = i % 6
        if kind == 0 or kind == 1:
            schema, payload = STRUCT_SCHEMA, {
                "name": f"nämé-{i}", "n": -i, "big": 2**53 + i, "f": 1.1 * i, "d": i / 3, "ok": i % 2 == 0,
                "raw": base64.b64encode(bytes([i, 0, 255])).decode(), "tags": [f"t{i}", "✓"][: i % 3],
                "counts": {"b": i, "a": -i, "ü": 7}, "inner": {"x": -0.5 * i, "when": BASE_MS + i}}
        elif kind == 2:
            schema, payload = {"type": "array", "items": {"type": "int64"}}, [i, -i, 2**40]
        elif kind == 3:
            schema = {"type": "map", "keys": {"type": "int32"}, "values": {"type": "boolean"}}
            payload = [[i, True], [-1, False]]
        elif kind == 4:
            schema, payload = {"type": "float"}, i + 0.1
        else:
            schema, payload = {"type": "bytes"}, base64.b64encode(f"bytes-{i}".encode()).decode()
        value = json.dumps({"schema": schema, "payload": payload}, ensure_ascii=False).encode()
        records.append({"key": f"json-{i % 7}".encode(), "value": value, "headers": None,
                        "partition": i % PARTITIONS, "timestamp": BASE_MS + i})
    return records


def lite_corpus(count: int = 110) -> list[tuple[int, Any]]:
    """``count`` ``(lite partition, PubSubMessage)``: unique data (the records' identity on the
    Kafka side), keys empty, text and binary, attributes with repeated and binary values, and
    event times with sub-millisecond digits (Kafka keeps whole milliseconds) or none."""
    keys = (b"", b"key-a", "ключ".encode(), b"\xff\x00bin", b"key-b")
    out = []
    for i in range(count):
        message = PubSubMessage(key=keys[i % len(keys)], data=f"m{i:03d} ✓ ".encode() + bytes([i % 256]))
        if i % 3 == 0:
            message.attributes["multi"].values.extend([b"1", b"2", f"{i}".encode()])
        if i % 4 == 1:
            message.attributes["bin"].values.append(b"\x00\xff\xfe")
        if i % 5 == 2:
            message.attributes["text"].values.append("ü ✓".encode())
        if i % 2 == 0:
            ms = BASE_MS + i * 997
            message.event_time.seconds, message.event_time.nanos = ms // 1000, ms % 1000 * 1_000_000 + 123_456
        out.append((i % 2, message))
    return out


# ----------------------------------------------------------------------------------------------
# Running both sides
# ----------------------------------------------------------------------------------------------


def _wait(what: str, done: Callable[[], bool], check: Callable[[], None], timeout_s: float = 90) -> None:
    """Poll ``done`` (the reference writes asynchronously); ``check`` raises when the reference failed."""

    def finished() -> bool:
        if done():
            return True
        check()
        return False

    wait_until(finished, timeout_s, what, interval_s=0.2)


def _lite_messages(lite: LiteServer, topic: str, partitions: int = PARTITIONS) -> list[tuple[int, int, Any]]:
    """``(partition, offset, PubSubMessage)`` of every message of a Lite topic."""
    path = lite_path("topics", topic)
    return [(p, seq.cursor.offset, seq.message) for p in range(partitions) for seq in lite.messages(path, p)]


#: Sink set-ups: ordering mode, input corpus and value converter.
SINK_SETUPS: dict[str, dict[str, str]] = {
    "default": {"pubsublite.ordering.mode": "DEFAULT", "key.converter": STRING, "value.converter": BYTES},
    "kafka": {"pubsublite.ordering.mode": "KAFKA", "key.converter": STRING, "value.converter": BYTES},
    "json": {"pubsublite.ordering.mode": "DEFAULT", "key.converter": STRING, "value.converter": JSON},
}
#: Source set-ups: connector settings for both sides (converters and header converter).
SOURCE_SETUPS: dict[str, dict[str, str]] = {
    "bytes": {"key.converter": BYTES, "value.converter": BYTES},
    "json": {"key.converter": JSON, "value.converter": JSON, "value.converter.schemas.enable": "false"},
    "string": {"key.converter": STRING, "value.converter": STRING, "header.converter": BYTES},
}


@pytest.fixture(scope="module")
def lite_runs(google_connect: ConnectStandalone, google_lite: LiteServer, kafka_bootstrap: str,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Both corpora through Google's connectors (one connector at a time) and then through ours
    (one ``run --once`` of all five connectors); returns the topic names and our run's output."""
    import uuid

    lite = google_lite
    tmp_path = tmp_path_factory.mktemp("lite-reference")
    tag = uuid.uuid4().hex[:8]
    kafka_in = f"lite-ref-in-{tag}"
    create_topic(kafka_bootstrap, kafka_in, partitions=PARTITIONS)
    sink_records = sink_corpus()
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for r in sink_records:
        producer.produce(kafka_in, value=r["value"], key=r["key"], partition=r["partition"],
                         headers=r["headers"], timestamp=r["timestamp"])
    json_in = f"lite-ref-json-in-{tag}"
    create_topic(kafka_bootstrap, json_in, partitions=PARTITIONS)
    json_records = json_sink_corpus()
    for r in json_records:
        producer.produce(json_in, value=r["value"], key=r["key"], partition=r["partition"], timestamp=r["timestamp"])
    assert producer.flush(60) == 0
    inputs = {"default": (kafka_in, sink_records), "kafka": (kafka_in, sink_records), "json": (json_in, json_records)}

    source_topic = f"lite-ref-src-{tag}"
    lite.create_topic(lite_path("topics", source_topic), 2)
    corpus = lite_corpus()
    for partition in (0, 1):
        lite.publish(lite_path("topics", source_topic), partition, [m for p, m in corpus if p == partition])

    names: dict[str, str] = {}
    for i, header_value in enumerate(GOOGLE_TASK_KILLERS):
        names[f"killer-{i}"] = killer = f"lite-ref-killer-{i}-{tag}"
        create_topic(kafka_bootstrap, killer)
        producer.produce(killer, value=b"v", key=b"k", headers=[("h", header_value), ("ok", b"v")], timestamp=BASE_MS)
        lite.create_topic(lite_path("topics", killer), 1)
    assert producer.flush(60) == 0
    for side in ("google", "ours"):
        for mode in SINK_SETUPS:
            names[f"sink-{mode}-{side}"] = name = f"lite-ref-sink-{mode}-{side}-{tag}"
            lite.create_topic(lite_path("topics", name), PARTITIONS)
        for setup in SOURCE_SETUPS:
            names[f"source-{setup}-{side}"] = name = f"lite-ref-source-{setup}-{side}-{tag}"
            lite.create_subscription(lite_path("subscriptions", name), lite_path("topics", source_topic))
            create_topic(kafka_bootstrap, name, partitions=PARTITIONS)

    common_settings = {"tasks.max": "1", "pubsublite.project": PROJECT, "pubsublite.location": ZONE}
    for mode, settings in SINK_SETUPS.items():
        name = names[f"sink-{mode}-google"]
        topic, records = inputs[mode]
        adding = time.monotonic()
        with google_connect.running(name, LITE_SINK_CONNECTOR_CLASS, {
                **common_settings, "topics": topic, "pubsublite.topic": name, **settings}):
            TIMINGS.setdefault("Lite sink connector created to RUNNING", time.monotonic() - adding)
            _wait(f"{name} to hold the corpus", lambda n=name, c=records: len(_lite_messages(lite, n)) >= len(c),
                  lambda n=name: google_connect.raise_if_failed(n))
    for setup, settings in SOURCE_SETUPS.items():
        name = names[f"source-{setup}-google"]
        with google_connect.running(name, LITE_SOURCE_CONNECTOR_CLASS, {
                **common_settings, "pubsublite.subscription": name, "kafka.topic": name, **settings}):
            _wait(f"{name} to hold the corpus", lambda n=name: len(consume_all(kafka_bootstrap, n)) >= len(corpus),
                  lambda n=name: google_connect.raise_if_failed(n))

    failures = []
    for i in range(len(GOOGLE_TASK_KILLERS)):
        name = names[f"killer-{i}"]
        with google_connect.running(name, LITE_SINK_CONNECTOR_CLASS, {
                **common_settings, "topics": name, "pubsublite.topic": name, "key.converter": STRING,
                "value.converter": BYTES}, wait=False):
            failures.append(google_connect.wait_failed(name))

    worker, _root = write_worker(tmp_path, kafka_bootstrap)
    files = [write_connector(tmp_path, names[f"killer-{i}"], lite, **{
        "connector.class": LITE_SINK_CONNECTOR_CLASS, "topics": names[f"killer-{i}"],
        "pubsublite.topic": names[f"killer-{i}"], "key.converter": STRING, "value.converter": BYTES})
        for i in range(len(GOOGLE_TASK_KILLERS))]
    for mode, settings in SINK_SETUPS.items():
        name = names[f"sink-{mode}-ours"]
        files.append(write_connector(tmp_path, name, lite, **{
            "connector.class": LITE_SINK_CONNECTOR_CLASS, "topics": inputs[mode][0], "pubsublite.topic": name,
            **settings}))
    for setup, settings in SOURCE_SETUPS.items():
        name = names[f"source-{setup}-ours"]
        files.append(write_connector(tmp_path, name, lite, **{
            "connector.class": LITE_SOURCE_CONNECTOR_CLASS, "pubsublite.subscription": name, "kafka.topic": name,
            **settings}))
    running = time.monotonic()
    result = cli(["run", "--once", "--worker", str(worker), *map(str, files)], lite)
    TIMINGS["ours: run --once of all Lite sinks and sources"] = time.monotonic() - running
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-4000:]
    yield {"names": names, "inputs": inputs, "corpus": corpus,
           "google_failures": failures}


# ----------------------------------------------------------------------------------------------
# Sink
# ----------------------------------------------------------------------------------------------


def _sink_view(partition: int, offset: int, message: Any, mode: str) -> tuple:
    attributes = {name: list(message.attributes[name].values) for name in message.attributes}
    event = (message.event_time.seconds, message.event_time.nanos) if message.HasField("event_time") else None
    return (message.key, message.data, attributes, event, partition, offset if mode == "kafka" else None)


def _by_kafka_coordinates(lite: LiteServer, topic: str, mode: str) -> dict[tuple[str, str], tuple]:
    """Each message of a Lite topic by the Kafka record it came from (the partition and offset
    attributes the sink adds), after asserting that no record was published twice: a dict keyed
    by record would keep one of two publishes and hide the other from every later check."""
    out: dict[tuple[str, str], list[tuple]] = {}
    for partition, offset, message in _lite_messages(lite, topic):
        ident = (message.attributes[PARTITION_ATTR].values[0].decode(),
                 message.attributes[OFFSET_ATTR].values[0].decode())
        out.setdefault(ident, []).append(_sink_view(partition, offset, message, mode))
    repeated = {ident: len(views) for ident, views in out.items() if len(views) != 1}
    assert repeated == {}, f"{topic}: Kafka records (partition, offset) published more than once: {repeated}"
    return {ident: views[0] for ident, views in out.items()}


def _as_google_publishes(view: tuple) -> tuple:
    """Our message with the deliberate header difference applied: what Google's sink publishes."""
    key, data, attributes, event, partition, offset = view
    attributes = {name: [GOOGLE_HEADER_REWRITES.get(v, v) for v in values] for name, values in attributes.items()}
    return key, data, attributes, event, partition, offset


@pytest.mark.parametrize("mode", [m for m in SINK_SETUPS if m != "json"])
def test_lite_sink_matches_google(lite_runs: dict[str, Any], google_lite: LiteServer, mode: str) -> None:
    names = lite_runs["names"]
    google = _by_kafka_coordinates(google_lite, names[f"sink-{mode}-google"], mode)
    ours = _by_kafka_coordinates(google_lite, names[f"sink-{mode}-ours"], mode)
    assert len(google) == len(ours) == len(lite_runs["inputs"][mode][1])
    assert set(google) == set(ours)
    differences, rewritten = [], set()
    for ident in sorted(google, key=lambda c: (int(c[0]), int(c[1]))):
        theirs, mine = google[ident], ours[ident]
        if mode == "default" and not theirs[0]:
            # keyless messages: both round-robin, from a start partition Google's client draws at random
            theirs, mine = (*theirs[:4], None, None), (*mine[:4], None, None)
        if theirs != mine:
            rewritten.update(v for values in mine[2].values() for v in values if v in GOOGLE_HEADER_REWRITES)
        if theirs != _as_google_publishes(mine):
            differences.append((ident, theirs, mine))
    for difference in differences:
        print(difference)
    assert differences == []
    assert rewritten == set(GOOGLE_HEADER_REWRITES)  # each deliberate difference was seen


def test_lite_sink_json_values_match_google(lite_runs: dict[str, Any], google_lite: LiteServer) -> None:
    """STRUCT, ARRAY and MAP values become a serialized ``google.protobuf.Value``, numbers and
    booleans their text, BYTES the bytes. A Value's map fields are compared parsed: Java writes
    a struct's fields in schema order, ours sorted by name (the same Value, other bytes)."""
    import json

    from google.protobuf import json_format

    names, records = lite_runs["names"], lite_runs["inputs"]["json"][1]
    google = _by_kafka_coordinates(google_lite, names["sink-json-google"], "json")
    ours = _by_kafka_coordinates(google_lite, names["sink-json-ours"], "json")
    assert len(google) == len(ours) == len(records)
    assert set(google) == set(ours)
    # Kafka coordinates of the values that are serialized Values (produced in order per partition)
    offsets = {p: 0 for p in range(PARTITIONS)}
    structured = set()
    for r in records:
        if json.loads(r["value"])["schema"]["type"] in ("struct", "array", "map"):
            structured.add((str(r["partition"]), str(offsets[r["partition"]])))
        offsets[r["partition"]] += 1

    def parsed(ident: tuple[str, str], view: tuple) -> tuple:
        data = view[1]
        if ident in structured:
            data = json_format.MessageToDict(struct_pb2.Value.FromString(data))
        return (view[0], data, *view[2:])

    differences = [(ident, google[ident], ours[ident]) for ident in sorted(google)
                   if parsed(ident, google[ident]) != parsed(ident, ours[ident])]
    for difference in differences:
        print(difference)
    assert differences == []
    assert len(structured) == 28


def test_lite_sink_header_text_that_kills_googles_task(lite_runs: dict[str, Any], google_lite: LiteServer) -> None:
    """Deliberate divergence: a header without a value, or whose text Connect's
    ``SimpleHeaderConverter`` parses into null (``null``) or a date (``2024-01-02``), stops
    Google's sink task for good; ours skips the first and publishes the others' bytes as they
    are, like every other header."""
    for i, (value, exception) in enumerate(GOOGLE_TASK_KILLERS.items()):
        assert exception in lite_runs["google_failures"][i]
        ((_p, _o, message),) = _lite_messages(google_lite, lite_runs["names"][f"killer-{i}"], partitions=1)
        topic = lite_runs["names"][f"killer-{i}"].encode()
        headers = {"ok": [b"v"]} if value is None else {"h": [value], "ok": [b"v"]}
        assert _sink_view(0, 0, message, "kafka")[:3] == (b"k", b"v", {
            **headers, "x-goog-pubsublite-source-kafka-topic": [topic],
            "x-goog-pubsublite-source-kafka-partition": [b"0"], "x-goog-pubsublite-source-kafka-offset": [b"0"],
            "x-goog-pubsublite-source-kafka-event-time-type": [b"CreateTime"]})


# ----------------------------------------------------------------------------------------------
# Source
# ----------------------------------------------------------------------------------------------


def _source_view(record: Rec) -> tuple:
    """What is compared of a Kafka record. The partition only for a non-null key: Google's source
    leaves the partition to the producer, whose sticky partitioner places null keys by timing;
    ours places them round-robin."""
    partition = record.partition if record.key is not None else None
    return record.key, record.value, sorted(record.headers or []), partition, record.timestamp_ms


#: Java's ``byte[].toString()``: what Kafka's StringConverter writes for the bytes Google's source returns.
JAVA_BYTE_ARRAY_TO_STRING = re.compile(rb"\[B@[0-9a-f]+")


@pytest.mark.parametrize("setup", [s for s in SOURCE_SETUPS if s != "string"])
def test_lite_source_matches_google(lite_runs: dict[str, Any], kafka_bootstrap: str, setup: str) -> None:
    names = lite_runs["names"]
    google = consume_all(kafka_bootstrap, names[f"source-{setup}-google"])
    ours = consume_all(kafka_bootstrap, names[f"source-{setup}-ours"])
    assert len(google) == len(ours) == len(lite_runs["corpus"])
    google_by_value = {r.value: _source_view(r) for r in google}
    ours_by_value = {r.value: _source_view(r) for r in ours}
    differences = [(v, google_by_value.get(v), ours_by_value.get(v))
                   for v in sorted(set(google_by_value) | set(ours_by_value), key=repr)
                   if google_by_value.get(v) != ours_by_value.get(v)]
    for difference in differences:
        print(difference)
    assert differences == []


def test_lite_source_string_converter(lite_runs: dict[str, Any], kafka_bootstrap: str) -> None:
    """Deliberate divergence: with ``StringConverter`` Google's worker writes Java's
    ``byte[].toString()`` (``[B@6d06d69c``, an identity hash: the data is lost); ours writes the
    bytes as UTF-8 text (invalid sequences as U+FFFD). Everything else is the same."""
    names, corpus = lite_runs["names"], [m for _p, m in lite_runs["corpus"]]
    google = consume_all(kafka_bootstrap, names["source-string-google"])
    ours = consume_all(kafka_bootstrap, names["source-string-ours"])
    assert len(google) == len(ours) == len(corpus)
    assert all(JAVA_BYTE_ARRAY_TO_STRING.fullmatch(r.value) for r in google)
    assert all(JAVA_BYTE_ARRAY_TO_STRING.fullmatch(r.key) for r in google if r.key is not None)
    expected = sorted((m.data, m.key.decode("utf-8", "replace").encode() if m.key else None) for m in corpus)
    assert sorted((r.value, r.key) for r in ours) == expected

    def shape(records: list[Rec]) -> list[tuple]:
        return sorted((r.key is None, sorted(r.headers or []), r.timestamp_ms) for r in records)

    assert shape(google) == shape(ours)


def test_lite_reference_stayed_local(lite_runs: dict[str, Any], google_connect: ConnectStandalone) -> None:
    """Google's Lite clients went through the proxy to the Lite regional endpoint, nowhere else."""
    assert lite_endpoint("us-central1") in google_connect.fronts.activity.tunnels
    assert google_connect.fronts.activity.refused == []

