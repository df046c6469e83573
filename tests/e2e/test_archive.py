"""The archive connector end to end, against a real Kafka broker and a real S3 API (moto) or a
local directory: micro-batches archived in executor tasks with no record on the driver, a file's
beginning read again from Kafka, a run that dies mid-file resumed on S3, the connector (config
files → runtime → Spark → Kafka source) in a subprocess killed with -9 mid-file then restarted,
and a pattern subscription that gains a topic.

The connector's driver side and executor callable alone (cuts, rotation, resume rules, the
original's store, ``archive read``) are unit tests: ``tests/unit/test_archive_connector.py``,
whose helpers these tests use.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from archive_checks import KEEP, T0, archive_values, archived_records, produce_at, topic_records
from integration.kafka_helpers import create_topic
from pubsub_connect.io.objectstore.archive_files import list_archive_files
from pubsub_connect.io.objectstore.base import ObjectStore
from pubsub_connect.io.objectstore.local import LocalStore
from pubsub_connect.io.objectstore.locations import open_store
from pubsub_connect.io.objectstore.s3 import S3Store
from pubsub_connect.io.services.lifecycle import environment
from pubsub_connect.io.services.process import RunningService
from pubsub_connect.model.blockgzip.index import parse_index
from pubsub_connect.model.blockgzip.lines import encode_value
from pubsub_connect.pipelines import archive as arch
from pubsub_connect.pipelines.archive import coordinator as archive_coordinator
from pubsub_connect.pipelines.archive import read as archive_read
from pubsub_connect.pipelines.archive import records as archive_records
from pubsub_connect.pipelines.archive import stage as archive_stage
from pubsub_connect.pipelines.context import ConnectorError
from unit.test_archive_connector import (
    DAY_MS,
    Record,
    _settings,
    _stream,
    _table,
    _write_original_file,
    crash_then_resume,
)
from waiting import wait_until

# ------------------------------------------------------------------------------------------ slow: real connector

DRIVER = textwrap.dedent("""
    import logging, sys, threading
    from pubsub_connect.config import loader as cfg
    from pubsub_connect.pipelines.runner.supervisor import run_stages
    from pubsub_connect.pipelines.runtime import build_context, stages_for

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    worker_file, connector_file, mode = sys.argv[1:4]
    run = cfg.load([connector_file], worker_file)
    ctx = build_context(run.worker, once=(mode == "once"))
    connector = run.connectors[0]
    try:
        run_stages(ctx, connector, stages_for(connector.kind), threading.Event())
    finally:
        ctx.spark.stop()
    print("ARCHIVE RUN DONE", flush=True)
""")


class Connector:
    """Runs the archive connector in its own process group (so kill -9 takes its JVM too)."""

    def __init__(self, tmp: Path, bootstrap: str, connector: dict[str, str], env: dict[str, str] | None = None,
                 max_records: int = 100_000, flush_interval_ms: int = 60_000):
        self.tmp = tmp
        self.env = {**os.environ, **(env or {})}
        self.worker_file = tmp / "worker.properties"
        self.worker_file.write_text(
            f"bootstrap.servers={bootstrap}\nstorage.root={tmp / 'storage'}\nspark.master=local[2]\n"
            f"spark.driver.memory=1g\npipeline.max.records.per.batch={max_records}\n"
            f"pipeline.trigger.interval.ms=200\noffset.flush.interval.ms={flush_interval_ms}\n")
        self.properties = dict(connector)
        self.connector_file = tmp / "archive-sink.properties"
        self.connector_file.write_text("".join(f"{k}={v}\n" for k, v in connector.items()))
        (tmp / "driver.py").write_text(DRIVER)
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0

    def start(self, mode: str) -> None:
        self.runs += 1
        self.log = self.tmp / f"run-{self.runs}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, str(self.tmp / "driver.py"), str(self.worker_file), str(self.connector_file), mode],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env,
                start_new_session=True, cwd=self.tmp)

    def wait(self, timeout_s: float = 150) -> None:
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"connector did not finish in {timeout_s} s:\n{self.tail()}") from None
        assert code == 0 and "ARCHIVE RUN DONE" in self.log.read_text(errors="replace"), self.tail()

    def kill(self) -> None:
        """SIGKILL the whole process group (Python driver, Spark JVM, Python workers)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self.proc is not None:
                os.killpg(self.proc.pid, signal.SIGKILL)  # stragglers of the group

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def _run_in_process(tmp: Path, bootstrap: str, properties: dict[str, str], max_records: int = 100_000) -> None:
    """One ``--once`` run of the connector on the active (test) SparkSession, through the same
    config → runtime → stages path as ``pubsub-connect run``."""
    from pubsub_connect.config import loader as cfg
    from pubsub_connect.pipelines.runner.supervisor import run_stages
    from pubsub_connect.pipelines.runtime import build_context, stages_for

    worker = cfg.validate_worker({"bootstrap.servers": bootstrap, "storage.root": str(tmp / "storage"),
                                  "pipeline.max.records.per.batch": str(max_records)})
    connector = cfg.validate_connector(properties)
    ctx = build_context(worker, once=True, progress=lambda line: None)
    run_stages(ctx, connector, stages_for(connector.kind))


