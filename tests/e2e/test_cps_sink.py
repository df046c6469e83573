"""Cloud Pub/Sub sink, end to end: real Apache Kafka broker → Delta → Google's Pub/Sub emulator.

Each test produces to its own Kafka topic and reads back with plain clients, asserting exact
message bodies and attribute maps (the data model of Google's connector).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from e2e.harness import run_once, sink_config
from integration.kafka_helpers import Rec, create_topic, produce
from integration.pubsub_helpers import assert_no_more_messages, create_topic_and_subscription, pull_all
from pubsub_connect.io.tables import TableRef
from pubsub_connect.pipelines.context import ConnectorError

pytestmark = pytest.mark.usefixtures("pubsub_emulator_host")


def _envelope(schema: dict, payload: object) -> bytes:
    return json.dumps({"schema": schema, "payload": payload}).encode()


@pytest.mark.compat
def test_bytes_values_with_key_metadata_and_headers(spark, kafka_bootstrap: str, tmp_path: Path,
                                                    unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name, partitions=3)
    produce(kafka_bootstrap, unique_name, [
        Rec(b"fox", key=b"dog", partition=2, headers=[("h1", b"v1"), ("bad", b"\xff\xfe")]),
        Rec(None, key=None, partition=2),             # null key, null value: nothing published
        Rec(b"", key=b"cat", partition=1),            # empty body but an attribute: published
        Rec(b"\x00\x01binary", key=None, partition=0, headers=[("k" * 300, b"too long key")]),
    ])
    _, subscription = create_topic_and_subscription(unique_name)
    connector = sink_config(unique_name, unique_name, unique_name,
                            **{"key.converter": "org.apache.kafka.connect.storage.StringConverter",
                               "metadata.publish": "true", "headers.publish": "true"})
    lines: list[str] = []
    run_once(spark, kafka_bootstrap, tmp_path, connector, lines)

    pulled = pull_all(subscription, 4, timeout=60)
    got = {(m.attributes["kafka.partition"], m.attributes["kafka.offset"]): m for m in pulled}
    assert len(got) == 4
    assert all(int(m.attributes.pop("kafka.timestamp")) > 1_600_000_000_000 for m in pulled)
    common = {"kafka.topic": unique_name}
    assert (got["2", "0"].data, got["2", "0"].attributes) == (
        b"fox", {**common, "key": "dog", "kafka.partition": "2", "kafka.offset": "0", "h1": "v1",
                 "bad": "\ufffd\ufffd"})  # bad UTF-8 as U+FFFD, like Connect's header converters
    # null key and value: metadata attributes alone make it a message with an empty body
    assert (got["2", "1"].data, got["2", "1"].attributes) == (
        b"", {**common, "kafka.partition": "2", "kafka.offset": "1"})
    assert (got["1", "0"].data, got["1", "0"].attributes) == (
        b"", {**common, "key": "cat", "kafka.partition": "1", "kafka.offset": "0"})
    assert (got["0", "0"].data, got["0", "0"].attributes) == (
        b"\x00\x01binary", {**common, "kafka.partition": "0", "kafka.offset": "0"})  # 300-byte header key skipped
    assert_no_more_messages(subscription, wait=1.0)
    # progress: one line per stage with the record counts
    assert any(f"[{unique_name}.ingest]" in line and "records=4" in line for line in lines), lines
    assert any(f"[{unique_name}.publish]" in line and "records=4" in line for line in lines), lines


def test_a_record_with_nothing_to_publish_leaves_a_warning(spark, kafka_bootstrap: str, tmp_path: Path,
                                                          unique_name: str, caplog: pytest.LogCaptureFixture) -> None:
    """No value and no attributes: not published (Pub/Sub refuses an empty message), like the
    original, and a warning names the record; the records around it flow."""
    create_topic(kafka_bootstrap, unique_name)
    produce(kafka_bootstrap, unique_name, [Rec(b"before"), Rec(None), Rec(b"after", key=b"k")])
    _, subscription = create_topic_and_subscription(unique_name)
    with caplog.at_level("WARNING", logger="pubsub_connect.pipelines.cps_sink"):
        run_once(spark, kafka_bootstrap, tmp_path, sink_config(unique_name, unique_name, unique_name, **{
            "key.converter": "org.apache.kafka.connect.storage.StringConverter"}))

    assert sorted((m.data, m.attributes) for m in pull_all(subscription, 2, timeout=60)) == [
        (b"after", {"key": "k"}), (b"before", {})]
    assert_no_more_messages(subscription, wait=1.0)
    assert [r.getMessage() for r in caplog.records if r.name == "pubsub_connect.pipelines.cps_sink"] == [
        f"{unique_name}: record {unique_name}/0@1 has no value and no attributes: not published"]


def test_json_with_schemas_follows_the_data_model(spark, kafka_bootstrap: str, tmp_path: Path,
                                                  unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name)
    struct_schema = {"type": "struct", "fields": [
        {"field": "cps_message_body", "type": "int32"}, {"field": "a", "type": "string"}]}
    attrs_only = {"type": "struct", "fields": [
        {"field": "over", "type": "string"}, {"field": "lazy", "type": "string"}]}
    values = [
        _envelope(struct_schema, {"cps_message_body": 5, "a": "b"}),
        _envelope(attrs_only, {"over": "tide", "lazy": "eagle"}),
        _envelope({"type": "int16"}, 5),
        _envelope({"type": "float"}, 8.0),
        _envelope({"type": "double"}, 8.0),
        _envelope({"type": "boolean"}, True),
        _envelope({"type": "array", "items": {"type": "string"}}, ["Roll", "tide"]),
        _envelope({"type": "map", "keys": {"type": "string"}, "values": {"type": "int64"}},
                  {"cps_message_body": 7, "n": 10000000}),
    ]
    produce(kafka_bootstrap, unique_name, [Rec(v, key=b"dog") for v in values])
    _, subscription = create_topic_and_subscription(unique_name)
    connector = sink_config(unique_name, unique_name, unique_name, **{
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "true"})
    run_once(spark, kafka_bootstrap, tmp_path, connector)

    by_order = sorted(pull_all(subscription, len(values), timeout=60), key=lambda m: m.publish_time)
    got = sorted((m.data, tuple(sorted(m.attributes.items()))) for m in by_order)
    expected = sorted([
        (b"\x00\x00\x00\x05", (("a", "b"), ("key", "dog"))),
        (b"", (("key", "dog"), ("lazy", "eagle"), ("over", "tide"))),
        (b"\x00\x05", (("key", "dog"),)),
        (bytes.fromhex("41000000"), (("key", "dog"),)),
        (bytes.fromhex("4020000000000000"), (("key", "dog"),)),
        (b"\x01", (("key", "dog"),)),
        (b"Rolltide", (("key", "dog"),)),
        (b"7", (("key", "dog"), ("n", "10000000"))),
    ])
    assert got == expected


def test_bad_records_go_to_the_dlq_with_tolerance_all(spark, kafka_bootstrap: str, tmp_path: Path,
                                                      unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name)
    produce(kafka_bootstrap, unique_name, [
        Rec(b'{"ok": 1}'), Rec(b"{not json"), Rec(b'[1, {"nested": true}]'), Rec(b"\xff\xfe")])
    _, subscription = create_topic_and_subscription(unique_name)
    connector = sink_config(unique_name, unique_name, unique_name, **{
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false", "errors.tolerance": "all"})
    run_once(spark, kafka_bootstrap, tmp_path, connector)

    bodies = sorted(m.data for m in pull_all(subscription, 2, timeout=60))
    assert bodies == [b'[1,{"nested":true}]', b'{"ok":1}']  # schemaless JSON -> compact JSON text
    from e2e.harness import context

    store = context(spark, kafka_bootstrap, tmp_path).store
    dlq = store.read(TableRef("dlq", unique_name)).orderBy("offset").collect()
    assert [(r.stage, r.topic, r.partition, r.offset, r.value) for r in dlq] == [
        ("convert", unique_name, 0, 1, b"{not json"), ("convert", unique_name, 0, 3, b"\xff\xfe")]
    assert all(r.error_class and r.error_message and "\n" not in r.error_message for r in dlq)
    assert store.count(TableRef("outbox", unique_name)) == 2
    assert store.count(TableRef("bronze", unique_name)) == 4


def test_a_stop_between_the_outbox_append_and_the_dead_letters_is_completed_by_the_next_run(
        spark, kafka_bootstrap: str, tmp_path: Path, unique_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``errors.tolerance=all`` the dead letters are written after the outbox append (their
    count comes from the append's own job); a run stopped in between replays the batch: the
    outbox keeps its rows once, the dead letters are written, every good record is published once."""
    from pubsub_connect.pipelines import dead_letters

    create_topic(kafka_bootstrap, unique_name)
    produce(kafka_bootstrap, unique_name, [Rec(b'{"ok": 1}'), Rec(b"{not json"), Rec(b'{"ok": 3}')])
    _, subscription = create_topic_and_subscription(unique_name)
    connector = sink_config(unique_name, unique_name, unique_name, **{
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false", "errors.tolerance": "all"})
    dead_lettered = dead_letters.dead_letter

    def stopped(*args, **kwargs):
        raise ConnectorError("stopped between the appends")

    monkeypatch.setattr(dead_letters, "dead_letter", stopped)
    with pytest.raises(ConnectorError, match="stopped between the appends"):
        run_once(spark, kafka_bootstrap, tmp_path, connector)
    from e2e.harness import context

    store = context(spark, kafka_bootstrap, tmp_path).store
    assert store.count(TableRef("outbox", unique_name)) == 2
    assert store.count(TableRef("dlq", unique_name)) == 0

    monkeypatch.setattr(dead_letters, "dead_letter", dead_lettered)
    run_once(spark, kafka_bootstrap, tmp_path, connector)
    assert store.count(TableRef("outbox", unique_name)) == 2
    dlq = store.read(TableRef("dlq", unique_name)).collect()
    assert [(r.partition, r.offset, r.value) for r in dlq] == [(0, 1, b"{not json")]
    assert sorted(m.data for m in pull_all(subscription, 2, timeout=60)) == [b'{"ok":1}', b'{"ok":3}']
    assert_no_more_messages(subscription, wait=1.0)


def test_tolerance_none_stops_at_the_first_bad_record(spark, kafka_bootstrap: str, tmp_path: Path,
                                                      unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name)
    produce(kafka_bootstrap, unique_name, [Rec(b"1"), Rec(b"oops"), Rec(b"3")])
    create_topic_and_subscription(unique_name)
    connector = sink_config(unique_name, unique_name, unique_name, **{
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false"})
    with pytest.raises(ConnectorError) as err:
        run_once(spark, kafka_bootstrap, tmp_path, connector)
    message = str(err.value)
    assert message.startswith(f"{unique_name} convert: record {unique_name}/0@1 cannot be converted: ")
    assert "errors.tolerance=none" in message and "\n" not in message
    from e2e.harness import context

    store = context(spark, kafka_bootstrap, tmp_path).store
    assert store.count(TableRef("outbox", unique_name)) == 0  # nothing of the failed batch was written
    assert store.count(TableRef("dlq", unique_name)) == 0


def test_ordering_key_preserves_order_per_key(spark, kafka_bootstrap: str, tmp_path: Path, unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name, partitions=3)
    keys = [f"k{i}".encode() for i in range(6)]
    total = 1200
    produce(kafka_bootstrap, unique_name,
            [Rec(struct.pack(">I", seq), key=keys[seq % len(keys)]) for seq in range(total)])
    _, subscription = create_topic_and_subscription(unique_name, ordering=True)
    connector = sink_config(unique_name, unique_name, unique_name, **{
        "key.converter": "org.apache.kafka.connect.storage.StringConverter", "orderingKeySource": "key",
        "tasks.max": "3"})
    run_once(spark, kafka_bootstrap, tmp_path, connector)

    messages = pull_all(subscription, total, timeout=120)
    per_key: dict[str, list[int]] = {}
    for message in messages:
        assert message.ordering_key == message.attributes["key"]
        per_key.setdefault(message.ordering_key, []).append(struct.unpack(">I", message.data)[0])
    # each key's records, each once, in the order produced (its Kafka order)
    assert per_key == {key.decode(): list(range(i, total, len(keys))) for i, key in enumerate(keys)}
