"""The Python Kafka source against a real Apache Kafka broker: schema, offsets, exactly-once resume.

Every streaming test collects micro-batches with :class:`BatchCollector`, keyed by batch id: a
batch Spark re-runs after a stop or crash overwrites its own entry (and the collector records
whether the replay was identical), so "0 lost, 0 duplicated" is asserted on what the *source*
delivered, with sequence ids, not on an at-least-once sink.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer
from kafka_helpers import Rec, create_topic, delete_topic, end_offsets, produce
from kafka_stream_driver import BatchFiles, start_query

from pubsub_connect.io.kafka.offsets import OffsetReader, plan_partitions, rate_limit
from pubsub_connect.io.kafka.options import KafkaOptionsError, client_config
from pubsub_connect.io.kafka.read_options import KAFKA_SCHEMA, KAFKA_SCHEMA_NO_HEADERS, KafkaReadOptions
from pubsub_connect.io.kafka.reader import read_kafka
from pubsub_connect.io.kafka.writer import write_kafka
from pubsub_connect.io.spark import Capabilities, capabilities
from waiting import wait_until

PYTHON = Capabilities(native_kafka=False, native_delta=False)
DRIVER = Path(__file__).with_name("kafka_stream_driver.py")


def opts(bootstrap: str, **extra: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap, **extra}


def seqs(start: int, stop: int, partitions: int = 3) -> list[Rec]:
    """Records whose value is their sequence id, spread round-robin over ``partitions``."""
    return [Rec(value=str(i).encode(), key=f"k{i}".encode(), partition=i % partitions) for i in range(start, stop)]


class BatchCollector:
    """``foreachBatch`` target: rows per batch id; a re-run batch replaces its previous rows."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: dict[int, list[tuple[Any, ...]]] = {}
        self.replays: dict[int, bool] = {}

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = sorted(
            tuple(r.values()) for r in df.select("topic", "partition", "offset", "value").toArrow().to_pylist()
        )
        with self.lock:
            if batch_id in self.batches:
                self.replays[batch_id] = self.batches[batch_id] == rows
            self.batches[batch_id] = rows

    def rows(self) -> list[tuple[Any, ...]]:
        with self.lock:
            return [row for b in sorted(self.batches) for row in self.batches[b]]

    def values(self) -> list[int]:
        return [int(r[3]) for r in self.rows()]

    def sizes(self) -> list[int]:
        with self.lock:
            return [len(self.batches[b]) for b in sorted(self.batches)]

    def wait_for(self, query: Any, predicate: Callable[[BatchCollector], bool], timeout_s: float = 120) -> None:
        """Poll until ``predicate`` holds; a query that died meanwhile fails with its own error."""
        deadline = time.monotonic() + timeout_s
        while not predicate(self):
            if not query.isActive:
                raise AssertionError(f"the query stopped: {query.exception()}")
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"collector condition not met in {timeout_s} s; batch sizes {self.sizes()}; "
                    f"last progress {query.lastProgress}"
                )
            time.sleep(0.1)


def start_stream(
    spark: Any, options: dict[str, str], checkpoint: Path, collector: BatchCollector, trigger: dict[str, Any]
) -> Any:
    df = read_kafka(spark, options, caps=PYTHON)
    return (
        df.writeStream.foreachBatch(collector).option("checkpointLocation", str(checkpoint)).trigger(**trigger).start()
    )


def run_available_now(spark: Any, options: dict[str, str], checkpoint: Path, collector: BatchCollector) -> None:
    query = start_stream(spark, options, checkpoint, collector, {"availableNow": True})
    try:
        assert query.awaitTermination(180), "availableNow query did not finish in 180 s"
    finally:
        query.stop()


def assert_exactly(collector: BatchCollector, expected: range) -> None:
    values = collector.values()
    assert len(values) == len(set(values)), f"{len(values) - len(set(values))} duplicated records"
    missing = set(expected) - set(values)
    assert not missing, f"{len(missing)} records lost, e.g. {sorted(missing)[:5]}"
    assert sorted(values) == list(expected)
    assert all(collector.replays.values()), f"a replayed batch differed: {collector.replays}"