@pytest.fixture
def connectors() -> Iterator[list[Connector]]:
    started: list[Connector] = []
    yield started
    for connector in started:
        connector.kill()


def _wait_for(predicate: Any, timeout_s: float, connector: Connector, what: str) -> None:
    def reached() -> bool:
        if predicate():
            return True
        assert connector.proc is not None
        if connector.proc.poll() is not None:
            raise AssertionError(f"connector exited ({connector.proc.returncode}) before {what}:\n{connector.tail()}")
        return False

    wait_until(reached, timeout_s, lambda: f"{what}:\n{connector.tail()}")


@pytest.mark.slow
def test_crash_mid_file_then_resume_on_s3_rereading_kafka(tmp_path: Path, kafka_bootstrap: str, s3_endpoint: str,
                                                          s3_service: RunningService, unique_name: str) -> None:
    """A run dies with open files on S3; the next run resumes from the bucket and ends with exactly
    the objects of an uninterrupted run. The beginnings of files that span micro-batches are read
    again from the broker by the task-side Kafka reader (as in the executors), so the bytes
    archived from a re-read are Kafka's, not the test's."""
    records: list[Record] = [(unique_name, p, o, ts, value) for _, p, o, ts, value in _stream(3, 500, seed=5)]
    create_topic(kafka_bootstrap, unique_name, partitions=3, config=KEEP)
    produce_at(kafka_bootstrap, unique_name, [(p, value, ts) for _, p, _, ts, value in records])
    # a new topic, one producer: offsets 0..499 of each partition, in the order produced
    assert topic_records(kafka_bootstrap, unique_name) == {
        (unique_name, p): [(o, value) for _, q, o, _, value in records if q == p] for p in range(3)}
    source = archive_records.KafkaRecordSource(archive_records.replay_options(
        {"kafka.bootstrap.servers": kafka_bootstrap, "subscribe": unique_name}))
    aws = {k: v for k, v in s3_service.env.items() if k.startswith("AWS_") and "ENDPOINT" not in k}

    def make_store(name: str) -> ObjectStore:
        bucket = f"{unique_name}-{name}"
        boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
        return S3Store(bucket, endpoint=s3_endpoint, path_style=True, region="us-east-1")

    (tmp_path / "buf").mkdir()
    with environment(aws):
        crash_then_resume(records, make_store, source, tmp_path / "buf")


