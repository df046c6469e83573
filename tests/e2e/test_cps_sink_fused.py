"""Cloud Pub/Sub sink with ``pipeline.mode=fused``, end to end: real Apache Kafka broker → one
streaming query that lands bronze while it converts and publishes → Google's Pub/Sub emulator.

The messages must be exactly the staged mode's (the same data model); what differs is what is
written (bronze and dead letters, no outbox) and how a connector moves between the modes: its
position carries over with no gap and no message published twice.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e.harness import context, run_once, sink_config
from integration.kafka_helpers import Rec, create_topic, produce
from integration.pubsub_helpers import assert_no_more_messages, create_topic_and_subscription, pull_all
from pubsub_connect.io.tables import TableRef
from pubsub_connect.pipelines import fused_sink
from pubsub_connect.pipelines.context import ConnectorError
from pubsub_connect.pipelines.runner.supervisor import run_stages
from pubsub_connect.pipelines.runtime import stages_for

pytestmark = pytest.mark.usefixtures("pubsub_emulator_host")

FUSED = {"pipeline.mode": "fused"}
STRING = "org.apache.kafka.connect.storage.StringConverter"
JSON = "org.apache.kafka.connect.json.JsonConverter"


def seq_records(ids: range) -> list[Rec]:
    return [Rec(f"seq-{i}".encode(), key=f"k{i % 3}".encode(), partition=i % 2) for i in ids]


def pulled_ids(subscription: str, count: int) -> list[int]:
    """The sequence ids of ``count`` messages pulled, then nothing more."""
    ids = sorted(int(m.data.decode().removeprefix("seq-")) for m in pull_all(subscription, count, timeout=60))
    assert_no_more_messages(subscription, wait=1.0)
    return ids


def publishes_the_staged_modes_messages(spark, kafka_bootstrap: str, tmp_path: Path, unique_name: str) -> list[str]:
    """The staged end-to-end test's records through one fused query: exactly its messages, and
    progress from the fused query alone. Returns the run's progress lines. (The cluster tests run
    it too, with ``run_once`` on the cluster.)"""
    create_topic(kafka_bootstrap, unique_name, partitions=3)
    produce(kafka_bootstrap, unique_name, [
        Rec(b"fox", key=b"dog", partition=2, headers=[("h1", b"v1"), ("bad", b"\xff\xfe")]),
        Rec(None, key=None, partition=2),
        Rec(b"", key=b"cat", partition=1),
        Rec(b"\x00\x01binary", key=None, partition=0, headers=[("k" * 300, b"too long key")]),
    ])
    _, subscription = create_topic_and_subscription(unique_name)
    connector = sink_config(unique_name, unique_name, unique_name, **FUSED, **{
        "key.converter": STRING, "metadata.publish": "true", "headers.publish": "true"})
    lines: list[str] = []
    run_once(spark, kafka_bootstrap, tmp_path, connector, lines)

    pulled = pull_all(subscription, 4, timeout=60)
    got = {(m.attributes["kafka.partition"], m.attributes["kafka.offset"]): m for m in pulled}
    assert all(int(m.attributes.pop("kafka.timestamp")) > 1_600_000_000_000 for m in pulled)
    common = {"kafka.topic": unique_name}
    assert {key: (m.data, m.attributes) for key, m in got.items()} == {
        ("2", "0"): (b"fox", {**common, "key": "dog", "kafka.partition": "2", "kafka.offset": "0", "h1": "v1",
                              "bad": "\ufffd\ufffd"}),
        ("2", "1"): (b"", {**common, "kafka.partition": "2", "kafka.offset": "1"}),
        ("1", "0"): (b"", {**common, "key": "cat", "kafka.partition": "1", "kafka.offset": "0"}),
        ("0", "0"): (b"\x00\x01binary", {**common, "kafka.partition": "0", "kafka.offset": "0"}),
    }
    assert_no_more_messages(subscription, wait=1.0)
    own = [line.split(" rate=")[0] for line in lines if line.startswith(f"[{unique_name}.")]
    assert f"[{unique_name}.fused] batch=0 records=4" in own, lines
    assert not [line for line in own if "] batch=" in line and not line.startswith(f"[{unique_name}.fused]")], lines
    return lines


@pytest.mark.compat
def test_one_query_publishes_the_staged_modes_messages(spark, kafka_bootstrap: str, tmp_path: Path,
                                                       unique_name: str) -> None:
    lines = publishes_the_staged_modes_messages(spark, kafka_bootstrap, tmp_path, unique_name)
    # one query: its progress lines, no stage of the staged mode
    assert [line.split(" rate=")[0] for line in lines] == [
        f"[{unique_name}.fused] no offsets in consumer group connect-{unique_name}: starting at "
        "auto.offset.reset=earliest",
        f"[{unique_name}.fused] batch=0 records=4"]
    store = context(spark, kafka_bootstrap, tmp_path).store
    bronze = store.read(TableRef("bronze", unique_name))
    assert sorted((r.partition, r.offset, r.value) for r in bronze.collect()) == [
        (0, 0, b"\x00\x01binary"), (1, 0, b""), (2, 0, b"fox"), (2, 1, None)]
    assert not store.exists(TableRef("outbox", unique_name))


def test_json_and_dead_letters_with_tolerance_all(spark, kafka_bootstrap: str, tmp_path: Path,
                                                  unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name)
    produce(kafka_bootstrap, unique_name, [
        Rec(b'{"ok": 1}'), Rec(b"{not json"), Rec(b'[1, {"nested": true}]'), Rec(b"\xff\xfe")])
    _, subscription = create_topic_and_subscription(unique_name)
    connector = sink_config(unique_name, unique_name, unique_name, **FUSED, **{
        "value.converter": JSON, "value.converter.schemas.enable": "false", "errors.tolerance": "all"})
    ctx = run_once(spark, kafka_bootstrap, tmp_path, connector)

    assert sorted(m.data for m in pull_all(subscription, 2, timeout=60)) == [b'[1,{"nested":true}]', b'{"ok":1}']
    assert_no_more_messages(subscription, wait=1.0)
    dlq = ctx.store.read(TableRef("dlq", unique_name)).orderBy("offset").collect()
    assert [(r.stage, r.topic, r.partition, r.offset, r.value) for r in dlq] == [
        ("convert", unique_name, 0, 1, b"{not json"), ("convert", unique_name, 0, 3, b"\xff\xfe")]
    assert all(r.error_class and r.error_message and "\n" not in r.error_message for r in dlq)
    assert ctx.store.count(TableRef("bronze", unique_name)) == 4


def test_tolerance_none_publishes_nothing_of_the_batch_and_stops_in_one_line(
        spark, kafka_bootstrap: str, tmp_path: Path, unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name)
    produce(kafka_bootstrap, unique_name, [Rec(b"1"), Rec(b"oops"), Rec(b"3")])
    _, subscription = create_topic_and_subscription(unique_name)
    connector = sink_config(unique_name, unique_name, unique_name, **FUSED, **{
        "value.converter": JSON, "value.converter.schemas.enable": "false"})
    with pytest.raises(ConnectorError) as err:
        run_once(spark, kafka_bootstrap, tmp_path, connector)
    message = str(err.value)
    assert message.startswith(f"{unique_name} fused: record {unique_name}/0@1 cannot be converted: ")
    assert message.endswith("(errors.tolerance=none; set errors.tolerance=all to dead-letter such records)")
    assert "\n" not in message
    assert_no_more_messages(subscription, wait=1.0)  # not even the records before the bad one
    store = context(spark, kafka_bootstrap, tmp_path).store
    assert store.count(TableRef("dlq", unique_name)) == 0
    assert store.count(TableRef("bronze", unique_name)) == 3  # landed, as the staged ingest does


def test_switching_modes_keeps_the_position(spark, kafka_bootstrap: str, tmp_path: Path, unique_name: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """staged (ingest only: bronze ahead of convert and publish) → fused → a fused batch cut short
    after its bronze append → staged: every record published exactly once, bronze once per offset."""
    create_topic(kafka_bootstrap, unique_name, partitions=2)
    _, subscription = create_topic_and_subscription(unique_name)
    staged = sink_config(unique_name, unique_name, unique_name)
    fused = sink_config(unique_name, unique_name, unique_name, **FUSED)
    lines: list[str] = []

    produce(kafka_bootstrap, unique_name, seq_records(range(0, 100)))
    ingest = [stage for stage in stages_for("cps_sink") if stage.name == "ingest"]
    run_stages(context(spark, kafka_bootstrap, tmp_path, lines), staged, ingest)
    assert pulled_ids(subscription, 0) == []  # in bronze, not yet converted

    produce(kafka_bootstrap, unique_name, seq_records(range(100, 200)))
    run_once(spark, kafka_bootstrap, tmp_path, fused, lines)
    assert pulled_ids(subscription, 200) == list(range(200))

    # a fused batch cut short: in bronze, never published (the publish fails)
    produce(kafka_bootstrap, unique_name, seq_records(range(200, 300)))
    publish = fused_sink.SinkPublishing.__init__

    def failing(self, *args, **kwargs):
        publish(self, *args, **kwargs)
        object.__setattr__(self, "publish", lambda rows, shuffled: (_ for _ in ()).throw(ConnectionError("cut short")))

    monkeypatch.setattr(fused_sink.SinkPublishing, "__init__", failing)
    with pytest.raises(ConnectorError, match="cut short"):
        run_once(spark, kafka_bootstrap, tmp_path, fused, lines, **{"pipeline.restart.timeout.ms": "0"})
    monkeypatch.undo()
    assert pulled_ids(subscription, 0) == []

    produce(kafka_bootstrap, unique_name, seq_records(range(300, 400)))
    run_once(spark, kafka_bootstrap, tmp_path, staged, lines)  # hands back: the fused query finishes first
    produce(kafka_bootstrap, unique_name, seq_records(range(400, 500)))
    ctx = run_once(spark, kafka_bootstrap, tmp_path, staged, lines)
    assert pulled_ids(subscription, 300) == list(range(200, 500))

    bronze = ctx.store.read(TableRef("bronze", unique_name)).collect()
    assert sorted(int(r.value.decode().removeprefix("seq-")) for r in bronze) == list(range(500))
    hand_overs = [line for line in lines if "taking over from" in line]
    assert hand_overs == [
        f"[{unique_name}.fused] taking over from pipeline.mode=staged: convert and publish finish what bronze "
        "holds first",
        f"[{unique_name}.ingest] taking over from pipeline.mode=fused: the fused query finishes what Kafka holds "
        "first"]
    assert json.loads((tmp_path / "checkpoints" / unique_name / "mode.json").read_text()) == {"mode": "staged"}
