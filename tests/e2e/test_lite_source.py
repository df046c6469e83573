"""Pub/Sub Lite source, end to end: the local Lite server → Delta → real Apache Kafka broker.

Messages are appended to the server's partitions directly (so offsets and publish times are
known); the connector runs as ``pubsub-connect run`` in a subprocess (see
``test_lite_sink.py`` for why) and Kafka is read back with a plain ``read_committed`` consumer.
As in the sink tests, the scenarios are prepared once (:func:`source_run`) and run in two CLI
invocations: the recovery connector's pull stage alone, killed mid-stream, then ``run --once``
of both connectors. Assertions are exact: keys, values, headers, timestamps, partitions,
per-batch flow control, committed cursors.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
from google.cloud.pubsublite_v1.types import common

from e2e.harness import batches_of_one_stage_run, context, scenarios_to_run
from e2e.test_lite_sink import (
    cli,
    kill_after,
    lite_path,
    read_table,
    write_connector,
    write_worker,
)
from integration.kafka_helpers import consume_all, create_topic
from lite_server import LiteServer
from pubsub_connect.config import loader as cfg
from pubsub_connect.io.tables import TableRef
from pubsub_connect.pipelines import lite_source

PubSubMessage = common.PubSubMessage.pb()


def message(key: bytes, data: bytes, attributes: dict[str, list[bytes]] | None = None,
            event_ms: int | None = None) -> Any:
    m = PubSubMessage(key=key, data=data)
    for name, values in (attributes or {}).items():
        m.attributes[name].values.extend(values)
    if event_ms is not None:
        m.event_time.seconds, m.event_time.nanos = divmod(event_ms, 1000)[0], event_ms % 1000 * 1_000_000
    return m


def publish_ms(seq: Any) -> int:
    return seq.publish_time.seconds * 1000 + seq.publish_time.nanos // 1_000_000


def source_connector(tmp_path: Path, name: str, lite: LiteServer, kafka_topic: str, **keys: str) -> Path:
    return write_connector(tmp_path, name, lite, **{
        "connector.class": "com.google.pubsublite.kafka.source.PubSubLiteSourceConnector",
        "pubsublite.subscription": name, "kafka.topic": kafka_topic, **keys})


def pull_batches(root: Path, name: str) -> list[dict[int, int]]:
    """Messages per Lite partition in each bronze commit (one commit per pull micro-batch)."""
    from deltalake import DeltaTable

    latest = DeltaTable(str(root / "bronze" / name)).version()
    counts, previous = [], {}
    for version in range(1, latest + 1):
        parts = DeltaTable(str(root / "bronze" / name), version=version).to_pyarrow_table(
            columns=["partition"]).column("partition").to_pylist()
        now = {p: parts.count(p) for p in set(parts)}
        added = {p: n - previous.get(p, 0) for p, n in now.items() if n > previous.get(p, 0)}
        if added:
            counts.append(added)
        previous = now
    return counts


BIG = b"x" * 100
#: The Java producer's partition of each key used here (``Utils.toPositive(Utils.murmur2(key)) % n``
#: for n Kafka partitions), computed once by Kafka's own client, not by the code under test
#: (literals, so that a wrong hash fails): the model topic has 4 partitions, the recovery one 2.
KEY_PARTITION_OF_4 = {b"dog": 0, b"fox": 0}
KEY_PARTITION_OF_2 = {b"k0": 1, b"k1": 1, b"k2": 1, b"k3": 0, b"k4": 0}
RECOVERY_FIRST, RECOVERY_TOTAL = 600, 900


def model_messages() -> dict[int, list[Any]]:
    """Per Lite partition: the mapping's worked cases, keys spread over partitions, message sizes
    that make the byte limit bind in partition 0 and the message limit in partition 1."""
    return {
        0: [message(b"", b"the-data", {"b": [b"2"], "a": [b"1", b"x"]}, event_ms=50_001),  # mapping example
            message(b"fox", b"no-event-time"),                                               # publish time
            *[message(b"dog", BIG + b"%d" % i) for i in range(4)]],
        1: [message(b"" if i % 2 else b"dog", b"p1-%d" % i) for i in range(7)],
        2: [message(b"", b"p2-%d" % i) for i in range(2)],
    }


def recovery_messages(seqs: range) -> dict[int, list[Any]]:
    return {p: [message(b"k%d" % (i % 5), b"seq-%d" % i) for i in seqs if i % 3 == p] for p in range(3)}


#: The scenarios of the module fixture each test reads.
SOURCE_SCENARIOS = {
    "test_message_to_record_mapping": {"model"},
    "test_same_key_same_partition_null_keys_round_robin": {"model"},
    "test_partition_flow_control_bounds_each_pull_batch": {"model"},
    "test_cursors_are_committed_after_bronze": {"model"},
    "test_kill_9_mid_pull_then_restart_exactly_once": {"recovery"},
}


@pytest.fixture(scope="module")
def source_run(lite: LiteServer, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory,
               request: pytest.FixtureRequest) -> dict[str, Any]:
    """The source scenarios the selected tests read, prepared and run; returns names, paths,
    observations."""
    import uuid

    wanted = scenarios_to_run(request, SOURCE_SCENARIOS)

    tmp_path = tmp_path_factory.mktemp("lite-source")
    tag = f"t{uuid.uuid4().hex[:8]}"
    names = {"model": f"{tag}-m", "recovery": f"{tag}-r"}
    for scenario, kafka_partitions in (("model", 4), ("recovery", 2)):
        topic = lite_path("topics", names[scenario])
        lite.create_topic(topic, 3)
        lite.create_subscription(lite_path("subscriptions", names[scenario]), topic)
        create_topic(kafka_bootstrap, names[scenario], partitions=kafka_partitions)
    for scenario, messages in (("model", model_messages()), ("recovery", recovery_messages(range(RECOVERY_FIRST)))):
        for partition, batch in messages.items():
            lite.publish(lite_path("topics", names[scenario]), partition, batch)

    worker, root = write_worker(tmp_path, kafka_bootstrap, **{
        "pipeline.max.records.per.batch": "100", "pipeline.trigger.interval.ms": "100"})
    files = {
        "recovery": source_connector(tmp_path, names["recovery"], lite, names["recovery"]),
        "model": source_connector(tmp_path, names["model"], lite, names["model"], **{
            "pubsublite.partition_flow_control.messages": "3", "pubsublite.partition_flow_control.bytes": "250"}),
    }
    after_kill: dict[str, Any] = {}
    if "recovery" in wanted:
        # Run 1: the recovery connector's pull stage alone, killed after two batches.
        kill_after(["run", "--stage", "pull", "--worker", str(worker), str(files["recovery"])], lite,
                   tmp_path / "pull.log", f"[{names['recovery']}.pull] batch=1 ")
        subscription = lite_path("subscriptions", names["recovery"])
        after_kill = {"cursors": [lite.committed_cursor(subscription, p) for p in range(3)],
                      "bronze": read_table(root, "bronze", names["recovery"])}
        for partition, batch in recovery_messages(range(RECOVERY_FIRST, RECOVERY_TOTAL)).items():
            lite.publish(lite_path("topics", names["recovery"]), partition, batch)
    # Run 2: every wanted connector, every stage.
    result = cli(["run", "--once", "--worker", str(worker),
                  *(str(files[k]) for k in ("recovery", "model") if k in wanted)], lite)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-4000:]
    return {"names": names, "root": root, "after_kill": after_kill}


# ----------------------------------------------------------------------------------------------
# Tests
# ----------------------------------------------------------------------------------------------


@pytest.mark.compat
@pytest.mark.slow
def test_message_to_record_mapping(lite: LiteServer, kafka_bootstrap: str, source_run: dict[str, Any]) -> None:
    """Empty key → null, multi-valued attributes → repeated headers (sorted by name; values as
    Base64 text, as Connect's default SimpleHeaderConverter writes them), timestamp = event time
    if set, else publish time (ms)."""
    name = source_run["names"]["model"]
    logs = {p: lite.messages(lite_path("topics", name), p) for p in range(3)}
    records = consume_all(kafka_bootstrap, name)
    by_value = {r.value: r for r in records}
    assert len(records) == len(by_value) == 15
    first = by_value[b"the-data"]
    base64_headers = [("a", b"MQ=="), ("a", b"eA=="), ("b", b"Mg==")]  # "1", "x", "2"
    assert (first.key, first.headers, first.timestamp_ms) == (None, base64_headers, 50_001)
    fox = by_value[b"no-event-time"]
    assert (fox.key, fox.headers, fox.timestamp_ms) == (b"fox", None, publish_ms(logs[0][1]))
    for p, log in logs.items():
        for seq in log[1:] if p == 0 else log:
            assert by_value[seq.message.data].timestamp_ms == publish_ms(seq)
            assert by_value[seq.message.data].key == (seq.message.key or None)


@pytest.mark.slow
def test_same_key_same_partition_null_keys_round_robin(lite: LiteServer, kafka_bootstrap: str,
                                                       source_run: dict[str, Any]) -> None:
    name = source_run["names"]["model"]
    logs = {p: lite.messages(lite_path("topics", name), p) for p in range(3)}
    records = consume_all(kafka_bootstrap, name)
    by_value = {r.value: r for r in records}
    assert by_value[b"no-event-time"].partition == KEY_PARTITION_OF_4[b"fox"]
    # same key -> one Kafka partition (Kafka's murmur2) from any Lite partition, in Lite order
    dogs = sorted((r for r in records if r.key == b"dog"), key=lambda r: r.offset)
    assert {r.partition for r in dogs} == {KEY_PARTITION_OF_4[b"dog"]}
    assert [r.value for r in dogs if r.value.startswith(BIG)] == [BIG + b"%d" % i for i in range(4)]
    assert [r.value for r in dogs if r.value.startswith(b"p1-")] == [b"p1-0", b"p1-2", b"p1-4", b"p1-6"]
    # null keys round-robin over the 4 partitions, in Lite (partition, offset) order
    null_keyed = [(0, 0), (1, 1), (1, 3), (1, 5), (2, 0), (2, 1)]
    assert [by_value[logs[p][o].message.data].partition for p, o in null_keyed] == [0, 1, 2, 3, 0, 1]


@pytest.mark.slow
def test_partition_flow_control_bounds_each_pull_batch(lite: LiteServer, source_run: dict[str, Any]) -> None:
    """≤ 3 messages and ≤ 250 bytes (but ≥ 1 message) per partition and pull batch. Partition 0:
    41 + 20 + 108 bytes fit; then 3 x 108 bytes do not, 2 x 108 do; then the last one."""
    name = source_run["names"]["model"]
    assert [m.size_bytes for m in lite.messages(lite_path("topics", name), 0)] == [41, 20, 108, 108, 108, 108]
    assert pull_batches(source_run["root"], name) == [{0: 3, 1: 3, 2: 2}, {0: 2, 1: 3}, {0: 1, 1: 1}]


@pytest.mark.slow
def test_cursors_are_committed_after_bronze(lite: LiteServer, source_run: dict[str, Any]) -> None:
    name = source_run["names"]["model"]
    assert [lite.committed_cursor(lite_path("subscriptions", name), p) for p in range(3)] == [6, 7, 2]
    bronze = read_table(source_run["root"], "bronze", name)
    assert sorted(zip(bronze.column("partition").to_pylist(), bronze.column("offset").to_pylist(), strict=True)) == [
        (p, o) for p, n in enumerate((6, 7, 2)) for o in range(n)]


@pytest.mark.slow
def test_kill_9_mid_pull_then_restart_exactly_once(lite: LiteServer, kafka_bootstrap: str,
                                                   source_run: dict[str, Any]) -> None:
    """After the SIGKILL mid-pull the cursors had not passed what bronze held; after more
    messages and the restart, Kafka (read_committed) holds every message exactly once, each key
    in Lite order per Lite partition, and the cursors reached the heads."""
    name = source_run["names"]["recovery"]
    topic, subscription = lite_path("topics", name), lite_path("subscriptions", name)
    bronze, cursors = source_run["after_kill"]["bronze"], source_run["after_kill"]["cursors"]
    landed = dict.fromkeys(range(3), 0)  # next offset after what bronze held
    for p, o in zip(bronze.column("partition").to_pylist(), bronze.column("offset").to_pylist(), strict=True):
        landed[p] = max(landed[p], o + 1)
    assert all(cursors[p] <= landed[p] for p in range(3)) and 0 < sum(cursors) < RECOVERY_FIRST, (cursors, landed)

    records = consume_all(kafka_bootstrap, name)
    seqs = [int(r.value.removeprefix(b"seq-")) for r in records]
    assert sorted(seqs) == list(range(RECOVERY_TOTAL)), f"lost or duplicated: {len(seqs)} for {RECOVERY_TOTAL}"
    partitions: dict[bytes, set[int]] = {}
    for r in records:
        partitions.setdefault(r.key, set()).add(r.partition)
    # each key on its one Kafka partition (the producer's), whichever Lite partition it came from
    assert partitions == {key: {partition} for key, partition in KEY_PARTITION_OF_2.items()}
    for key in KEY_PARTITION_OF_2:
        in_kafka = [s for r, s in zip(records, seqs, strict=True) if r.key == key]
        for p in range(3):  # Lite order per Lite partition (seq i is in partition i % 3)
            from_p = [s for s in in_kafka if s % 3 == p]
            assert from_p == sorted(from_p), f"order of {key!r} from Lite partition {p} broken"
    assert [lite.committed_cursor(subscription, p) for p in range(3)] == [lite.head(topic, p) for p in range(3)]
    final = read_table(source_run["root"], "bronze", name)
    # every Lite message (seq i is in partition i % 3) landed once: its (partition, offset), not a count
    assert sorted(zip(final.column("partition").to_pylist(), final.column("offset").to_pylist(), strict=True)) == [
        (p, o) for p in range(3) for o in range(len(range(p, RECOVERY_TOTAL, 3)))]


def _bronze_rows(spark: Any, messages: list[tuple[int, int, bytes]]) -> Any:
    """Lite bronze rows ``(partition, offset, key)`` as one file (one pull commit)."""
    at = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    rows = [(p, o, key, b"v%d-%d" % (p, o), {}, None, at, at) for p, o, key in messages]
    return spark.createDataFrame(rows, lite_source.LITE_BRONZE).coalesce(1)


def test_round_robin_continues_across_convert_batches_and_restarts(spark: Any, kafka_bootstrap: str,
                                                                   tmp_path: Path, unique_name: str) -> None:
    """Records without a key are numbered from the outbox's row count: within one run of the
    convert stage (two micro-batches, the count moved by the stage's own appends) and after a
    restart (the count asked of Delta again). Numbering from 0 in each batch would give
    ``[0, 1, 2]`` for the second one."""
    create_topic(kafka_bootstrap, unique_name, partitions=4)
    connector = cfg.validate_connector({
        "name": unique_name, "connector.class": "com.google.pubsublite.kafka.source.PubSubLiteSourceConnector",
        "pubsublite.project": "p", "pubsublite.location": "us-central1-a", "pubsublite.subscription": "s",
        "kafka.topic": unique_name})
    bronze, outbox = TableRef("bronze", unique_name), TableRef("outbox", unique_name)
    root = tmp_path / "storage"

    def run_convert() -> int:
        """The convert stage run once; one bronze file (pull commit) per micro-batch."""
        return batches_of_one_stage_run(spark, kafka_bootstrap, root, lite_source.convert, connector,
                                        **{"pipeline.max.files.per.trigger": "1"})

    ctx = context(spark, kafka_bootstrap, root)
    ctx.store.ensure(bronze, lite_source.LITE_BRONZE)
    first = [(0, 0, b""), (0, 1, b""), (0, 2, b""), (1, 0, b""), (1, 1, b"")]
    second = [(0, 3, b"dog"), (0, 4, b""), (1, 2, b""), (2, 0, b"")]
    third = [(2, 1, b""), (2, 2, b"")]
    for batch_id, messages in enumerate((first, second)):
        ctx.store.append_batch(bronze, _bronze_rows(spark, messages), "pull", batch_id)
    assert run_convert() == 2
    ctx.store.append_batch(bronze, _bronze_rows(spark, third), "pull", 2)
    assert run_convert() == 1

    rows = ctx.store.read(outbox).select("lite_partition", "lite_offset", "partition").collect()
    assigned = {(r.lite_partition, r.lite_offset): r.partition for r in rows}
    assert len(rows) == len(assigned) == 11
    dog = KEY_PARTITION_OF_4[b"dog"]
    assert [assigned[p, o] for p, o, _ in (*first, *second, *third)] == [
        0, 1, 2, 3, 0,  # first batch: from 0
        dog, 1, 2, 3,   # second: from the 5 rows appended before it
        1, 2,           # after the restart: from the 9 rows Delta counts
    ]