@pytest.mark.slow
def test_every_known_partition_gets_a_task_of_its_own(spark: Any) -> None:
    """Hash partitioning would put some topic-partitions together (compressed one after the other)
    and leave tasks idle; the archive maps each known one onto its own task, with Spark's own hash."""
    from pyspark.sql import functions as F

    ints = [*range(-50, 300), 2**31 - 1, -(2**31)]
    hashed = spark.createDataFrame([(i,) for i in ints], "i int").select("i", F.hash("i")).collect()
    assert {row[0]: row[1] for row in hashed} == {i: archive_coordinator._murmur3_int(i) for i in ints}

    known = [("a", p) for p in range(7)] + [("b-1", 0), ("b-1", 1)]
    rows = [(t, p, o) for t, p in known for o in range(5)] + [("appeared-later", 0, 0)]
    frame = spark.createDataFrame(rows, "topic string, partition int, offset long")
    placed = (archive_coordinator.spread_partitions(frame, {tp: slot for slot, tp in enumerate(known)})
              .select(F.spark_partition_id().alias("task"), "topic", "partition").distinct().collect())
    tasks = {(r.topic, r.partition): r.task for r in placed}
    assert {tp: tasks[tp] for tp in known} == {tp: slot for slot, tp in enumerate(known)}
    assert ("appeared-later", 0) in tasks  # not in the map: hashed into one task like before


@pytest.mark.slow
def test_rows_not_split_by_topic_partition_are_refused_and_archived_once_grouped(tmp_path: Path, spark: Any) -> None:
    """The stage hands Spark's Kafka source's partitions to the tasks as they are (one per
    topic-partition, in offset order). Rows spread any other way fail the batch naming why, and
    nothing of it is applied; the same rows grouped per topic-partition and sorted are archived."""
    records = _stream(3, 60)
    frame = (spark.createDataFrame(_table(records).to_pylist(), "topic string, partition int, offset long, ts long, "
                                                                "value binary")
             .repartition(4))  # round robin: every partition's rows over several tasks
    source = archive_records.KafkaRecordSource(archive_records.replay_options(
        {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "topic-a"}))  # never read: no earlier file
    policy = {"block_size": 300, "chunks_per_file": 4, "flush_size": 25}

    refused = archive_coordinator.ArchiveCoordinator(LocalStore(tmp_path / "refused"),
                                                     _settings(tmp_path, **policy), "split", source, {})
    with pytest.raises(Exception, match="the archive needs each"):
        archive_coordinator.archive_frame(frame, refused)
    assert refused.states == {} and refused.in_flight

    store = LocalStore(tmp_path / "regrouped")
    coordinator = archive_coordinator.ArchiveCoordinator(store, _settings(tmp_path, **policy), "split", source, {})
    grouped = (archive_coordinator.spread_partitions(frame, {("topic-a", p): p for p in range(3)})
               .sortWithinPartitions("topic", "partition", "offset"))
    reports = archive_coordinator.archive_frame(grouped, coordinator)
    assert sorted((r.topic, r.partition) for r in reports) == [("topic-a", p) for p in range(3)]
    assert {tp: s.next_offset for tp, s in coordinator.states.items()} == {("topic-a", p): 60 for p in range(3)}
    assert archived_records(store, "arch/") == {
        ("topic-a", p): [(r[2], r[4]) for r in records if r[1] == p][:50] for p in range(3)}  # 10 still open


