"""The archive connector end to end.

Fast tests drive the connector's driver side and its executor callable in this process (no
Spark): deterministic cuts whatever the micro-batches, rotation rules, crash + resume from the
store, index-before-data ordering, ``archive read`` range requests. Slow tests run the real
thing against a real Kafka broker and a real S3 API (moto) or a local directory: micro-batches
archived in executor tasks with no record on the driver, the connector (config files → runtime →
Spark → Kafka source) in a subprocess killed with -9 mid-file then restarted, and a pattern
subscription that gains a topic.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pytest
from confluent_kafka import Producer

from integration.kafka_helpers import consume_all, create_topic
from pubsub_connect.config.loader import validate_connector
from pubsub_connect.io.objectstore.archive_files import list_archive_files
from pubsub_connect.io.objectstore.base import ObjectStore
from pubsub_connect.io.objectstore.local import LocalStore
from pubsub_connect.io.objectstore.locations import open_store
from pubsub_connect.io.objectstore.s3 import S3Store
from pubsub_connect.io.services.lifecycle import environment
from pubsub_connect.io.services.process import RunningService
from pubsub_connect.model.blockgzip.blocks import read_block, write_file
from pubsub_connect.model.blockgzip.index import Chunk, parse_index, render_index
from pubsub_connect.model.blockgzip.lines import encode_value
from pubsub_connect.model.blockgzip.names import index_key
from pubsub_connect.model.blockgzip.rotation import RotationPolicy
from pubsub_connect.pipelines import archive as arch
from pubsub_connect.pipelines import kafka_position
from pubsub_connect.pipelines.archive import coordinator as archive_coordinator
from pubsub_connect.pipelines.archive import read as archive_read
from pubsub_connect.pipelines.archive import records as archive_records
from pubsub_connect.pipelines.archive import reports as archive_reports
from pubsub_connect.pipelines.archive import resume as archive_resume
from pubsub_connect.pipelines.archive import settings as archive_settings
from pubsub_connect.pipelines.archive import stage as archive_stage
from pubsub_connect.pipelines.archive import task as archive_task
from pubsub_connect.pipelines.context import ConnectorError
from pubsub_connect.pipelines.runner.failures import is_transient
from waiting import wait_until

DAY_MS = 86_400_000
T0 = 1_456_272_000_000  # 2016-02-24T00:00:00Z
#: Topic config for records stamped in 2016 (date folders come from record time): a broker with
#: Kafka's default retention.ms (7 days) would delete them within seconds.
KEEP = {"retention.ms": "-1"}


# ------------------------------------------------------------------------------------------ helpers


def _table(records: list[tuple[str, int, int, int, bytes | None]]) -> pa.Table:
    """Arrow micro-batch as the stage builds it: topic, partition, offset, ts (epoch ms), value."""
    return pa.table({
        "topic": pa.array([r[0] for r in records], pa.string()),
        "partition": pa.array([r[1] for r in records], pa.int32()),
        "offset": pa.array([r[2] for r in records], pa.int64()),
        "ts": pa.array([r[3] for r in records], pa.int64()),
        "value": pa.array([r[4] for r in records], pa.binary()),
    })


def _settings(buffer: Path, prefix: str = "arch/", **policy: int) -> archive_settings.ArchiveSettings:
    return archive_settings.ArchiveSettings(prefix, RotationPolicy(**policy), buffer)


Record = tuple[str, int, int, int, bytes | None]  # topic, partition, offset, timestamp ms, value


class ListSource:
    """Stands in for Kafka when a task reads the first records of a file again: the records a
    test "produced", and a log of the ranges read."""

    def __init__(self, records: list[Record]):
        self.records = sorted(records, key=lambda r: (r[0], r[1], r[2]))
        self.reads: list[tuple[str, int, int, int]] = []

    def read(self, topic: str, partition: int, start: int, end: int) -> Iterator[archive_records.Records]:
        self.reads.append((topic, partition, start, end))
        rows = [r for r in self.records if (r[0], r[1]) == (topic, partition) and start <= r[2] < end]
        yield archive_records.Records([r[2] for r in rows], [r[3] for r in rows], [r[4] for r in rows])


class Run:
    """One run of the connector without Spark: the driver's coordinator, and each micro-batch
    handed to the executor callable in this process the way Spark hands it over (grouped by
    topic-partition, sorted by offset, in Arrow batches of ``arrow_rows`` rows)."""

    def __init__(self, store: ObjectStore, settings: archive_settings.ArchiveSettings, source: ListSource,
                 resume: dict[tuple[str, int], int] | None = None, arrow_rows: int = 10_000,
                 flush_interval_ms: int | None = None, clock: Any = time.monotonic):
        self.coordinator = archive_coordinator.ArchiveCoordinator(store, settings, "arch-test", source, resume or {},
                                                   flush_interval_ms=flush_interval_ms, clock=clock)
        self.arrow_rows = arrow_rows
        self.reports: list[archive_reports.PartitionReport] = []

    def batch(self, records: list[Record]) -> list[archive_reports.PartitionReport]:
        return self._run(self.coordinator.task(), _table(sorted(records, key=lambda r: (r[0], r[1], r[2]))))

    def finish(self) -> list[archive_reports.PartitionReport]:
        """The end of a ``--once`` run: the open files are written."""
        return self._flush(sorted(self.coordinator.open_files()))

    def flush_due(self) -> list[archive_reports.PartitionReport]:
        """What :func:`archive_coordinator.flush_due_files` runs: the files due by ``offset.flush.interval.ms``."""
        return self._flush(self.coordinator.due())

    def _flush(self, names: list[tuple[str, int]]) -> list[archive_reports.PartitionReport]:
        table = pa.table({"topic": pa.array([t for t, _ in names], pa.string()),
                          "partition": pa.array([p for _, p in names], pa.int32())})
        return self._run(self.coordinator.task(final=True), table)

    def _run(self, task: archive_task.ArchiveTask, table: pa.Table) -> list[archive_reports.PartitionReport]:
        self.coordinator.in_flight = True
        rows = [row for out in task(iter(table.to_batches(max_chunksize=self.arrow_rows))) for row in out.to_pylist()]
        reports = self.coordinator.apply(rows)
        self.reports.extend(reports)
        return reports

    def files(self) -> list[archive_reports.CommittedFile]:
        return [f for report in self.reports for f in report.files]


def _snapshot(store: ObjectStore, prefix: str = "") -> dict[str, bytes]:
    return {o.key: store.read(o.key) for o in store.list(prefix)}


def _archived_records(store: ObjectStore, prefix: str) -> dict[tuple[str, int], list[tuple[int, bytes | None]]]:
    """Every record in the store per topic-partition, checking each visible file on the way:
    it has an index, its blocks tile it, each block decompresses alone to its index counts, and
    consecutive files of a partition meet without gap or overlap."""
    out: dict[tuple[str, int], list[tuple[int, bytes | None]]] = {}
    for tp, files in list_archive_files(store, prefix).items():
        records: list[tuple[int, bytes | None]] = []
        for file in files:
            assert file.has_index, file.name.gz_key
            data = store.read(file.name.gz_key)
            chunks = parse_index(store.read(file.name.index_key))
            assert chunks[0].first_record_offset == file.name.first_offset
            assert chunks[-1].byte_end == len(data) == file.size
            if records:
                assert file.name.first_offset == records[-1][0] + 1, f"gap/overlap before {file.name.gz_key}"
            for chunk in chunks:
                values = read_block(data[chunk.byte_offset:chunk.byte_end])
                assert len(values) == chunk.num_records
                records.extend((chunk.first_record_offset + i, v) for i, v in enumerate(values))
        out[tp] = records
    return out


def _stream(partitions: int, per_partition: int, seed: int = 1) -> list[tuple[str, int, int, int, bytes | None]]:
    rng = random.Random(seed)
    records = []
    for p in range(partitions):
        for o in range(per_partition):
            value = None if o % 97 == 13 else (b"line\nbreak-%d" % o if o % 31 == 5 else b"p%d-o%d-" % (p, o)
                                                + b"x" * rng.randrange(0, 40))
            records.append(("topic-a", p, o, T0 + o * 1000, value))
    return records


# ------------------------------------------------------------------------------------------ fast


def test_file_cuts_do_not_depend_on_micro_batches(tmp_path: Path) -> None:
    records = _stream(3, 400)
    policy = {"block_size": 300, "chunks_per_file": 4, "flush_size": 150, "rotate_interval_ms": 120_000}

    def run(name: str, batches: list[list[Record]], arrow_rows: int) -> tuple[dict[str, bytes], Run, ListSource]:
        store = LocalStore(tmp_path / name / "out")
        (tmp_path / name / "buf").mkdir(parents=True)
        source = ListSource(records)
        connector = Run(store, _settings(tmp_path / name / "buf", **policy), source, arrow_rows=arrow_rows)
        for batch in batches:
            connector.batch(batch)
        connector.finish()
        return _snapshot(store), connector, source

    whole, _, _ = run("whole", [records], 10_000)
    rng = random.Random(3)
    pieces, position = [], 0
    ordered = sorted(records, key=lambda r: (r[2], r[1]))  # interleave partitions, offsets ascending
    while position < len(ordered):
        step = rng.randrange(1, 90)
        pieces.append(ordered[position:position + step])
        position += step
    in_pieces, connector, source = run("pieces", pieces, 7)  # tiny Arrow batches: runs cross them
    assert in_pieces == whole
    gz_keys = sorted(k for k in whole if k.endswith(".gz"))
    assert len(gz_keys) == 31 and len(whole) == 2 * 31 + 3  # .gz + .index.json, a cursor per partition
    # the original's cursor per partition: the key of its last index
    assert {k: v for k, v in whole.items() if "last_chunk_index" in k} == {
        f"arch/last_chunk_index.topic-a-{p:05d}.txt":
            index_key(max(k for k in gz_keys if f"-{p:05d}-" in k)).encode() for p in range(3)}
    assert _archived_records(LocalStore(tmp_path / "whole" / "out"), "arch/") == {
        ("topic-a", p): [(r[2], r[4]) for r in records if r[1] == p] for p in range(3)}
    # Every file was compressed once, in the batch that completed it; what earlier batches had
    # seen of it was read again once, from its first offset: no range twice.
    files = connector.files()
    assert sorted(f.key for f in files) == sorted(k for k in whole if k.endswith(".gz"))
    starts = {(f.topic, f.partition, f.first_offset) for f in files}
    assert source.reads and len(set(source.reads)) == len(source.reads)
    assert all((t, p, start) in starts for t, p, start, _ in source.reads)


def test_rotation_rules_give_exact_files(tmp_path: Path) -> None:
    # 11-byte lines; 22-byte blocks → 2 records per block; 2 blocks per file → 4 records per file,
    # unless flush.size (5) or record time (10 s) cuts first.
    ts = [T0, T0 + 1, T0 + 2, T0 + 3, T0 + 4, T0 + 5, T0 + 6, T0 + 20_000, T0 + 20_001, DAY_MS + T0]
    records = [("t", 0, 100 + i, ts[i], b"v%09d" % i) for i in range(10)]
    store = LocalStore(tmp_path / "out")
    connector = Run(store, _settings(tmp_path, block_size=22, chunks_per_file=2, flush_size=5,
                                     rotate_interval_ms=10_000), ListSource(records))
    connector.batch(records)
    connector.finish()
    got = {k: (parse_index(store.read(index_key(k))))
           for k in (o.key for o in store.list()) if k.endswith(".gz")}
    assert {k: [(c.first_record_offset, c.num_records) for c in v] for k, v in got.items()} == {
        # blocks per file reached after 4 records
        "arch/2016-02-24/t-00000-000000000100.gz": [(100, 2), (102, 2)],
        # 3 records, then the record 20 s later starts a new file (rotate.interval.ms)
        "arch/2016-02-24/t-00000-000000000104.gz": [(104, 2), (106, 1)],
        "arch/2016-02-24/t-00000-000000000107.gz": [(107, 2)],
        # the next day's record starts a file in the next day's folder; it is the tail (finish)
        "arch/2016-02-25/t-00000-000000000109.gz": [(109, 1)],
    }
    store2 = LocalStore(tmp_path / "out2")
    connector2 = Run(store2, _settings(tmp_path, block_size=1000, chunks_per_file=16, flush_size=3),
                     ListSource(records))
    connector2.batch(records)
    connector2.finish()
    assert [o.key.rsplit("-", 1)[1] for o in store2.list() if o.key.endswith(".gz")] == [
        "000000000100.gz", "000000000103.gz", "000000000106.gz", "000000000109.gz"]


@pytest.mark.parametrize(("offsets", "arrow_rows"), [
    ([0, 1, 2, 5, 4, 6], 10_000),  # within one Arrow batch
    ([0, 1, 2, 3, 2, 3], 4),  # the second Arrow batch goes back: taken for a replay, it would be skipped
])
def test_a_task_refuses_a_partition_out_of_offset_order(offsets: list[int], arrow_rows: int, tmp_path: Path) -> None:
    records = [("t", 0, o, T0, b"v%d" % o) for o in offsets]
    store = LocalStore(tmp_path / "out")
    connector = Run(store, _settings(tmp_path, flush_size=2), ListSource(records), arrow_rows=arrow_rows)
    with pytest.raises(archive_settings.ArchiveWriteError, match=r"^t-0: offset.* in offset order$|"
                                                                 r"^t-0: offsets out of order in one task"):
        connector._run(connector.coordinator.task(), _table(records))
    assert connector.coordinator.in_flight and connector.coordinator.states == {}


def test_a_task_refuses_a_partition_whose_records_come_apart(tmp_path: Path) -> None:
    records = [("t", 0, 0, T0, b"a"), ("t", 1, 0, T0, b"b"), ("t", 0, 1, T0, b"c")]
    connector = Run(LocalStore(tmp_path / "out"), _settings(tmp_path), ListSource(records))
    with pytest.raises(archive_settings.ArchiveWriteError,
                       match=r"^t-0: its records came apart in one task; the archive needs each partition's "
                             r"records together$"):
        connector._run(connector.coordinator.task(), _table(records))


def test_a_partition_reported_by_two_tasks_fails_the_batch_and_changes_no_state(tmp_path: Path) -> None:
    records = [("t", 0, o, T0, b"v%d" % o) for o in range(4)]
    store = LocalStore(tmp_path / "out")
    connector = Run(store, _settings(tmp_path, flush_size=100), ListSource(records))
    connector.batch(records[:1])
    before = dict(connector.coordinator.states)
    halves = [connector.coordinator.task()(iter(_table(part).to_batches())) for part in (records[1:2], records[2:])]
    rows = [row for task in halves for out in task for row in out.to_pylist()]
    connector.coordinator.in_flight = True
    with pytest.raises(ConnectorError, match=r"^arch-test: t-0 was archived by two tasks of one micro-batch; the "
                                             r"archive needs each topic-partition in one task$"):
        connector.coordinator.apply(rows)
    assert connector.coordinator.states == before and connector.coordinator.in_flight


@pytest.mark.parametrize("target", ["local", "s3"])
def test_crash_mid_file_then_resume_rewrites_identical_objects(target: str, tmp_path: Path,
                                                                request: pytest.FixtureRequest) -> None:
    """A run dies with open files (nothing published for them); the next run resumes from the
    store, re-reads from there and ends with exactly the objects of an uninterrupted run."""
    records = _stream(3, 500, seed=5)
    policy = {"block_size": 400, "chunks_per_file": 3, "flush_size": 0, "rotate_interval_ms": 0}
    buffer = tmp_path / "buf"
    buffer.mkdir()

    def make_store(name: str) -> ObjectStore:
        if target == "local":
            return LocalStore(tmp_path / name)
        endpoint = request.getfixturevalue("s3_endpoint")
        env = request.getfixturevalue("s3_service").env
        with environment({k: v for k, v in env.items() if k.startswith("AWS_") and "ENDPOINT" not in k}):
            boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=f"{name}-{os.getpid()}")
        return S3Store(f"{name}-{os.getpid()}", endpoint=endpoint, path_style=True, region="us-east-1")

    with environment({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                          "AWS_DEFAULT_REGION": "us-east-1"}):
        reference = make_store("reference")
        uninterrupted = Run(reference, _settings(buffer, **policy), ListSource(records))
        uninterrupted.batch(records)
        uninterrupted.finish()
        expected = _snapshot(reference, "arch/")

        crashed = make_store("crashed")
        first_run = Run(crashed, _settings(buffer, **policy), ListSource(records))
        first_run.batch([r for r in records if r[2] < 200])
        first_run.batch([r for r in records if 200 <= r[2] < 333])
        open_files = first_run.coordinator.open_files()
        assert len(open_files) == 3  # every partition has a file in progress
        # The process dies here: the open files were never written anywhere.
        visible = _snapshot(crashed, "arch/")
        assert not any(f"-{f.first_offset:012d}." in key for f in open_files.values() for key in visible)
        cursors = {k: visible.pop(k) for k in list(visible) if "last_chunk_index" in k}
        assert set(visible) < set(expected) and all(visible[k] == expected[k] for k in visible)
        # each cursor names the last index visible for its partition
        assert cursors == {f"arch/last_chunk_index.topic-a-{p:05d}.txt": max(
            k for k in visible if f"-{p:05d}-" in k and k.endswith(".index.json")).encode() for p in range(3)}
        assert not list((buffer / "arch-test").iterdir()), "each task removes its staging directory"

        resume = archive_resume.resume_offsets(crashed, "arch/")
        assert resume == {tp: f.first_offset for tp, f in open_files.items()}
        second_run = Run(crashed, _settings(buffer, **policy), ListSource(records), resume)
        # Kafka delivers from the resume offsets; an earlier replayed record would be skipped too.
        second_run.batch([r for r in records if r[2] >= resume[(r[0], r[1])] - 5])
        second_run.finish()
        assert sum(report.skipped for report in second_run.reports) == 15
        assert _snapshot(crashed, "arch/") == expected
        archived = _archived_records(crashed, "arch/")
        assert archived == {("topic-a", p): [(r[2], r[4]) for r in records if r[1] == p] for p in range(3)}


def test_index_is_written_before_the_data_and_leftover_indexes_are_ignored(tmp_path: Path) -> None:
    calls: list[str] = []

    class Spy(LocalStore):
        def put_bytes(self, key: str, data: bytes) -> None:
            calls.append(key)
            super().put_bytes(key, data)

        def put_file(self, key: str, path: str | Path) -> None:
            calls.append(key)
            super().put_file(key, path)

    store = Spy(tmp_path / "out")
    records = [("t", 0, o, T0, b"v") for o in range(3)]
    Run(store, _settings(tmp_path, flush_size=2), ListSource(records)).batch(records)
    # index, data, then the original's cursor naming that index
    assert calls == ["arch/2016-02-24/t-00000-000000000000.index.json", "arch/2016-02-24/t-00000-000000000000.gz",
                     "arch/last_chunk_index.t-00000.txt"]
    assert store.read("arch/last_chunk_index.t-00000.txt") == b"arch/2016-02-24/t-00000-000000000000.index.json"
    # a crash after the index of the next file: it is not a file yet, the resume point stays at 2
    store.put_bytes("arch/2016-02-24/t-00000-000000000002.index.json",
                    render_index([Chunk(2, 1, 20, 0, 2)]))
    assert archive_resume.resume_offsets(store, "arch/") == {("t", 0): 2}


def test_resume_from_files_without_index_or_with_a_wrong_one(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    sink = io.BytesIO()
    write_file([(50 + i, b"r%d" % i) for i in range(7)], sink, 8)
    store.put_bytes("2016-02-24/t-00003-000000000050.gz", sink.getvalue())  # as the Java connector may leave it
    assert archive_resume.resume_offsets(store, "") == {("t", 3): 57}
    store.put_bytes("2016-02-24/t-00003-000000000050.index.json",
                    render_index([Chunk(3, 1, 5, 0, 50)]))
    with pytest.raises(ConnectorError, match="does not match its index"):
        archive_resume.resume_offsets(store, "")


def _write_original_file(store: ObjectStore, s3_prefix: str, upload_date: str, topic: str, partition: int,
                         records: list[tuple[int, bytes]], block_size: int) -> str:
    """One file as the original connector uploads it at an offset commit: key
    ``<s3.prefix + "/" unless it ends with one><upload date>/<topic>-<partition %05d>-<first %012d>``,
    the ``.gz`` (our writer makes the original's bytes: see the unit tests against its output),
    then the index, then the cursor ``last_chunk_index.<topic>-<partition %05d>.txt`` naming the
    index. Returns the index key."""
    key_prefix = s3_prefix if not s3_prefix or s3_prefix.endswith("/") else s3_prefix + "/"
    base = f"{key_prefix}{upload_date}/{topic}-{partition:05d}-{records[0][0]:012d}"
    sink = io.BytesIO()
    chunks = write_file(records, sink, block_size)
    store.put_bytes(base + ".gz", sink.getvalue())
    store.put_bytes(base + ".index.json", render_index(chunks))
    store.put_bytes(f"{key_prefix}last_chunk_index.{topic}-{partition:05d}.txt", (base + ".index.json").encode())
    return base + ".index.json"


def test_resume_from_a_store_the_original_wrote(tmp_path: Path) -> None:
    """The original's layout (``s3.prefix=systest`` without a slash, upload-date folders, its
    cursors, an empty first block before a record longer than a block) is continued at the
    next offset of every partition, with the same ``s3.prefix``: no record twice, none missing."""
    topic = "orders"
    values = {(p, o): b'{"p":%d,"o":%d}' % (p, o) for p in range(3) for o in range(120)}
    values[(1, 0)] = b'{"big":"' + b"x" * 150 + b'"}'  # longer than a 100-character block
    records: list[Record] = [(topic, p, o, T0 + o * 1000, values[(p, o)]) for p in range(3) for o in range(120)]
    store = LocalStore(tmp_path / "out")
    # p0: two offset commits ([0, 40) then [40, 75)), on different upload days; p1: one; p2: none
    _write_original_file(store, "systest", "2026-11-23", topic, 0, [(o, values[(0, o)]) for o in range(40)], 100)
    _write_original_file(store, "systest", "2026-11-24", topic, 0, [(o, values[(0, o)]) for o in range(40, 75)], 100)
    _write_original_file(store, "systest", "2026-11-24", topic, 1, [(o, values[(1, o)]) for o in range(30)], 100)
    original = _snapshot(store)
    first_block = parse_index(original["systest/2026-11-24/orders-00001-000000000000.index.json"])[0]
    assert (first_block.num_records, first_block.byte_length, first_block.first_record_offset) == (0, 20, 0)

    config = validate_connector({"name": "arch", "connector.class": "S3SinkConnector", "topics": topic,
                                 "output.path": str(tmp_path / "out"), "local.buffer.dir": str(tmp_path),
                                 "s3.prefix": "systest", "compressed_block_size": "100", "chunks.per.file": "1000"})
    settings = archive_settings.ArchiveSettings.from_config(config)
    assert settings.prefix == "systest/"
    resume = archive_resume.resume_offsets(store, settings.prefix)
    assert resume == {(topic, 0): 75, (topic, 1): 30}
    assert json.loads(kafka_position.starting_offsets(resume, [(topic, p) for p in range(3)])) == {
        topic: {"0": 75, "1": 30, "2": -2}}

    # Kafka delivers from there (earliest for p2), in two micro-batches; then the run ends
    fed = [r for r in records if r[2] >= resume.get((r[0], r[1]), 0)]
    run = Run(store, settings, ListSource(records), resume)
    run.batch([r for r in fed if r[2] < 100])
    run.batch([r for r in fed if r[2] >= 100])
    run.finish()
    assert sum(report.skipped for report in run.reports) == 0
    archived = _archived_records(store, "systest/")  # checks every partition's files meet exactly
    assert archived == {(topic, p): [(o, values[(p, o)]) for o in range(120)] for p in range(3)}
    after = _snapshot(store)
    assert {k: after[k] for k in original if "last_chunk_index" not in k} == {
        k: v for k, v in original.items() if "last_chunk_index" not in k}
    assert sorted(k for k in after if k.endswith(".gz") and k not in original) == [
        f"systest/2016-02-24/{topic}-00000-000000000075.gz", f"systest/2016-02-24/{topic}-00001-000000000030.gz",
        f"systest/2016-02-24/{topic}-00002-000000000000.gz"]
    # the cursors now name our last files: the original could take the store back
    assert {k: v for k, v in after.items() if "last_chunk_index" in k} == {
        f"systest/last_chunk_index.{topic}-{p:05d}.txt":
            f"systest/2016-02-24/{topic}-{p:05d}-{o:012d}.index.json".encode() for p, o in ((0, 75), (1, 30), (2, 0))}


def test_open_files_are_written_offset_flush_interval_after_their_first_records_were_read(tmp_path: Path) -> None:
    """``offset.flush.interval.ms`` (continuous runs): an open file is due that long after the
    job that read its first records started, whatever comes (or does not come) after."""
    now = [0.0]
    records: list[Record] = [("t", p, o, T0 + o, b"t%d-%d" % (p, o)) for p in range(3) for o in range(10)]

    def part(p: int, start: int, end: int) -> list[Record]:
        return [r for r in records if r[1] == p and start <= r[2] < end]

    store = LocalStore(tmp_path / "out")
    run = Run(store, _settings(tmp_path), ListSource(records), flush_interval_ms=1000, clock=lambda: now[0])
    coordinator = run.coordinator
    run.batch(part(0, 0, 5) + part(1, 0, 3))  # t=0: two files open
    now[0] = 0.5
    run.batch(part(1, 3, 6))  # more records for an open file: its time does not change
    now[0] = 0.6
    run.batch(part(2, 0, 2))
    assert coordinator.next_flush() == 1.0
    now[0] = 0.999
    assert coordinator.due() == [] and run.flush_due() == []
    assert not [o.key for o in store.list() if o.key.endswith(".gz")]
    now[0] = 1.0
    assert coordinator.due() == [("t", 0), ("t", 1)]
    run.flush_due()
    assert sorted(o.key for o in store.list() if o.key.endswith(".gz")) == [
        "arch/2016-02-24/t-00000-000000000000.gz", "arch/2016-02-24/t-00001-000000000000.gz"]
    assert coordinator.next_flush() == pytest.approx(1.6)
    now[0] = 1.2
    run.batch(part(0, 5, 8))  # a new file for p0, due at 2.2
    now[0] = 1.6
    assert coordinator.due() == [("t", 2)]
    run.flush_due()
    assert coordinator.next_flush() == pytest.approx(2.2)
    now[0] = 2.2
    run.flush_due()
    assert coordinator.next_flush() is None and coordinator.open_files() == {}
    assert {tp: [o for o, _ in recs] for tp, recs in _archived_records(store, "arch/").items()} == {
        ("t", 0): list(range(8)), ("t", 1): list(range(6)), ("t", 2): list(range(2))}
    assert sorted(o.key.rsplit("/", 1)[1] for o in store.list() if o.key.endswith(".gz")) == [
        "t-00000-000000000000.gz", "t-00000-000000000005.gz", "t-00001-000000000000.gz", "t-00002-000000000000.gz"]
    # without the interval (a --once run) nothing is ever due
    idle = Run(LocalStore(tmp_path / "other"), _settings(tmp_path), ListSource(records), clock=lambda: 1e9)
    idle.batch(part(0, 0, 5))
    assert idle.coordinator.due() == [] and idle.coordinator.next_flush() is None


def test_idle_flusher_writes_due_files_without_a_micro_batch_and_reports_a_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The thread that writes due files while no micro-batch runs: it wakes when a file opens,
    writes it once due (through the same job function as at the end of a run, here run in this
    process), and when that job fails it keeps the error and stops the query."""
    records: list[Record] = [("t", 0, o, T0, b"r%d" % o) for o in range(4)]
    store = LocalStore(tmp_path / "out")
    run = Run(store, _settings(tmp_path), ListSource(records), flush_interval_ms=50)
    flushed = threading.Event()
    failing = [False]

    def flush_open_files(_spark: Any, coordinator: archive_coordinator.ArchiveCoordinator,
                         only: list[tuple[str, int]]) -> list[archive_reports.PartitionReport]:
        assert coordinator is run.coordinator
        if failing[0]:
            raise ConnectionRefusedError("Connection refused (S3)")  # what an unreachable store raises
        reports = run._flush(sorted(only))
        flushed.set()
        return reports

    monkeypatch.setattr(archive_coordinator, "flush_open_files", flush_open_files)
    stopped = threading.Event()
    flusher = archive_coordinator.IdleFlusher(None, run.coordinator, stopped.set).start()  # type: ignore[arg-type]
    try:
        with run.coordinator.lock:
            run.batch(records[:2])
        assert flushed.wait(60), "the open file was never written"
        assert [o.key for o in store.list() if o.key.endswith(".gz")] == ["arch/2016-02-24/t-00000-000000000000.gz"]
        assert run.coordinator.open_files() == {}
        failing[0] = True
        with run.coordinator.lock:
            run.batch(records[2:])
        assert stopped.wait(60), "the failure did not stop the query"
        assert isinstance(flusher.error, ConnectorError)
        assert str(flusher.error) == ("writing the files due by offset.flush.interval.ms failed: "
                                      "Connection refused (S3)")
        assert is_transient(flusher.error)  # the stage runner restarts the stage
    finally:
        flusher.stop()


