"""Cloud Pub/Sub source, end to end: Google's Pub/Sub emulator → Delta → a real Apache Kafka broker.

Messages are published with a plain client and read back from Kafka with a plain
``read_committed`` consumer; assertions are exact (keys, values, headers, partitions).
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from e2e.harness import batches_of_one_stage_run, context, run_once, source_config
from integration.kafka_helpers import consume_all, create_topic
from integration.pubsub_helpers import (
    create_subscription,
    create_topic_and_subscription,
    publish,
    pull_distinct,
)
from pubsub_connect.io.tables import TableRef
from pubsub_connect.model.schemas import PUBSUB_BRONZE
from pubsub_connect.pipelines import cps_pull, cps_source
from pubsub_connect.pipelines.context import ConnectorError

pytestmark = pytest.mark.usefixtures("pubsub_emulator_host")

JSON = "org.apache.kafka.connect.json.JsonConverter"


def _publish_in_order(topic: str, messages: list) -> list[str]:
    """One at a time, so publish times (and so round-robin order) follow the list."""
    return [publish(topic, [m])[0] for m in messages]


#: The data model's worked examples, in publish order, and the connector keys they need.
DATA_MODEL_MESSAGES = [
    b"the", b"quick", b"brown", b"fox",                  # no attributes: round robin 0, 1, 2, 0
    (b"jumped-data", {"fox": "jumped"}, None),           # key attribute -> key, value = data
    (b"over-data", {"over": "1234567890"}, None),        # timestamp attribute -> timestamp
]
DATA_MODEL_KEYS = {"kafka.key.attribute": "fox", "kafka.timestamp.attribute": "over", "kafka.partition.count": "3",
                   "kafka.partition.scheme": "round_robin", "kafka.record.headers": "true"}


def assert_data_model_examples(bootstrap: str, topic: str) -> None:
    """The Kafka records of :data:`DATA_MODEL_MESSAGES` (a topic of 3 partitions), exactly."""
    records = {r.value: r for r in consume_all(bootstrap, topic)}
    assert sorted(records) == [b"brown", b"fox", b"jumped-data", b"over-data", b"quick", b"the"]
    assert [records[v].partition for v in (b"the", b"quick", b"brown", b"fox")] == [0, 1, 2, 0]
    assert all(records[v].key is None and not records[v].headers for v in (b"the", b"quick", b"brown", b"fox"))
    assert records[b"jumped-data"].key == b"jumped"
    assert records[b"over-data"].timestamp_ms == 1234567890
    assert records[b"over-data"].key is None
    assert records[b"jumped-data"].partition == 1 and records[b"over-data"].partition == 2  # counter continues


@pytest.mark.compat
def test_data_model_examples(spark, kafka_bootstrap: str, tmp_path: Path, unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name, partitions=3)
    _, subscription = create_topic_and_subscription(unique_name)
    _publish_in_order(unique_name, DATA_MODEL_MESSAGES)
    run_once(spark, kafka_bootstrap, tmp_path, source_config(unique_name, subscription, unique_name, **DATA_MODEL_KEYS))
    assert_data_model_examples(kafka_bootstrap, unique_name)


def test_struct_value_versus_headers(spark, kafka_bootstrap: str, tmp_path: Path, unique_name: str) -> None:
    topic, struct_sub = create_topic_and_subscription(unique_name)
    headers_sub = create_subscription(topic, f"{unique_name}-headers")
    create_topic(kafka_bootstrap, f"{unique_name}-struct")
    create_topic(kafka_bootstrap, f"{unique_name}-headers")
    publish(unique_name, [(b"data", {"fox": "jumped", "attribute1": "a", "attribute2": "b"}, None)])

    as_struct = source_config(f"{unique_name}-s", struct_sub, f"{unique_name}-struct", **{
        "kafka.key.attribute": "fox", "value.converter": JSON, "value.converter.schemas.enable": "true"})
    as_headers = source_config(f"{unique_name}-h", headers_sub, f"{unique_name}-headers", **{
        "kafka.key.attribute": "fox", "kafka.record.headers": "true"})
    run_once(spark, kafka_bootstrap, tmp_path, as_struct)
    run_once(spark, kafka_bootstrap, tmp_path, as_headers)

    (struct_record,) = consume_all(kafka_bootstrap, f"{unique_name}-struct")
    assert struct_record.key == b"jumped"
    envelope = json.loads(struct_record.value)
    assert envelope["payload"] == {"message": "ZGF0YQ==", "attribute1": "a", "attribute2": "b"}
    assert [(f["field"], f["type"]) for f in envelope["schema"]["fields"]] == [
        ("message", "bytes"), ("attribute1", "string"), ("attribute2", "string")]
    (header_record,) = consume_all(kafka_bootstrap, f"{unique_name}-headers")
    assert (header_record.key, header_record.value) == (b"jumped", b"data")
    assert sorted(header_record.headers) == [("attribute1", b"a"), ("attribute2", b"b")]


def test_byte_array_converter_writes_messages_without_attributes(spark, kafka_bootstrap: str, tmp_path: Path,
                                                                  unique_name: str) -> None:
    """``ByteArrayConverter`` with ``kafka.record.headers=false``, as a user of Google's source has
    it: messages without attributes reach Kafka as their data; one with attributes (a STRUCT value
    it cannot write) stops the connector in one line under ``errors.tolerance=none`` and is a dead
    letter under ``all``."""
    create_topic(kafka_bootstrap, unique_name)
    _, subscription = create_topic_and_subscription(unique_name)
    ids = _publish_in_order(unique_name, [(b"one", {}, None), (b"attributed", {"a": "1"}, None), (b"two", {}, None)])
    connector = source_config(unique_name, subscription, unique_name)  # ByteArrayConverter, headers off
    with pytest.raises(ConnectorError) as err:
        run_once(spark, kafka_bootstrap, tmp_path, connector)
    assert str(err.value).startswith(f"{unique_name} convert: record message_id {ids[1]} cannot be converted: "
                                     "StructConverterError: value.converter=ByteArrayConverter cannot write a "
                                     "message with attributes"), str(err.value)
    assert "\n" not in str(err.value) and consume_all(kafka_bootstrap, unique_name) == []

    tolerant = source_config(unique_name, subscription, unique_name, **{"errors.tolerance": "all"})
    ctx = run_once(spark, kafka_bootstrap, tmp_path, tolerant)
    assert sorted((r.key, r.value, r.headers) for r in consume_all(kafka_bootstrap, unique_name)) == [
        (None, b"one", None), (None, b"two", None)]
    dead = ctx.store.read(TableRef("dlq", unique_name)).select("message_id", "value", "error_class").collect()
    assert [tuple(r) for r in dead] == [(ids[1], b"attributed", "StructConverterError")]


#: The partition of each key of :func:`test_partition_schemes` (3 Kafka partitions), computed once
#: by the JVM and Kafka's client, not by the code under test (literals, so that a wrong hash fails):
#: ``Math.abs(key.hashCode()) % 3`` for ``hash_key`` and ``ordering_key`` (the ordering key equals
#: the key here); ``Math.abs(Arrays.hashCode(data)) % 3`` for ``hash_value``; the producer's
#: ``Utils.toPositive(Utils.murmur2(key)) % 3`` for ``kafka_partitioner``. One divergence:
#: ``"polygenelubricants".hashCode()`` is -2147483648, for which Java's ``Math.abs`` gives -2 (a
#: record the original can never send); here that hash goes to partition 0.
BY_KEY_HASH = {"jumped": 1, "dog": 2, "polygenelubricants": 0, "my-key": 0, "fox": 0}
SCHEME_PARTITIONS = {
    "hash_key": BY_KEY_HASH,
    "ordering_key": BY_KEY_HASH,
    "hash_value": {"jumped": 2, "dog": 0, "polygenelubricants": 1, "my-key": 0, "fox": 2},
    "kafka_partitioner": {"jumped": 2, "dog": 2, "polygenelubricants": 2, "my-key": 0, "fox": 1},
}


@pytest.mark.parametrize("scheme", ["hash_key", "hash_value", "ordering_key", "kafka_partitioner"])
def test_partition_schemes(spark, kafka_bootstrap: str, tmp_path: Path, unique_name: str, scheme: str) -> None:
    create_topic(kafka_bootstrap, unique_name, partitions=3)
    _, subscription = create_topic_and_subscription(unique_name)
    keys = ["jumped", "dog", "polygenelubricants", "my-key", "fox"]
    publish(unique_name, [(f"data-{k}".encode(), {"k": k}, k) for k in keys])
    connector = source_config(unique_name, subscription, unique_name, **{
        "kafka.key.attribute": "k", "kafka.partition.scheme": scheme, "kafka.partition.count": "3",
        "kafka.record.headers": "true"})
    run_once(spark, kafka_bootstrap, tmp_path, connector)

    got = sorted((r.key.decode(), r.partition) for r in consume_all(kafka_bootstrap, unique_name))
    assert got == sorted(SCHEME_PARTITIONS[scheme].items())  # each key once, on its partition


@pytest.mark.parametrize("streaming", [False, True], ids=["sync-pull", "streaming-pull"])
def test_pull_modes_deliver_each_message_once(spark, kafka_bootstrap: str, tmp_path: Path, unique_name: str,
                                              streaming: bool) -> None:
    create_topic(kafka_bootstrap, unique_name, partitions=3)
    _, subscription = create_topic_and_subscription(unique_name)
    total = 500
    publish(unique_name, [(f"m{i}".encode(), {"seq": str(i)}, None) for i in range(total)])
    connector = source_config(unique_name, subscription, unique_name, **{
        "kafka.record.headers": "true", "kafka.partition.count": "3", "cps.maxBatchSize": "50",
        "cps.streamingPull.enabled": str(streaming).lower(), "tasks.max": "2"})
    run_once(spark, kafka_bootstrap, tmp_path, connector, **{"pipeline.max.records.per.batch": "120"})

    seqs = sorted(int(dict(r.headers)["seq"]) for r in consume_all(kafka_bootstrap, unique_name))
    assert seqs == list(range(total))


def test_redelivery_after_crash_between_commit_and_ack(spark, kafka_bootstrap: str, tmp_path: Path,
                                                       unique_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    create_topic(kafka_bootstrap, unique_name)
    _, subscription = create_topic_and_subscription(unique_name, ack_deadline_seconds=10)
    total = 40
    ids = publish(unique_name, [(f"m{i}".encode(), {"seq": str(i)}, None) for i in range(total)])
    connector = source_config(unique_name, subscription, unique_name, **{"kafka.record.headers": "true"})

    class Crash(RuntimeError):
        pass

    def crash_before_ack(self, messages) -> None:
        raise Crash("process died after the Delta commit, before the ack")

    with monkeypatch.context() as patch:
        patch.setattr(cps_pull.Puller, "_ack", crash_before_ack)
        with pytest.raises(ConnectorError, match="before the ack"):
            run_once(spark, kafka_bootstrap, tmp_path, connector)
    # Pub/Sub redelivers the unacked messages once their lease runs out: wait until each has
    # come back (handed straight back to the subscription), then run until the redelivered
    # copies have landed in bronze.
    pull_distinct(subscription, set(ids), lambda m: m.message_id, timeout=cps_pull.LEASE_S + 60, hand_back=True)
    ctx = None
    for _ in range(5):
        ctx = run_once(spark, kafka_bootstrap, tmp_path, connector)
        if ctx.store.row_count(TableRef("bronze", unique_name)) >= 2 * total:
            break
    records = consume_all(kafka_bootstrap, unique_name)
    seqs = sorted(int(dict(r.headers)["seq"]) for r in records)
    assert seqs == list(range(total))  # exactly one Kafka record per message
    bronze = ctx.store.read(TableRef("bronze", unique_name))
    landed = sorted(r.message_id for r in bronze.select("message_id").collect())
    # every published message landed in bronze twice — its delivery and its redelivery — and
    # nothing else did; the convert stage made one Kafka record of each (above)
    assert landed == sorted(ids * 2)


def test_bad_message_goes_to_dlq(spark, kafka_bootstrap: str, tmp_path: Path, unique_name: str) -> None:
    """The bad message lands in the DLQ table and, with ``errors.deadletterqueue.topic.name``, in
    that topic too (produced from the batch's rows as converted, before the table holds them: the
    conversion looks up the DLQ table for messages already dead-lettered)."""
    create_topic(kafka_bootstrap, unique_name)
    create_topic(kafka_bootstrap, f"{unique_name}-dlq")
    _, subscription = create_topic_and_subscription(unique_name)
    # an attribute named like the struct's body field collides with it
    publish(unique_name, [(b"ok", {"a": "1"}, None), (b"bad", {"message": "clash"}, None)])
    connector = source_config(unique_name, subscription, unique_name, **{
        "value.converter": JSON, "errors.tolerance": "all", "errors.deadletterqueue.topic.name": f"{unique_name}-dlq"})
    ctx = run_once(spark, kafka_bootstrap, tmp_path, connector)

    (record,) = consume_all(kafka_bootstrap, unique_name)
    assert json.loads(record.value)["payload"] == {"message": "b2s=", "a": "1"}
    (dead,) = ctx.store.read(TableRef("dlq", unique_name)).collect()
    assert (dead.stage, dead.value, dead.attributes) == ("convert", b"bad", {"message": "clash"})
    assert dead.error_class == "DuplicateFieldError" and "message" in dead.error_message
    assert [(r.key, r.value) for r in consume_all(kafka_bootstrap, f"{unique_name}-dlq")] == [(None, b"bad")]


def test_tolerance_none_stops_at_the_first_bad_message_and_writes_nothing_of_its_batch(
        spark, kafka_bootstrap: str, tmp_path: Path, unique_name: str) -> None:
    """Connect's default tolerance: the convert stops naming the first bad message (by message id),
    nothing of that micro-batch reaches the outbox or Kafka; with ``errors.tolerance=all`` the
    same batch then converts, the good messages reach Kafka once and the bad ones the DLQ."""
    create_topic(kafka_bootstrap, unique_name)
    _, subscription = create_topic_and_subscription(unique_name)
    ids = _publish_in_order(unique_name, [(b"one", {"a": "1"}, None), (b"bad-1", {"message": "clash"}, None),
                                          (b"two", {"a": "2"}, None), (b"bad-2", {"message": "clash"}, None)])
    connector = source_config(unique_name, subscription, unique_name, **{"value.converter": JSON})
    with pytest.raises(ConnectorError) as err:
        run_once(spark, kafka_bootstrap, tmp_path, connector)
    message = str(err.value)
    first_bad = min(ids[1], ids[3])
    assert message.startswith(f"{unique_name} convert: record message_id {first_bad} cannot be converted: "
                              "DuplicateFieldError: "), message
    assert "errors.tolerance=none" in message and "\n" not in message
    store = context(spark, kafka_bootstrap, tmp_path).store
    assert store.count(TableRef("outbox", unique_name)) == 0
    assert store.count(TableRef("dlq", unique_name)) == 0
    assert consume_all(kafka_bootstrap, unique_name) == []

    tolerant = source_config(unique_name, subscription, unique_name, **{"value.converter": JSON,
                                                                         "errors.tolerance": "all"})
    ctx = run_once(spark, kafka_bootstrap, tmp_path, tolerant)
    payloads = sorted(json.loads(r.value)["payload"]["a"] for r in consume_all(kafka_bootstrap, unique_name))
    assert payloads == ["1", "2"]
    dead = ctx.store.read(TableRef("dlq", unique_name)).select("message_id", "value").collect()
    assert sorted((r.message_id, r.value) for r in dead) == sorted([(ids[1], b"bad-1"), (ids[3], b"bad-2")])
    assert ctx.store.count(TableRef("outbox", unique_name)) == 2


def test_pull_appends_after_a_restart(spark, kafka_bootstrap: str, tmp_path: Path, unique_name: str) -> None:
    """A restarted pull stage appends what it pulls (ten messages per append here) to the bronze
    rows already there: every message is in bronze exactly once after two runs, and in Kafka."""
    create_topic(kafka_bootstrap, unique_name)
    _, subscription = create_topic_and_subscription(unique_name)
    connector = source_config(unique_name, subscription, unique_name, **{
        "kafka.record.headers": "true", "cps.maxBatchSize": "10", "tasks.max": "1"})
    worker = {"pipeline.max.records.per.batch": "10"}
    publish(unique_name, [(f"a{i}".encode(), {"seq": str(i)}, None) for i in range(30)])
    ctx = run_once(spark, kafka_bootstrap, tmp_path, connector, **worker)
    bronze = TableRef("bronze", unique_name)
    assert ctx.store.count(bronze) == 30
    publish(unique_name, [(f"b{i}".encode(), {"seq": str(30 + i)}, None) for i in range(25)])
    ctx = run_once(spark, kafka_bootstrap, tmp_path, connector, **worker)  # the stage starts again
    rows = ctx.store.read(bronze).select("message_id", "attributes").collect()
    assert sorted(int(r.attributes["seq"]) for r in rows) == list(range(55))
    assert len({r.message_id for r in rows}) == 55
    seqs = sorted(int(dict(r.headers)["seq"]) for r in consume_all(kafka_bootstrap, unique_name))
    assert seqs == list(range(55))


def _pulled(spark, messages: list[tuple[str, int]]):
    """Bronze rows of pulled messages ``(message_id, publish second)``, as one file (one pull commit)."""
    rows = [(mid, b"data-" + mid.encode(), {}, None, datetime.datetime(2026, 1, 1, 0, 0, second,
                                                                         tzinfo=datetime.timezone.utc),
             None, "s", datetime.datetime(2026, 1, 1, 0, 1, tzinfo=datetime.timezone.utc)) for mid, second in messages]
    return spark.createDataFrame(rows, PUBSUB_BRONZE).coalesce(1)


def test_round_robin_continues_across_convert_batches_and_restarts(spark, kafka_bootstrap: str, tmp_path: Path,
                                                                   unique_name: str) -> None:
    """Round robin continues from the outbox's row count: within one run of the convert stage
    (two micro-batches, the count moved by what the stage appended, a redelivered message not
    counted) and after a restart (the count asked of Delta again)."""
    connector = source_config(unique_name, "s", unique_name, **{
        "kafka.partition.count": "4", "kafka.partition.scheme": "round_robin", "kafka.record.headers": "true"})
    root = tmp_path / "storage"

    def run_convert() -> int:
        """The convert stage run once; one bronze file (pull commit) per micro-batch."""
        return batches_of_one_stage_run(spark, kafka_bootstrap, root, cps_source.convert, connector,
                                        **{"pipeline.max.files.per.trigger": "1"})

    ctx = context(spark, kafka_bootstrap, root)
    bronze = cps_pull.ensure_bronze(ctx, connector)
    first = [("m1", 1), ("m2", 2), ("m3", 3)]
    second = [("m2", 2), ("m4", 4), ("m5", 5)]  # m2 redelivered: dropped, and not counted
    third = [("m6", 6), ("m7", 7)]
    for batch_id, messages in enumerate((first, second)):
        ctx.store.append_batch(bronze, _pulled(spark, messages), "pull", batch_id)
    assert run_convert() == 2
    ctx.store.append_batch(bronze, _pulled(spark, third), "pull", 2)
    assert run_convert() == 1

    rows = ctx.store.read(TableRef("outbox", unique_name)).select("message_id", "partition").collect()
    assert sorted((r.message_id, r.partition) for r in rows) == [
        ("m1", 0), ("m2", 1), ("m3", 2),  # first batch: from 0
        ("m4", 3), ("m5", 0),             # second: from the 3 rows appended before it
        ("m6", 1), ("m7", 2),             # after the restart: from the 5 rows Delta counts
    ]