@pytest.mark.slow
def test_micro_batches_are_archived_in_executor_tasks_never_on_the_driver(
        tmp_path: Path, kafka_bootstrap: str, unique_name: str, spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two micro-batches of Spark's Kafka source and the end-of-run flush, through the stage's own
    functions on the shared test SparkSession. The driver never brings a row here: the only
    DataFrame collected is the tasks' reports (every other way of fetching rows fails), and every
    report — files compressed and uploaded, a file's beginning read again from Kafka — comes from
    a Python worker, not from this process."""
    from pubsub_connect.io.kafka.reader import read_kafka

    topic = unique_name
    create_topic(kafka_bootstrap, topic, partitions=2, config=KEEP)
    produce_at(kafka_bootstrap, topic, [(p, v, T0 + i * 1000) for p in range(2)
                                      for i, v in enumerate(archive_values(p, 0, 120))])
    options = {"kafka.bootstrap.servers": kafka_bootstrap, "subscribe": topic}
    store = LocalStore(tmp_path / "out")
    buffer = tmp_path / "buffer"
    buffer.mkdir()
    # Files of 50 records: [0, 50) completes in batch 1, [50, 100) spans both batches, [100, 120)
    # is the tail the flush writes.
    coordinator = archive_coordinator.ArchiveCoordinator(
        store, _settings(buffer, "", block_size=400, flush_size=50), "no-driver",
        archive_records.KafkaRecordSource(archive_records.replay_options(options)), {})

    def micro_batch(start: int, end: int) -> Any:
        """What the stream hands ``process``: Spark's Kafka source over an offset range."""
        def per_partition(offset: int) -> str:
            return json.dumps({topic: {"0": offset, "1": offset}})

        return read_kafka(spark, {**options, "startingOffsets": per_partition(start),
                                  "endingOffsets": per_partition(end)}, streaming=False)

    frame_class = type(micro_batch(0, 1))
    collected: list[list[str]] = []
    real_collect = frame_class.collect

    def collect(frame: Any) -> Any:
        collected.append(list(frame.columns))
        assert "value" not in frame.columns, "records collected to the driver"
        return real_collect(frame)

    def forbidden(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("rows fetched to the driver")

    monkeypatch.setattr(frame_class, "collect", collect)
    for name in ("toArrow", "toPandas", "toLocalIterator", "take", "head", "first", "tail", "toJSON"):
        monkeypatch.setattr(frame_class, name, forbidden)

    select = archive_stage.select_archive_columns
    reports = [*archive_coordinator.archive_frame(select(micro_batch(0, 70)), coordinator),
               *archive_coordinator.archive_frame(select(micro_batch(70, 120)), coordinator),
               *archive_coordinator.flush_open_files(spark, coordinator)]
    monkeypatch.undo()

    assert collected == [["topic", "partition", "files", "skipped", "state", "pid", "host"]] * 3
    assert len(reports) == 6 and os.getpid() not in {r.pid for r in reports}
    written = {(r.topic, r.partition, f.first_offset, f.end_offset, r.pid) for r in reports for f in r.files}
    assert {w[:4] for w in written} == {(topic, p, o, min(o + 50, 120)) for p in range(2) for o in (0, 50, 100)}
    assert archived_records(store, "") == topic_records(kafka_bootstrap, topic)
    assert coordinator.open_files() == {} and not list((buffer / "no-driver").iterdir())


@pytest.mark.slow
def test_kill_9_mid_file_restart_and_new_topic_on_s3(
        tmp_path: Path, kafka_bootstrap: str, s3_endpoint: str, s3_service: RunningService,
        unique_name: str, connectors: list[Connector], request: pytest.FixtureRequest,
        caplog: pytest.LogCaptureFixture) -> None:
    """The real connector in a subprocess, S3 target, pattern subscription.

    Run 1 (continuous) is killed with SIGKILL while every partition has a file in progress (its
    records read, not yet archived: the driver holds only their position); nothing partial is
    visible. More records arrive and a second topic matching the pattern appears — for the sink
    the same as partitions added to a topic: new topic-partitions without files, which must start
    at their earliest offset while known partitions resume after their last file. Run 2 (--once) then
    leaves exactly the records of both topics in the bucket, each once (it runs in this process:
    the subprocess JVM is gone by then, so there is still one SparkSession at a time).
    """
    first, second = f"{unique_name}-a", f"{unique_name}-b"
    create_topic(kafka_bootstrap, first, partitions=3, config=KEEP)
    produce_at(kafka_bootstrap, first, [(p, v, T0 + i * 1000) for p in range(3)
                                      for i, v in enumerate(archive_values(p, 0, 360))])
    aws = {k: v for k, v in s3_service.env.items() if k != "AWS_ENDPOINT_URL_S3"}
    bucket = unique_name
    with environment(aws):
        boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    store = S3Store(bucket, endpoint=s3_endpoint, path_style=True, region="us-east-1")
    buffer = tmp_path / "buffer"
    buffer.mkdir()
    connector = Connector(tmp_path, kafka_bootstrap, {
        "name": "archive-e2e", "connector.class": "com.deviantart.kafka_connect_s3.S3SinkConnector",
        "topics.regex": f"{unique_name}-.*", "s3.bucket": bucket, "s3.prefix": "kafka/",
        "s3.endpoint": s3_endpoint, "s3.path_style": "true", "s3.region": "us-east-1",
        "local.buffer.dir": str(buffer), "compressed_block_size": "800", "chunks.per.file": "100",
        "flush.size": "100",
    }, env=aws, max_records=2000, flush_interval_ms=3_600_000)  # tails stay open: no offset.flush.interval.ms
    connectors.append(connector)
    staged = buffer / "archive-e2e"

    with environment(aws):
        # Run 1, continuous: kill -9 once 3 files per partition are committed and the driver
        # reports the 4th open with the last 60 records of each partition (continuous mode keeps
        # tails open for offset.flush.interval.ms, an hour here, so this state is stable).
        connector.start("continuous")
        tails = [f"{first}-{p}@300+60" for p in range(3)]

        def open_files() -> list[str]:
            reported = [line.rsplit("open files: ", 1)[1].strip()
                        for line in connector.log.read_text(errors="replace").splitlines() if "open files: " in line]
            return reported[-1].split(", ") if reported else []

        def mid_file() -> bool:
            committed = [o for o in store.list("kafka/") if o.key.endswith(".gz")]
            return len(committed) == 9 and open_files() == tails

        _wait_for(mid_file, 240, connector, "9 committed files and 3 open ones")
        connector.kill()
        assert connector.proc is not None and connector.proc.returncode == -signal.SIGKILL
        # Nothing partial is visible: every .gz is whole, indexed, contiguous from offset 0.
        after_kill = archived_records(store, "kafka/")
        expected = topic_records(kafka_bootstrap, first)
        assert after_kill == {tp: records[:300] for tp, records in expected.items()}
        assert not any(store.exists(f"kafka/2016-02-24/{first}-{p:05d}-000000000300.gz") for p in range(3))

        # While the connector is down: more records, and a new topic matching the pattern.
        produce_at(kafka_bootstrap, first, [(p, v, T0 + (360 + i) * 1000) for p in range(3)
                                          for i, v in enumerate(archive_values(p, 360, 120))])
        create_topic(kafka_bootstrap, second, partitions=2, config=KEEP)
        produce_at(kafka_bootstrap, second, [(p, v, T0 + DAY_MS + i) for p in range(2)
                                           for i, v in enumerate(archive_values(p + 10, 0, 260))])
        # Run 2 (--once) in this process, on the shared test SparkSession (one JVM fewer),
        # requested only now so that it never runs beside the subprocess's JVM.
        request.getfixturevalue("spark")
        with caplog.at_level(logging.INFO, logger=arch.__name__):
            _run_in_process(tmp_path, kafka_bootstrap, connector.properties, max_records=2000)
        assert (f'startingOffsets={{"{first}":{{"0":300,"1":300,"2":300}},'
                f'"{second}":{{"0":-2,"1":-2}}}}') in caplog.text
        archived = archived_records(store, "kafka/")
        assert archived == {**topic_records(kafka_bootstrap, first), **topic_records(kafka_bootstrap, second)}
        assert {tp: len(r) for tp, r in archived.items()} == {
            **{(first, p): 480 for p in range(3)}, **{(second, p): 260 for p in range(2)}}
        keys = sorted(o.key for o in store.list("kafka/") if o.key.endswith(".gz"))
        assert keys == sorted(
            [f"kafka/2016-02-24/{first}-{p:05d}-{o:012d}.gz" for p in range(3) for o in (0, 100, 200, 300, 400)]
            + [f"kafka/2016-02-25/{second}-{p:05d}-{o:012d}.gz" for p in range(2) for o in (0, 100, 200)])
        assert store.incomplete_uploads() == []
        # Plain gzip to standard tools; every index range decompresses alone (checked by
        # archived_records); the CLI helper seeks by offset with a range request.
        gz = store.read(f"kafka/2016-02-24/{first}-00001-000000000100.gz")
        text = subprocess.run(["gzip", "-dc"], input=gz, capture_output=True, check=True).stdout
        assert text == b"".join(encode_value(v) + b"\n" for v in archive_values(1, 100, 100))
        url = f"s3://{bucket}/kafka/2016-02-24/{first}-00001-000000000100.gz"
        with environment({"AWS_ENDPOINT_URL_S3": s3_endpoint}):
            assert archive_read.read_archive_records(url, 156, 3) == list(
                zip(range(156, 159), archive_values(1, 156, 3), strict=True))
    assert not list(staged.iterdir()), "run directories are removed (the killed run's on the next start)"


@pytest.mark.slow
def test_continuous_run_writes_open_files_offset_flush_interval_after_they_opened(
        tmp_path: Path, kafka_bootstrap: str, unique_name: str, connectors: list[Connector]) -> None:
    """The real connector, continuous, no rotation rule that the records could reach: a quiet
    topic's records still land in the store, a file per partition once the interval has passed,
    while the connector keeps running (the idle flush: no micro-batch runs on a quiet topic)."""
    topic = unique_name
    create_topic(kafka_bootstrap, topic, partitions=2, config=KEEP)
    produce_at(kafka_bootstrap, topic, [(p, v, T0 + i * 1000) for p in range(2)
                                        for i, v in enumerate(archive_values(p, 0, 30))])
    out, buffer = tmp_path / "out", tmp_path / "buffer"
    buffer.mkdir()
    connector = Connector(tmp_path, kafka_bootstrap, {
        "name": "archive-flush", "connector.class": "S3SinkConnector", "topics": topic, "s3.prefix": "systest",
        "output.path": str(out), "local.buffer.dir": str(buffer)}, flush_interval_ms=1500)
    connectors.append(connector)
    store = LocalStore(out)

    def archived_counts() -> dict[tuple[str, int], int]:
        return {tp: sum(parse_index(store.read(f.name.index_key))[-1].end_offset - f.name.first_offset
                        for f in files if f.has_index)
                for tp, files in list_archive_files(store, "systest").items()}

    connector.start("continuous")
    _wait_for(lambda: archived_counts() == {(topic, 0): 30, (topic, 1): 30}, 240, connector, "30 records per partition")
    # one file each: every record was read by the first micro-batch, and written once it was due
    assert sorted(o.key for o in store.list() if o.key.endswith(".gz")) == [
        f"systest/2016-02-24/{topic}-{p:05d}-000000000000.gz" for p in range(2)]
    produce_at(kafka_bootstrap, topic, [(p, v, T0 + (30 + i) * 1000) for p in range(2)
                                      for i, v in enumerate(archive_values(p, 30, 10))])
    _wait_for(lambda: archived_counts() == {(topic, 0): 40, (topic, 1): 40}, 240, connector, "40 records per partition")
    assert connector.proc is not None and connector.proc.poll() is None, "still running"
    assert archived_records(store, "systest/") == topic_records(kafka_bootstrap, topic)
    assert "writing files open for offset.flush.interval.ms=1500" in connector.log.read_text(errors="replace")


@pytest.mark.slow
def test_real_run_continues_a_store_the_original_wrote(tmp_path: Path, kafka_bootstrap: str, unique_name: str,
                                                      spark: Any) -> None:
    """Spark's Kafka source starts each partition where the original's files end (their
    ``s3.prefix`` without a slash, upload-date folders); the store then holds every record once."""
    topic = unique_name
    create_topic(kafka_bootstrap, topic, partitions=2, config=KEEP)
    produce_at(kafka_bootstrap, topic, [(p, v, T0 + i * 1000) for p in range(2)
                                        for i, v in enumerate(archive_values(p, 0, 90))])
    kafka = topic_records(kafka_bootstrap, topic)
    out, buffer = tmp_path / "out", tmp_path / "buffer"
    buffer.mkdir()
    store = LocalStore(out)
    first = {p: [(o, v) for o, v in kafka[(topic, p)][:3] if v is not None] for p in range(2)}
    assert [o for o, _ in first[0]] == [o for o, _ in first[1]] == [0, 1, 2]
    # the original wrote p0 [0, 2) then [2, 3); p1 [0, 3)
    _write_original_file(store, "systest", "2026-11-24", topic, 0, first[0][:2], 67_108_864)
    _write_original_file(store, "systest", "2026-11-25", topic, 0, first[0][2:], 67_108_864)
    _write_original_file(store, "systest", "2026-11-25", topic, 1, first[1], 67_108_864)
    _run_in_process(tmp_path, kafka_bootstrap, {
        "name": "archive-takeover", "connector.class": "S3SinkConnector", "topics": topic, "s3.prefix": "systest",
        "output.path": str(out), "local.buffer.dir": str(buffer)})
    assert archived_records(store, "systest/") == kafka
    assert sorted(o.key for o in store.list("systest/2016-02-24/") if o.key.endswith(".gz")) == [
        f"systest/2016-02-24/{topic}-{p:05d}-000000000003.gz" for p in range(2)]


@pytest.mark.compat
@pytest.mark.slow
def test_local_target_record_time_folders_and_resume(tmp_path: Path, kafka_bootstrap: str, unique_name: str,
                                                     spark: Any) -> None:
    """The connector in this process (the shared test SparkSession), local directory target:
    date folders and rotate.interval.ms follow record timestamps; a second run resumes each
    partition after its last file."""
    topic = unique_name
    create_topic(kafka_bootstrap, topic, partitions=2, config=KEEP)
    # one record per hour over 30 hours: 12-hour files over two date folders
    produce_at(kafka_bootstrap, topic, [(p, b"a%d-%d" % (p, i), T0 + i * 3_600_000)
                                        for p in range(2) for i in range(30)])
    out, buffer = tmp_path / "out", tmp_path / "buffer"
    buffer.mkdir()
    properties = {
        "name": "archive-local", "connector.class": "S3SinkConnector", "topics": topic,
        "output.path": str(out), "local.buffer.dir": str(buffer), "rotate.interval.ms": str(12 * 3_600_000),
    }
    _run_in_process(tmp_path, kafka_bootstrap, properties)
    store = LocalStore(out)
    files = sorted(o.key for o in store.list() if o.key.endswith(".gz"))
    assert files == sorted(f"{d}/{topic}-{p:05d}-{o:012d}.gz" for p in range(2)
                           for d, o in (("2016-02-24", 0), ("2016-02-24", 12), ("2016-02-25", 24)))

    produce_at(kafka_bootstrap, topic, [(p, b"a%d-%d" % (p, i), T0 + i * 3_600_000)
                                      for p in range(2) for i in range(30, 40)])
    _run_in_process(tmp_path, kafka_bootstrap, properties)
    assert archived_records(store, "") == topic_records(kafka_bootstrap, topic)
    new_files = sorted(o.key for o in store.list() if o.key.endswith(".gz"))
    assert [k for k in new_files if k not in files] == [f"2016-02-25/{topic}-{p:05d}-000000000030.gz" for p in range(2)]
    assert list((out / ".tmp").iterdir()) == []
    assert list((buffer / "archive-local").iterdir()) == []
    shutil.rmtree(buffer)
    with pytest.raises(ConnectorError, match=r"local\.buffer\.dir='.*' does not exist"):
        _run_in_process(tmp_path, kafka_bootstrap, properties)


def test_sample_config_is_valid() -> None:
    from pubsub_connect.config import loader as cfg
    from pubsub_connect.config.keys import ARCHIVE

    fixtures = Path(__file__).resolve().parents[2] / "fixtures" / "config"
    run = cfg.load([fixtures / "archive-sink.properties"], fixtures / "worker.properties")
    connector = run.connectors[0]
    assert connector.kind == ARCHIVE
    store = open_store(connector)
    assert isinstance(store, S3Store)
    assert (store.bucket, store.region, store.path_style) == ("my-archive-bucket", "us-east-1", False)
    assert (connector.get("s3.prefix"), connector.get("compressed_block_size"), connector.get("chunks.per.file"),
            connector.get("rotate.interval.ms")) == ("kafka/", 67_108_864, 16, 3_600_000)