def test_starting_offsets() -> None:
    subscribed = [("a", 0), ("a", 1), ("b", 0)]
    assert kafka_position.starting_offsets({}, subscribed) == "earliest"
    assert kafka_position.starting_offsets({("z", 0): 5}, subscribed) == "earliest"
    assert json.loads(kafka_position.starting_offsets({("a", 1): 70, ("z", 0): 5}, subscribed)) == {
        "a": {"0": -2, "1": 70}, "b": {"0": -2}}


def test_missing_local_buffer_dir_is_a_clear_error(tmp_path: Path) -> None:
    config = validate_connector({"name": "arch", "connector.class": "S3SinkConnector", "topics": "t",
                                 "output.path": str(tmp_path / "out"), "local.buffer.dir": str(tmp_path / "nope")},
                                source="arch.properties")
    with pytest.raises(ConnectorError) as info:
        archive_settings.ArchiveSettings.from_config(config)
    assert str(info.value) == (f"arch.properties: local.buffer.dir={str(tmp_path / 'nope')!r} does not exist "
                               "(create it first; blocks are staged there before upload)")


def test_archive_read_fetches_only_the_needed_blocks(tmp_path: Path) -> None:
    reads: list[tuple[str, int, int | None]] = []

    class Spy(LocalStore):
        def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
            reads.append((key, start, end))
            return super().read(key, start, end)

    store = Spy(tmp_path)
    sink = io.BytesIO()
    chunks = write_file([(1000 + i, b"value-%04d" % i) for i in range(100)], sink, 110)  # 10 per block
    store.put_bytes("d/t-00000-000000001000.gz", sink.getvalue())
    store.put_bytes("d/t-00000-000000001000.index.json", render_index(chunks))
    got = archive_read.read_archive_records("d/t-00000-000000001000.gz", 1042, None, store=store)
    assert got == [(1000 + i, b"value-%04d" % i) for i in range(42, 50)]
    assert reads == [("d/t-00000-000000001000.index.json", 0, None),
                     ("d/t-00000-000000001000.gz", chunks[4].byte_offset, chunks[4].byte_end)]
    reads.clear()
    got = archive_read.read_archive_records("d/t-00000-000000001000.gz", 1048, 15, store=store)
    assert [o for o, _ in got] == list(range(1048, 1063))
    assert reads[1] == ("d/t-00000-000000001000.gz", chunks[4].byte_offset, chunks[6].byte_end)


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