def start_driver(argv: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    """Run ``kafka_stream_driver.py`` in its own process group (so its JVM can be killed with it)."""
    with open(log_path, "ab") as log_file:
        return subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)


def stop_process_group(proc: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    """SIGKILL whatever is left of ``proc``'s process group and wait until all of it is gone."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout_s)

    def group_gone() -> bool:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_until(group_gone, timeout_s, f"the exit of every process of group {proc.pid} after SIGKILL")


# --------------------------------------------------------------------------------------------
# Options and pure planning logic (no Spark)
# --------------------------------------------------------------------------------------------


def test_options_are_validated_like_spark() -> None:
    base = {"kafka.bootstrap.servers": "127.0.0.1:1"}
    with pytest.raises(KafkaOptionsError, match="exactly one"):
        KafkaReadOptions.parse(base, streaming=True)
    with pytest.raises(KafkaOptionsError, match="exactly one"):
        KafkaReadOptions.parse({**base, "subscribe": "a", "assign": '{"a":[0]}'}, streaming=True)
    with pytest.raises(KafkaOptionsError, match="startingOffsets"):
        KafkaReadOptions.parse({**base, "subscribe": "a", "startingOffsets": "{oops"}, streaming=True)
    with pytest.raises(KafkaOptionsError, match="only valid for batch"):
        KafkaReadOptions.parse({**base, "subscribe": "a", "endingOffsets": "latest"}, streaming=True)
    with pytest.raises(KafkaOptionsError, match="not allowed for batch"):
        KafkaReadOptions.parse({**base, "subscribe": "a", "startingOffsets": "latest"}, streaming=False)
    with pytest.raises(KafkaOptionsError, match="startingOffsets"):
        KafkaReadOptions.parse({**base, "subscribe": "a", "kafka.auto.offset.reset": "earliest"}, streaming=True)
    with pytest.raises(KafkaOptionsError, match="Java class"):
        KafkaReadOptions.parse(
            {**base, "subscribe": "a", "kafka.sasl.login.callback.handler.class": "x.Y"}, streaming=True
        )
    with pytest.raises(KafkaOptionsError, match="bootstrap"):
        KafkaReadOptions.parse({"subscribe": "a"}, streaming=True)
    parsed = KafkaReadOptions.parse(
        {**base, "SubscribePattern": "t-.*", "MAXOFFSETSPERTRIGGER": "7", "includeHeaders": "TRUE"}, streaming=True
    )
    assert (parsed.subscribe_pattern, parsed.max_offsets_per_trigger, parsed.include_headers) == ("t-.*", 7, True)
    assert parsed.matches("t-1") and not parsed.matches("xt-1") and not parsed.matches("__t-1")
    # Native connector: Java-only options are the JVM's business, but Spark's own rules still apply.
    native = KafkaReadOptions.parse(
        {**base, "subscribe": "a", "kafka.sasl.login.callback.handler.class": "x.Y"},
        streaming=True,
        python_client=False,
    )
    assert native.client == {}


def test_java_client_options_are_translated_for_librdkafka() -> None:
    conf = client_config(
        {
            "kafka.bootstrap.servers": "b:9092",
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.jaas.config": "kafkashaded.org.apache.kafka.common.security.plain.PlainLoginModule "
            'required username="user" password="p\\"w";',
            "kafka.fetch.max.wait.ms": "100",
            "kafka.max.poll.records": "500",
            "kafka.ssl.truststore.type": "PEM",
            "kafka.ssl.truststore.location": "/etc/ca.pem",
            "subscribe": "not-a-client-option",
        },
        forbidden={},
    )
    assert conf == {
        "bootstrap.servers": "b:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "user",
        "sasl.password": 'p"w',
        "fetch.wait.max.ms": "100",
        "ssl.ca.location": "/etc/ca.pem",
    }
    with pytest.raises(KafkaOptionsError, match="PEM"):
        client_config({"kafka.bootstrap.servers": "b", "kafka.ssl.truststore.location": "/x.jks"}, forbidden={})


def test_rate_limit_shares_the_limit_by_backlog() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0, ("t", 3): 10}
    end = {("t", 0): 600, ("t", 1): 300, ("t", 2): 1, ("t", 3): 10, ("new", 0): 5}
    capped = rate_limit(start, end, 400)
    # 600/901*400 = 266.4 → 266; 300/901*400 = 133.2 → 133; 1/901*400 < 1 → 1 (never starved).
    assert capped == {("t", 0): 266, ("t", 1): 133, ("t", 2): 1, ("t", 3): 10, ("new", 0): 5}
    assert rate_limit(start, end, 10_000) == end


def test_min_partitions_splits_ranges_deterministically() -> None:
    ranges = [(("t", 0), 0, 100), (("t", 1), 50, 60), (("t", 2), 7, 7)]
    plain = plan_partitions(ranges, None)
    assert [(p.topic, p.partition, p.start, p.end) for p in plain] == [("t", 0, 0, 100), ("t", 1, 50, 60)]
    split = plan_partitions(ranges, 6)
    assert len(split) >= 6
    covered: dict[int, list[tuple[int, int]]] = {}
    for p in split:
        covered.setdefault(p.partition, []).append((p.start, p.end))
    assert covered[0][0][0] == 0 and covered[0][-1][1] == 100
    assert all(a[1] == b[0] for a, b in zip(covered[0], covered[0][1:], strict=False))  # contiguous, no overlap
    assert [(p.start, p.end) for p in plan_partitions(ranges, 6)] == [(p.start, p.end) for p in split]


# --------------------------------------------------------------------------------------------
# Against the broker
# --------------------------------------------------------------------------------------------


def test_schema_is_exactly_sparks(spark: Any, kafka_bootstrap: str, unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name, 1)
    base = opts(kafka_bootstrap, subscribe=unique_name)
    assert read_kafka(spark, base, streaming=False, caps=PYTHON).schema == KAFKA_SCHEMA_NO_HEADERS
    assert read_kafka(spark, {**base, "includeHeaders": "true"}, caps=PYTHON).schema == KAFKA_SCHEMA
    expected = (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )
    assert KAFKA_SCHEMA.simpleString() == expected
    assert all(f.nullable for f in KAFKA_SCHEMA.fields)


def test_native_connector_and_python_source_read_the_same_rows(spark: Any, kafka_bootstrap: str,
                                                              unique_name: str) -> None:
    """The session has Spark's own Kafka connector (loaded from Maven Central): detected
    capabilities pick it, and it returns exactly the rows of the project's Python source, the
    fallback — same schema, same values, headers included. Writing goes through it as well."""
    assert capabilities(spark).native_kafka
    create_topic(kafka_bootstrap, unique_name, 2)
    produce(kafka_bootstrap, unique_name, [Rec(value=str(i).encode(), key=f"k{i}".encode(), partition=i % 2,
                                               headers=[("h", str(i).encode()), ("h", None)])
                                           for i in range(20)])
    base = opts(kafka_bootstrap, subscribe=unique_name, includeHeaders="true")
    columns = ["key", "value", "topic", "partition", "offset", "timestampType", "headers"]

    def rows(caps: Capabilities) -> list[tuple[Any, ...]]:
        df = read_kafka(spark, base, streaming=False, caps=caps)
        assert df.schema == KAFKA_SCHEMA
        return sorted(tuple(r) for r in df.select(*columns).collect())

    native_rows = rows(Capabilities(native_kafka=True, native_delta=True))
    assert len(native_rows) == 20
    assert native_rows == rows(PYTHON)
    assert native_rows[0][:5] == (b"k0", b"0", unique_name, 0, 0)
    assert [tuple(h) for h in native_rows[0][6]] == [("h", b"0"), ("h", None)]

    out = f"{unique_name}-out"
    create_topic(kafka_bootstrap, out, 1)
    write_kafka(spark.createDataFrame([(b"a", b"1"), (None, b"2")], "key binary, value binary"),
                {"kafka.bootstrap.servers": kafka_bootstrap, "topic": out})
    written = read_kafka(spark, opts(kafka_bootstrap, subscribe=out), streaming=False).collect()
    assert sorted((r.value, r.key) for r in written) == [(b"1", b"a"), (b"2", None)]


def test_end_offsets_follow_the_isolation_level(kafka_bootstrap: str, unique_name: str) -> None:
    """The planned end is the high watermark for read_uncommitted and the last stable offset for
    read_committed: a batch planned while a transaction is open stops before it."""
    from confluent_kafka import Producer

    create_topic(kafka_bootstrap, unique_name, 2)
    produce(kafka_bootstrap, unique_name, [Rec(value=b"x", partition=i % 2) for i in range(11)])
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{unique_name}-txn"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for _ in range(4):
        producer.produce(unique_name, b"open", partition=0)
    producer.flush(30)
    readers = {level: OffsetReader(KafkaReadOptions.parse(
        opts(kafka_bootstrap, subscribe=unique_name, **{"kafka.isolation.level": level}), streaming=True))
        for level in ("read_uncommitted", "read_committed")}
    try:
        tps = readers["read_committed"].partitions()
        assert tps == [(unique_name, 0), (unique_name, 1)]
        assert readers["read_uncommitted"].end_offsets(tps) == {(unique_name, 0): 10, (unique_name, 1): 5}
        assert readers["read_committed"].end_offsets(tps) == {(unique_name, 0): 6, (unique_name, 1): 5}
        producer.commit_transaction(30)
        # The coordinator writes the commit marker (an offset of its own) after the commit returns:
        # the last stable offset moves past it once it is written.
        committed = readers["read_committed"]

        def past_the_marker() -> dict[tuple[str, int], int] | None:
            ends = committed.end_offsets(tps)
            return ends if ends[(unique_name, 0)] != 6 else None

        ends = wait_until(past_the_marker, 30, "the last stable offset passing the commit marker")
        assert ends == {(unique_name, 0): 11, (unique_name, 1): 5}
    finally:
        for reader in readers.values():
            reader.close()
    # Read record by record, the last record of partition 0 is at offset 9: offset 10 is the marker.
    assert end_offsets(kafka_bootstrap, unique_name) == {0: 10, 1: 5}


def test_transaction_markers_leave_offsets_without_records(spark: Any, kafka_bootstrap: str, unique_name: str) -> None:
    """Offsets that hold a transaction marker are skipped without waiting or failing, also when
    a range starts or ends on one. (Nothing of the aborted transaction reached the broker here, so
    read_uncommitted vs read_committed cannot be told apart; the reader defaults to the Java
    client's read_uncommitted, unlike librdkafka.)"""
    create_topic(kafka_bootstrap, unique_name, 1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": unique_name})
    producer.init_transactions(30)
    for txn in range(4):
        producer.begin_transaction()
        for i in range(10):
            producer.produce(unique_name, str(txn * 10 + i).encode(), partition=0)
        if txn == 2:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    del producer  # closes the client
    # Offsets: 0-9 records, 10 marker, 11-20 records, 21 marker, (aborted: nothing), 22-31, 32 marker.
    base = opts(kafka_bootstrap, subscribe=unique_name)

    def read(start: int | None = None, end: int | None = None, **extra: str) -> list[int]:
        if start is not None:
            extra["startingOffsets"] = json.dumps({unique_name: {"0": start}})
        if end is not None:
            extra["endingOffsets"] = json.dumps({unique_name: {"0": end}})
        df = read_kafka(spark, {**base, **extra}, streaming=False, caps=PYTHON)
        return sorted(int(r.value) for r in df.select("value").collect())

    committed = [*range(20), *range(30, 40)]
    assert read() == committed
    assert read(**{"kafka.isolation.level": "read_committed"}) == committed
    assert read(5, 11) == list(range(5, 10))  # ends just after a marker
    assert read(10, 12) == [10]  # starts on a marker
    assert read(21, 32) == list(range(30, 40))  # from a marker to a marker
    assert KafkaReadOptions.parse(base, streaming=True).consumer_config()["isolation.level"] == "read_uncommitted"


@pytest.mark.slow
def test_fifty_thousand_records_with_keys_headers_and_nulls(
    spark: Any, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    """Every field of every record, compared by (partition, offset) with what was produced."""
    create_topic(kafka_bootstrap, unique_name, 3)
    records: list[Rec] = []
    for i in range(50_000):
        headers: list[tuple[str, bytes | None]] | None = [("seq", str(i).encode())]
        if i % 3 == 0:
            headers += [("dup", b"a"), ("dup", b"b")]
        if i % 5 == 0:
            headers.append(("nul", None))
        if i % 7 == 0:
            headers = None
        records.append(
            Rec(
                key=None if i % 11 == 0 else f"key-{i % 97}".encode(),  # many duplicate keys
                value=None if i % 13 == 0 else (b"" if i % 17 == 0 else f"value-{i}".encode()),
                headers=headers,
                partition=i % 3,
            )
        )
    before_ms = int(time.time() * 1000)
    produce(kafka_bootstrap, unique_name, records, linger_ms=50)
    expected = {}
    for i, rec in enumerate(records):
        expected[(i % 3, i // 3)] = rec

    got: dict[tuple[int, int], dict[str, Any]] = {}

    def collect(df: Any, _batch_id: int) -> None:
        for row in df.toArrow().to_pylist():
            got[(row["partition"], row["offset"])] = row

    query = (
        read_kafka(
            spark,
            opts(
                kafka_bootstrap,
                subscribe=unique_name,
                startingOffsets="earliest",
                includeHeaders="true",
                maxOffsetsPerTrigger="20000",
            ),
            caps=PYTHON,
        )
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(180)
    finally:
        query.stop()
    assert len(got) == 50_000
    assert set(got) == set(expected)
    for coords, rec in expected.items():
        row = got[coords]
        assert (row["key"], row["value"], row["topic"]) == (rec.key, rec.value, unique_name), coords
        assert row["headers"] == ([{"key": k, "value": v} for k, v in rec.headers] if rec.headers else None), coords
        assert row["timestampType"] == 0  # CreateTime
    stamps = [int(r["timestamp"].timestamp() * 1000) for r in got.values()]
    assert before_ms - 1000 <= min(stamps) <= max(stamps) <= int(time.time() * 1000)


def test_batch_starting_and_ending_offsets(spark: Any, kafka_bootstrap: str, unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name, 3)
    produce(kafka_bootstrap, unique_name, seqs(0, 300))  # 100 per partition, offset = seq // 3
    base = opts(kafka_bootstrap, subscribe=unique_name)

    def read(**extra: str) -> list[int]:
        df = read_kafka(spark, {**base, **extra}, streaming=False, caps=PYTHON)
        return sorted(int(r.value) for r in df.select("value").collect())

    assert read() == list(range(300))  # earliest → latest by default
    assert read(startingOffsets="earliest", endingOffsets="latest") == list(range(300))
    start = json.dumps({unique_name: {"0": 10, "1": -2, "2": 99}})
    end = json.dumps({unique_name: {"0": 20, "1": 5, "2": -1}})
    expected = [3 * o for o in range(10, 20)] + [3 * o + 1 for o in range(5)] + [3 * 99 + 2]
    assert read(startingOffsets=start, endingOffsets=end) == sorted(expected)
    assign = json.dumps({unique_name: [1]})
    df = read_kafka(spark, opts(kafka_bootstrap, assign=assign, minPartitions="4"), streaming=False, caps=PYTHON)
    assert df.rdd.getNumPartitions() == 4
    assert sorted(int(r.value) for r in df.collect()) == [3 * o + 1 for o in range(100)]
    with pytest.raises(Exception, match="every subscribed partition"):
        read(startingOffsets=json.dumps({unique_name: {"0": 1}}))


def test_stream_starting_offsets_latest_is_pinned_by_the_first_run(
    spark: Any, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    """Like Spark, 'latest' means "from when the query first started", also across a restart
    that happens before any record arrived."""
    create_topic(kafka_bootstrap, unique_name, 3)
    produce(kafka_bootstrap, unique_name, seqs(0, 90), linger_ms=100)
    collector = BatchCollector()
    options = opts(kafka_bootstrap, subscribe=unique_name, startingOffsets="latest")
    run_available_now(spark, options, tmp_path / "cp", collector)
    assert collector.values() == []
    produce(kafka_bootstrap, unique_name, seqs(90, 150), linger_ms=100)
    run_available_now(spark, options, tmp_path / "cp", collector)
    assert_exactly(collector, range(90, 150))


def test_stream_starting_offsets_earliest_and_json(
    spark: Any, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    create_topic(kafka_bootstrap, unique_name, 3)
    produce(kafka_bootstrap, unique_name, seqs(0, 60))  # 20 per partition
    earliest = BatchCollector()
    run_available_now(
        spark, opts(kafka_bootstrap, subscribe=unique_name, startingOffsets="earliest"), tmp_path / "earliest", earliest
    )
    assert_exactly(earliest, range(60))

    by_json = BatchCollector()
    start = json.dumps({unique_name: {"0": 15, "1": -2, "2": -1}})
    query = start_stream(
        spark,
        opts(kafka_bootstrap, subscribe=unique_name, startingOffsets=start),
        tmp_path / "json",
        by_json,
        {"processingTime": "200 milliseconds"},
    )
    try:
        by_json.wait_for(query, lambda c: len(c.batches) >= 1)  # batch 0 pins partition 2 at "latest"
        produce(kafka_bootstrap, unique_name, seqs(60, 66))
        query.processAllAvailable()
    finally:
        query.stop()
    expected = [3 * o for o in range(15, 20)] + [3 * o + 1 for o in range(20)] + list(range(60, 66))
    assert sorted(by_json.values()) == sorted(expected)
    assert len(by_json.values()) == len(expected)


def test_max_offsets_per_trigger_sizes_every_available_now_batch(
    spark: Any, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    create_topic(kafka_bootstrap, unique_name, 3)
    records = [Rec(value=str(i).encode(), partition=0 if i < 600 else 1 if i < 900 else 2) for i in range(1200)]
    produce(kafka_bootstrap, unique_name, records)
    collector = BatchCollector()
    run_available_now(
        spark,
        opts(kafka_bootstrap, subscribe=unique_name, startingOffsets="earliest", maxOffsetsPerTrigger="400"),
        tmp_path / "cp",
        collector,
    )
    # Shares by backlog: 600/300/300 → 200+100+100 per batch, three times.
    assert collector.sizes() == [400, 400, 400]
    per_batch_partitions = [sorted({r[1] for r in rows}) for _, rows in sorted(collector.batches.items())]
    assert per_batch_partitions == [[0, 1, 2]] * 3
    assert_exactly(collector, range(1200))


def test_stop_and_restart_resume_with_nothing_lost_or_duplicated(
    spark: Any, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    create_topic(kafka_bootstrap, unique_name, 3)
    produce(kafka_bootstrap, unique_name, seqs(0, 2000))
    collector = BatchCollector()
    options = opts(kafka_bootstrap, subscribe=unique_name, startingOffsets="earliest", maxOffsetsPerTrigger="450")
    query = start_stream(spark, options, tmp_path / "cp", collector, {"processingTime": "100 milliseconds"})
    try:
        collector.wait_for(query, lambda c: len(c.batches) >= 2)
    finally:
        query.stop()  # may interrupt a batch: it must be replayed identically on restart
    stopped_at = len(collector.values())
    assert 0 < stopped_at < 2000
    produce(kafka_bootstrap, unique_name, seqs(2000, 3000))
    run_available_now(spark, options, tmp_path / "cp", collector)
    assert_exactly(collector, range(3000))
    assert max(collector.sizes()) <= 450  # the limit held after the restart too


def test_data_arriving_between_batches_is_read_exactly_once(
    spark: Any, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    """Bursts produced as single broker batches while the query runs, then a final drain: every
    record exactly once."""
    create_topic(kafka_bootstrap, unique_name, 3)
    collector = BatchCollector()
    options = opts(kafka_bootstrap, subscribe=unique_name, startingOffsets="earliest")
    # 1) availableNow runs between bursts: each run must see the whole burst, not 1 record.
    for burst in range(2):
        produce(kafka_bootstrap, unique_name, seqs(burst * 300, (burst + 1) * 300), linger_ms=300)
        run_available_now(spark, options, tmp_path / "cp", collector)
        assert_exactly(collector, range((burst + 1) * 300))
    # 2) a continuously running query while a producer keeps adding bursts.
    stop = threading.Event()
    produced = [600]

    def producer() -> None:
        while not stop.is_set() and produced[0] < 4000:
            produce(kafka_bootstrap, unique_name, seqs(produced[0], produced[0] + 150), linger_ms=50)
            produced[0] += 150
            time.sleep(0.05)

    query = start_stream(spark, options, tmp_path / "cp", collector, {"processingTime": "150 milliseconds"})
    thread = threading.Thread(target=producer, daemon=True)
    try:
        thread.start()
        collector.wait_for(query, lambda c: len(c.batches) >= 6)
        stop.set()
        thread.join(60)
        query.processAllAvailable()
    finally:
        stop.set()
        query.stop()
    assert_exactly(collector, range(produced[0]))


def test_subscribe_pattern_picks_up_a_topic_created_later(
    spark: Any, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    first, later, other = f"{unique_name}-a", f"{unique_name}-b", f"x{unique_name}-c"
    create_topic(kafka_bootstrap, first, 2)
    produce(kafka_bootstrap, first, seqs(0, 100, partitions=2))
    collector = BatchCollector()
    query = start_stream(
        spark,
        opts(kafka_bootstrap, subscribePattern=f"{unique_name}-.*", startingOffsets="earliest"),
        tmp_path / "cp",
        collector,
        {"processingTime": "200 milliseconds"},
    )
    try:
        collector.wait_for(query, lambda c: len(c.values()) >= 100)
        create_topic(kafka_bootstrap, later, 3)
        create_topic(kafka_bootstrap, other, 1)  # does not match: never read
        produce(kafka_bootstrap, later, seqs(100, 160))  # produced before the query sees the topic
        produce(kafka_bootstrap, other, seqs(1000, 1010, partitions=1))
        collector.wait_for(query, lambda c: len(c.values()) >= 160)
        produce(kafka_bootstrap, later, seqs(160, 190))
        query.processAllAvailable()
    finally:
        query.stop()
    assert_exactly(collector, range(190))
    assert {r[0] for r in collector.rows()} == {first, later}


def test_fail_on_data_loss(spark: Any, kafka_bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    """A checkpointed position beyond the end of the partition (what a recreated topic looks like)."""
    create_topic(kafka_bootstrap, unique_name, 1)
    produce(kafka_bootstrap, unique_name, seqs(0, 30, partitions=1))
    beyond = json.dumps({unique_name: {"0": 500}})
    failing = opts(kafka_bootstrap, subscribe=unique_name, startingOffsets=beyond)
    with pytest.raises(Exception, match="failOnDataLoss"):
        run_available_now(spark, failing, tmp_path / "fail", BatchCollector())

    collector = BatchCollector()
    lenient = {**failing, "failOnDataLoss": "false"}
    run_available_now(spark, lenient, tmp_path / "skip", collector)
    assert collector.values() == []
    produce(kafka_bootstrap, unique_name, seqs(30, 50, partitions=1))
    run_available_now(spark, lenient, tmp_path / "skip", collector)
    assert_exactly(collector, range(30, 50))  # resumes at the partition's real end


def test_fail_on_data_loss_when_a_topic_is_deleted(
    spark: Any, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    kept, deleted = f"{unique_name}-kept", f"{unique_name}-deleted"
    for topic, first in ((kept, 0), (deleted, 100)):
        create_topic(kafka_bootstrap, topic, 1)
        produce(kafka_bootstrap, topic, seqs(first, first + 10, partitions=1))
    collector = BatchCollector()
    options = opts(kafka_bootstrap, subscribe=f"{kept},{deleted}", startingOffsets="earliest")
    run_available_now(spark, options, tmp_path / "cp", collector)
    assert sorted(collector.values()) == [*range(10), *range(100, 110)]
    delete_topic(kafka_bootstrap, deleted)
    produce(kafka_bootstrap, kept, seqs(10, 15, partitions=1))
    with pytest.raises(Exception, match=f"{deleted}-0 is gone.*failOnDataLoss=false"):
        run_available_now(spark, options, tmp_path / "cp", collector)
    run_available_now(spark, {**options, "failOnDataLoss": "false"}, tmp_path / "cp", collector)
    assert sorted(collector.values()) == [*range(15), *range(100, 110)]


@pytest.mark.slow
def test_kill_minus_nine_mid_stream_then_restart(
    spark: Any, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    """SIGKILL the whole query process tree while a batch is being written, restart from the
    checkpoint: the interrupted batch is replayed with the same offsets, nothing lost or doubled."""
    create_topic(kafka_bootstrap, unique_name, 3)
    produce(kafka_bootstrap, unique_name, seqs(0, 1500))
    out = tmp_path / "out"
    common = [
        sys.executable,
        str(DRIVER),
        "--bootstrap",
        kafka_bootstrap,
        "--topic",
        unique_name,
        "--checkpoint",
        str(tmp_path / "cp"),
        "--out",
        str(out),
    ]
    log_path = tmp_path / "driver.log"
    proc = start_driver(
        [*common, "--max-offsets", "300", "--trigger", "processing", "--pause-after-write", "3"], log_path
    )
    try:
        def two_batches_written() -> bool:
            if len(list(out.glob("batch-*.parquet"))) >= 2:
                return True
            assert proc.poll() is None, f"driver exited early: {log_path.read_text()[-2000:]}"
            return False

        wait_until(two_batches_written, 180, lambda: f"two batch files (no progress: {log_path.read_text()[-2000:]})")
        os.killpg(proc.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers
    finally:
        stop_process_group(proc)
    produce(kafka_bootstrap, unique_name, seqs(1500, 2400))
    # Restart in this test's (already running) session, from the dead process's checkpoint, with
    # a larger limit: the interrupted batch must still be replayed with the offsets logged
    # before the crash, then the rest comes in one batch.
    query = start_query(
        spark, kafka_bootstrap, unique_name, str(tmp_path / "cp"), BatchFiles(out), "100000", available_now=True
    )
    try:
        assert query.awaitTermination(300), "the restarted query did not finish"
    finally:
        query.stop()

    by_batch: dict[int, list[list[dict[str, Any]]]] = {}
    for path in sorted(out.glob("batch-*.parquet")):
        by_batch.setdefault(int(path.name.split("-")[1]), []).append(pq.read_table(path).to_pylist())
    replayed = {b: tables for b, tables in by_batch.items() if len(tables) > 1}
    assert replayed, "the kill did not interrupt a batch; the replay path was not exercised"
    for batch_id, tables in replayed.items():
        assert all(t == tables[0] for t in tables), f"batch {batch_id} was replayed with different records"
    values = [int(row["value"]) for tables in by_batch.values() for row in tables[0]]
    assert len(values) == len(set(values)), "duplicated records"
    assert sorted(values) == list(range(2400)), f"lost {2400 - len(set(values))} records"
    assert sorted(len(tables[0]) for tables in by_batch.values()) == [300, 300, 1800]
