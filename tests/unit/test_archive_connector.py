"""The archive connector's driver side and its executor callable, in this process (no Spark,
no Kafka, no object store service): deterministic cuts whatever the micro-batches, rotation
rules, crash + resume from the store, index-before-data ordering, the original's store continued,
``offset.flush.interval.ms``, ``archive read`` range requests.

The records a task reads again (those of a file begun in an earlier micro-batch) come from a list
(:class:`ListSource`), which lets a test start partitions at any offset and log every range read.
Kafka itself behind those reads — the real reader, in executor tasks and in a killed and
restarted connector, on a local directory and on S3 — is in ``tests/e2e/test_archive.py``, which
uses the helpers here.
"""

from __future__ import annotations

import io
import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from archive_checks import T0, archived_records
from pubsub_connect.config.loader import validate_connector
from pubsub_connect.io.objectstore.base import ObjectStore
from pubsub_connect.io.objectstore.local import LocalStore
from pubsub_connect.model.blockgzip.blocks import write_file
from pubsub_connect.model.blockgzip.index import Chunk, parse_index, render_index
from pubsub_connect.model.blockgzip.names import index_key
from pubsub_connect.model.blockgzip.rotation import RotationPolicy
from pubsub_connect.pipelines import kafka_position
from pubsub_connect.pipelines.archive import coordinator as archive_coordinator
from pubsub_connect.pipelines.archive import read as archive_read
from pubsub_connect.pipelines.archive import records as archive_records
from pubsub_connect.pipelines.archive import reports as archive_reports
from pubsub_connect.pipelines.archive import resume as archive_resume
from pubsub_connect.pipelines.archive import settings as archive_settings
from pubsub_connect.pipelines.archive import task as archive_task
from pubsub_connect.pipelines.archive.records import RecordSource
from pubsub_connect.pipelines.context import ConnectorError
from pubsub_connect.pipelines.runner.failures import is_transient

DAY_MS = 86_400_000


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

    def __init__(self, store: ObjectStore, settings: archive_settings.ArchiveSettings, source: RecordSource,
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


def _stream(partitions: int, per_partition: int, seed: int = 1) -> list[tuple[str, int, int, int, bytes | None]]:
    rng = random.Random(seed)
    records = []
    for p in range(partitions):
        for o in range(per_partition):
            value = None if o % 97 == 13 else (b"line\nbreak-%d" % o if o % 31 == 5 else b"p%d-o%d-" % (p, o)
                                                + b"x" * rng.randrange(0, 40))
            records.append(("topic-a", p, o, T0 + o * 1000, value))
    return records


# ------------------------------------------------------------------------------------------ tests


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
    assert archived_records(LocalStore(tmp_path / "whole" / "out"), "arch/") == {
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


def crash_then_resume(records: list[Record], make_store: Callable[[str], ObjectStore], source: RecordSource,
                      buffer: Path) -> None:
    """A run dies with open files (nothing published for them); the next run resumes from the
    store, re-reads from there and ends with exactly the objects of an uninterrupted run.

    ``records``: one topic, 3 partitions of 500 records from offset 0; ``source`` holds them too
    (the end-to-end tests give Kafka itself). ``make_store(name)``: an empty store."""
    topic = records[0][0]
    policy = {"block_size": 400, "chunks_per_file": 3, "flush_size": 0, "rotate_interval_ms": 0}
    reference = make_store("reference")
    uninterrupted = Run(reference, _settings(buffer, **policy), source)
    uninterrupted.batch(records)
    uninterrupted.finish()
    expected = _snapshot(reference, "arch/")

    crashed = make_store("crashed")
    first_run = Run(crashed, _settings(buffer, **policy), source)
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
    assert cursors == {f"arch/last_chunk_index.{topic}-{p:05d}.txt": max(
        k for k in visible if f"-{p:05d}-" in k and k.endswith(".index.json")).encode() for p in range(3)}
    assert not list((buffer / "arch-test").iterdir()), "each task removes its staging directory"

    resume = archive_resume.resume_offsets(crashed, "arch/")
    assert resume == {tp: f.first_offset for tp, f in open_files.items()}
    second_run = Run(crashed, _settings(buffer, **policy), source, resume)
    # Kafka delivers from the resume offsets; an earlier replayed record would be skipped too.
    second_run.batch([r for r in records if r[2] >= resume[(r[0], r[1])] - 5])
    second_run.finish()
    assert sum(report.skipped for report in second_run.reports) == 15
    assert _snapshot(crashed, "arch/") == expected
    archived = archived_records(crashed, "arch/")
    assert archived == {(topic, p): [(r[2], r[4]) for r in records if r[1] == p] for p in range(3)}


def test_crash_mid_file_then_resume_rewrites_identical_objects(tmp_path: Path) -> None:
    """Local directory target; the S3 target, with Kafka behind the re-reads, is an end-to-end test."""
    records = _stream(3, 500, seed=5)
    (tmp_path / "buf").mkdir()
    crash_then_resume(records, lambda name: LocalStore(tmp_path / name), ListSource(records), tmp_path / "buf")


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
    archived = archived_records(store, "systest/")  # checks every partition's files meet exactly
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
    assert {tp: [o for o, _ in recs] for tp, recs in archived_records(store, "arch/").items()} == {
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