def _produce(bootstrap: str, topic: str, records: list[tuple[int, bytes | None, int]]) -> None:
    """(partition, value, timestamp ms) — the test helper's produce() has no timestamps."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    errors: list[str] = []
    for partition, value, ts in records:
        producer.produce(topic, value=value, partition=partition, timestamp=ts,
                         on_delivery=lambda err, _msg: errors.append(str(err)) if err else None)
        producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors


def _topic_records(bootstrap: str, topic: str) -> dict[tuple[str, int], list[tuple[int, bytes | None]]]:
    out: dict[tuple[str, int], list[tuple[int, bytes | None]]] = {}
    for rec in consume_all(bootstrap, topic):
        assert rec.partition is not None and rec.offset is not None
        out.setdefault((topic, rec.partition), []).append((rec.offset, rec.value))
    return out


def _values(partition: int, start: int, count: int) -> list[bytes | None]:
    out: list[bytes | None] = []
    for i in range(start, start + count):
        if i % 101 == 7:
            out.append(None)
        elif i % 53 == 3:
            out.append(b"multi\nline\r\nvalue %d \\ end" % i)
        else:
            out.append(b'{"p":%d,"i":%d,"pad":"%s"}' % (partition, i, b"z" * (i % 23)))
    return out


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
    assert _archived_records(store, "arch/") == {
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
    _produce(kafka_bootstrap, topic, [(p, v, T0 + i * 1000) for p in range(2)
                                      for i, v in enumerate(_values(p, 0, 120))])
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
    assert _archived_records(store, "") == _topic_records(kafka_bootstrap, topic)
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
    _produce(kafka_bootstrap, first, [(p, v, T0 + i * 1000) for p in range(3)
                                      for i, v in enumerate(_values(p, 0, 360))])
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
        after_kill = _archived_records(store, "kafka/")
        expected = _topic_records(kafka_bootstrap, first)
        assert after_kill == {tp: records[:300] for tp, records in expected.items()}
        assert not any(store.exists(f"kafka/2016-02-24/{first}-{p:05d}-000000000300.gz") for p in range(3))

        # While the connector is down: more records, and a new topic matching the pattern.
        _produce(kafka_bootstrap, first, [(p, v, T0 + (360 + i) * 1000) for p in range(3)
                                          for i, v in enumerate(_values(p, 360, 120))])
        create_topic(kafka_bootstrap, second, partitions=2, config=KEEP)
        _produce(kafka_bootstrap, second, [(p, v, T0 + DAY_MS + i) for p in range(2)
                                           for i, v in enumerate(_values(p + 10, 0, 260))])
        # Run 2 (--once) in this process, on the shared test SparkSession (one JVM fewer),
        # requested only now so that it never runs beside the subprocess's JVM.
        request.getfixturevalue("spark")
        with caplog.at_level(logging.INFO, logger=arch.__name__):
            _run_in_process(tmp_path, kafka_bootstrap, connector.properties, max_records=2000)
        assert (f'startingOffsets={{"{first}":{{"0":300,"1":300,"2":300}},'
                f'"{second}":{{"0":-2,"1":-2}}}}') in caplog.text
        archived = _archived_records(store, "kafka/")
        assert archived == {**_topic_records(kafka_bootstrap, first), **_topic_records(kafka_bootstrap, second)}
        assert {tp: len(r) for tp, r in archived.items()} == {
            **{(first, p): 480 for p in range(3)}, **{(second, p): 260 for p in range(2)}}
        keys = sorted(o.key for o in store.list("kafka/") if o.key.endswith(".gz"))
        assert keys == sorted(
            [f"kafka/2016-02-24/{first}-{p:05d}-{o:012d}.gz" for p in range(3) for o in (0, 100, 200, 300, 400)]
            + [f"kafka/2016-02-25/{second}-{p:05d}-{o:012d}.gz" for p in range(2) for o in (0, 100, 200)])
        assert store.incomplete_uploads() == []
        # Plain gzip to standard tools; every index range decompresses alone (checked by
        # _archived_records); the CLI helper seeks by offset with a range request.
        gz = store.read(f"kafka/2016-02-24/{first}-00001-000000000100.gz")
        text = subprocess.run(["gzip", "-dc"], input=gz, capture_output=True, check=True).stdout
        assert text == b"".join(encode_value(v) + b"\n" for v in _values(1, 100, 100))
        url = f"s3://{bucket}/kafka/2016-02-24/{first}-00001-000000000100.gz"
        with environment({"AWS_ENDPOINT_URL_S3": s3_endpoint}):
            assert archive_read.read_archive_records(url, 156, 3) == list(zip(range(156, 159), _values(1, 156, 3),
                                                                      strict=True))
    assert not list(staged.iterdir()), "run directories are removed (the killed run's on the next start)"


@pytest.mark.slow
def test_continuous_run_writes_open_files_offset_flush_interval_after_they_opened(
        tmp_path: Path, kafka_bootstrap: str, unique_name: str, connectors: list[Connector]) -> None:
    """The real connector, continuous, no rotation rule that the records could reach: a quiet
    topic's records still land in the store, a file per partition once the interval has passed,
    while the connector keeps running (the idle flush: no micro-batch runs on a quiet topic)."""
    topic = unique_name
    create_topic(kafka_bootstrap, topic, partitions=2, config=KEEP)
    _produce(kafka_bootstrap, topic, [(p, v, T0 + i * 1000) for p in range(2) for i, v in enumerate(_values(p, 0, 30))])
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
    _produce(kafka_bootstrap, topic, [(p, v, T0 + (30 + i) * 1000) for p in range(2)
                                      for i, v in enumerate(_values(p, 30, 10))])
    _wait_for(lambda: archived_counts() == {(topic, 0): 40, (topic, 1): 40}, 240, connector, "40 records per partition")
    assert connector.proc is not None and connector.proc.poll() is None, "still running"
    assert _archived_records(store, "systest/") == _topic_records(kafka_bootstrap, topic)
    assert "writing files open for offset.flush.interval.ms=1500" in connector.log.read_text(errors="replace")


@pytest.mark.slow
def test_real_run_continues_a_store_the_original_wrote(tmp_path: Path, kafka_bootstrap: str, unique_name: str,
                                                      spark: Any) -> None:
    """Spark's Kafka source starts each partition where the original's files end (their
    ``s3.prefix`` without a slash, upload-date folders); the store then holds every record once."""
    topic = unique_name
    create_topic(kafka_bootstrap, topic, partitions=2, config=KEEP)
    _produce(kafka_bootstrap, topic, [(p, v, T0 + i * 1000) for p in range(2) for i, v in enumerate(_values(p, 0, 90))])
    kafka = _topic_records(kafka_bootstrap, topic)
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
    assert _archived_records(store, "systest/") == kafka
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
    _produce(kafka_bootstrap, topic, [(p, b"a%d-%d" % (p, i), T0 + i * 3_600_000) for p in range(2) for i in range(30)])
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

    _produce(kafka_bootstrap, topic, [(p, b"a%d-%d" % (p, i), T0 + i * 3_600_000)
                                      for p in range(2) for i in range(30, 40)])
    _run_in_process(tmp_path, kafka_bootstrap, properties)
    assert _archived_records(store, "") == _topic_records(kafka_bootstrap, topic)
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
