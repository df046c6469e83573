"""The Block-GZIP archive sink: Kafka topics → ``.gz`` + ``.index.json`` objects (S3, local, Volumes).

Equivalent of ``com.deviantart.kafka_connect_s3.S3SinkConnector`` (see ``model/blockgzip.py``
for the format). One stage, ``archive``: it reads Kafka with :func:`read_kafka` and writes
objects; unlike the Pub/Sub connectors it has no bronze/outbox tables because the object store
itself is the durable output *and* the offset store, and Kafka, which keeps every record for its
retention, is where records are read again when needed.

Exactly-once by construction
----------------------------
- **The store is the offset store.** On start, the sink lists the store: for each
  topic-partition the last complete file (the highest first offset whose ``.gz`` exists) and its
  index give the next offset; Kafka is read from there (partitions without files from the
  earliest offset). The Spark checkpoint is per run and thrown away; nothing in
  ``local.buffer.dir`` is trusted after a restart.
- **Deterministic names.** A file is named by topic, partition and first offset; its date
  folder comes from its first record's timestamp. A re-run starts each partition exactly at an
  existing file boundary, so the file it was writing when it died gets the same name again.
- **Deterministic cuts.** Blocks and files close on record data only (uncompressed block size,
  blocks per file, ``flush.size`` records, ``rotate.interval.ms`` of record time) — plus, at the
  end of a ``--once`` run or a clean stop, the open tail of each partition is written as a
  shorter file (like Connect's flush on stop) instead of being left for the next run. In a
  continuous run a file also closes once it has been open for ``offset.flush.interval.ms``
  (driver clock, from the micro-batch that read its first records; :class:`IdleFlusher` when no
  micro-batch comes), as the original uploads its open files at every Connect offset commit: a
  quiet topic's records reach the store within about that interval. Such a cut depends on time,
  so a re-run after a crash may end that file elsewhere; exactly-once does not depend on it (the
  store says where each partition resumes, and the retry rewrites the same name, index first).
- **Atomic objects, index first.** A file is compressed into ``local.buffer.dir``; then its
  ``.index.json`` is written, then the ``.gz`` (one PUT or a multipart upload completed only
  when whole; temp file + rename locally). A visible ``.gz`` is therefore always whole and
  indexed; an index without its ``.gz`` is a crash leftover the retry overwrites.

So after ``kill -9`` at any moment a restart neither skips nor repeats a record: files that were
committed are resumed after, and the file being written was never visible.

Where the work happens: executors write, the driver coordinates
------------------------------------------------------------------
No record reaches the driver. Each micro-batch is repartitioned by (topic, partition), sorted by
offset within each Spark partition and handed to :class:`ArchiveTask` with ``mapInArrow``: in
an executor task it cuts each topic-partition's records into files, compresses and uploads the
complete ones, and returns one small row per topic-partition (:class:`PartitionReport`: files
written, records skipped, where the partition now stands, which process did it). The driver
collects only those rows. Partitions are compressed in parallel, one task each.

A file usually spans micro-batches (a default file holds 1 GiB), but a task is a different
process each time — on a cluster another machine — so no open gzip stream can survive from one
batch to the next. Instead:

- **Plan without compressing.** :class:`~pubsub_connect.model.blockgzip.FilePlanner` runs the
  rotation rules on a partition's records with a block *sizer* that shares the writer's cut
  code but compresses nothing. What it knows about the unfinished file afterwards is a handful
  of numbers (:class:`~pubsub_connect.model.blockgzip.OpenFile`: first offset and timestamp,
  records and blocks so far, the open block's size); the driver keeps them per partition
  (:class:`PartitionState`) and ships them to the next batch's tasks inside the callable.
- **Compress once, when the file is complete.** Only files a rotation rule closed are written.
  When such a file began in an earlier micro-batch, the task reads that beginning — the offset
  range ``[first offset, next offset)`` in its partition state — once more from Kafka
  (:class:`KafkaRecordSource`, a plain Kafka client in the task), then the batch's own records.
  The records of the unfinished file from this batch are simply dropped at the end of the task.
  Each record is therefore compressed exactly once and read from Kafka at most twice, however
  small the micro-batches are; the price is that Kafka must still hold a file's first records
  when it completes (its retention must exceed the time a file stays open, which a restart
  after a crash needs anyway).
- **Same bytes as one writer.** The sizer cuts blocks exactly where the writer does, so the
  files are byte-identical to those of a single writer that saw every record, whatever the
  micro-batch boundaries (the tests compare them) — and to the original's writer given the
  same lines. Should Kafka return different records for a
  range on the second read (a compaction in between), the file holds what Kafka returned for
  that range and the ranges still tile the partition: nothing is archived twice or skipped.
- **End of run.** The open files are written as shorter files by one more small job
  (:meth:`ArchiveQuery._finish`), again reading their records from Kafka in tasks. When a
  micro-batch was cut short (the query failed or was stopped mid-batch), the driver does not
  know what its tasks wrote, so nothing is flushed: the next run resumes from the store.

Executors need no SparkSession: the callable carries the store (with the credentials, region and
endpoint the driver resolved, see :meth:`~pubsub_connect.io.objectstore.ObjectStore.portable`),
the Kafka client settings and the partition states. Files are compressed in a per-task
directory under ``local.buffer.dir`` (it must exist on every executor host), removed when the
task ends. Since executors write the objects, an ``output.path`` that is a plain directory must
be one every executor sees (the driver's host in local mode, a shared file system); on a cluster
use a Volume or S3.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import threading
import time
import uuid
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pubsub_connect.io.objectstore import (
    LocalStore,
    ObjectStore,
    ObjectStoreError,
    _pid_alive,
    list_archive_files,
    open_store,
    store_for_location,
)
from pubsub_connect.model.blockgzip import (
    BlockGzipError,
    BlockGzipWriter,
    Chunk,
    FileCut,
    FilePlanner,
    OpenFile,
    RotationPolicy,
    cursor_key,
    decode_line,
    find_chunk,
    gz_key_for,
    index_key,
    iter_members,
    key_prefix,
    object_key,
    parse_index,
    read_records,
    render_index,
    split_lines,
)
from pubsub_connect.pipelines.base import ConnectorError, PipelineContext, Stage, error_line, query_name
from pubsub_connect.pipelines.kafka_position import starting_offsets, subscribed_partitions

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from pubsub_connect.config import ConnectorConfig
    from pubsub_connect.io.kafka_source import KafkaReadOptions

log = logging.getLogger(__name__)

STAGE = "archive"

TopicPartition = tuple[str, int]


class ArchiveReadError(ConnectorError):
    """``archive read`` cannot serve the request (offset not in the file, no index, unreachable
    store…). A :class:`ConnectorError`, so the CLI prints its one-line message."""


class ArchiveWriteError(ConnectorError):
    """A task cannot write archive files (no staging directory on its host…): one line."""
# --------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArchiveSettings:
    """The archive keys of a connector config, checked once."""

    prefix: str
    policy: RotationPolicy
    buffer_dir: Path

    @classmethod
    def from_config(cls, config: ConnectorConfig) -> ArchiveSettings:
        buffer_dir = Path(str(config.get("local.buffer.dir")))
        # The original connector requires the directory to exist: creating it silently could stage gigabytes
        # on the wrong disk because of a typo.
        if not buffer_dir.is_dir():
            raise ConnectorError(f"{config.source}: local.buffer.dir={str(buffer_dir)!r} does not exist "
                                 "(create it first; blocks are staged there before upload)")
        if not os.access(buffer_dir, os.W_OK):
            raise ConnectorError(f"{config.source}: local.buffer.dir={str(buffer_dir)!r} is not writable")
        policy = RotationPolicy(
            block_size=int(config.get("compressed_block_size")),
            chunks_per_file=int(config.get("chunks.per.file")),
            flush_size=int(config.get("flush.size")),
            rotate_interval_ms=int(config.get("rotate.interval.ms")),
        )
        return cls(key_prefix(str(config.get("s3.prefix") or "")), policy, buffer_dir)


# --------------------------------------------------------------------------------------------
# Resuming from the store
# --------------------------------------------------------------------------------------------


def file_end_offset(store: ObjectStore, gz_key: str, first_offset: int, size: int,
                    has_index: bool) -> int:
    """The offset after the last record of a complete file, from its index.

    Without an index (a crash leftover of the original Java connector, which uploads the
    ``.gz`` before its index) the file is read and its records counted, assuming consecutive
    offsets as that connector did.
    """
    if has_index:
        chunks = parse_index(store.read(index_key(gz_key)))
        if not chunks or chunks[0].first_record_offset != first_offset or chunks[-1].byte_end != size:
            raise ConnectorError(f"{store.url(gz_key)} does not match its index (first offset or size "
                                 "differ); move the file away or restore its index")
        return chunks[-1].end_offset
    log.warning("%s has no index: counting its records", store.url(gz_key))
    return first_offset + len(read_records(store.read(gz_key)))


def resume_offsets(store: ObjectStore, prefix: str) -> dict[TopicPartition, int]:
    """Next offset to archive per topic-partition, from the last complete file of each."""
    offsets: dict[TopicPartition, int] = {}
    for tp, files in list_archive_files(store, prefix).items():
        last = files[-1]
        offsets[tp] = file_end_offset(store, last.name.gz_key, last.name.first_offset, last.size,
                                      last.has_index)
    return offsets


# --------------------------------------------------------------------------------------------
# Records and where they are read again
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Records:
    """A run of one partition's records in increasing offsets, as the plain lists the writer and
    the planner take (timestamps in epoch milliseconds, -1 when the record has none)."""

    offsets: list[int]
    timestamps: list[int]
    values: list[bytes | None]

    def __len__(self) -> int:
        return len(self.offsets)

    def slice(self, start: int, stop: int | None = None) -> Records:
        return Records(self.offsets[start:stop], self.timestamps[start:stop], self.values[start:stop])

    @classmethod
    def from_batch(cls, batch: pa.RecordBatch) -> Records:
        """Rows of a micro-batch as :func:`select_archive_columns` shapes them (``offset, ts, value``)."""
        # A record without a timestamp (-1 in Kafka, null here) dates its file 1969-12-31.
        timestamps = [-1 if ts is None else ts for ts in batch.column("ts").to_pylist()]
        return cls(batch.column("offset").to_pylist(), timestamps, batch.column("value").to_pylist())

    @classmethod
    def from_kafka(cls, batch: pa.RecordBatch) -> Records:
        """Rows in Spark's Kafka schema (``timestamp`` in microseconds), as the task-side reader
        of :mod:`pubsub_connect.io.kafka_source` returns them."""
        import pyarrow as pa
        import pyarrow.compute as pc

        micros = pc.fill_null(batch.column("timestamp").cast(pa.int64()), -1000)
        millis = micros.to_numpy(zero_copy_only=False) // 1000  # floor, like Spark's unix_millis
        return cls(batch.column("offset").to_pylist(), millis.tolist(), batch.column("value").to_pylist())


class RecordSource(Protocol):
    """Where a task reads a partition's records again: those of a file that began in an earlier
    micro-batch. Must pickle (it travels to the executors with :class:`ArchiveTask`)."""

    def read(self, topic: str, partition: int, start: int, end: int) -> Iterator[Records]:
        """The records of ``[start, end)`` in increasing offsets (offsets without a record —
        compaction, transaction markers — are skipped)."""
        ...


@dataclass(frozen=True)
class KafkaRecordSource:
    """Reads Kafka directly from the task, with the stream's own client settings (security,
    isolation level…) and the task-side reader of the Python Kafka source.

    Why not a Spark read planned by the driver: whether a file completes is only known inside
    the task, after planning the batch's records; a second job would have to re-plan first."""

    options: KafkaReadOptions = field(repr=False)  # bootstrap servers, credentials

    def read(self, topic: str, partition: int, start: int, end: int) -> Iterator[Records]:
        from pubsub_connect.io.kafka_source import KafkaInputPartition, read_partition

        for batch in read_partition(self.options, KafkaInputPartition(topic, partition, start, end)):
            yield Records.from_kafka(batch)


def replay_options(options: Mapping[str, str]) -> KafkaReadOptions:
    """The stream's Kafka options as the task-side reader takes them (parsed once, on the driver,
    where a bad option fails with its own message)."""
    from pubsub_connect.io.kafka_source import KafkaReadOptions

    return KafkaReadOptions.parse(options, streaming=True)


# --------------------------------------------------------------------------------------------
# Between micro-batches: a few numbers per partition
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionState:
    """Where a topic-partition stands between micro-batches.

    ``next_offset``: every record below it was seen — archived in a complete file, or in
    ``open_file`` (whose records ``[open_file.first_offset, next_offset)`` are not stored
    anywhere: they are read again from Kafka when the file completes). Records below it that a
    batch brings again are skipped.
    """

    next_offset: int = 0
    open_file: OpenFile | None = None

    def to_json(self) -> str:
        doc: dict[str, Any] = {"next_offset": self.next_offset}
        if self.open_file is not None:
            doc["open_file"] = self.open_file.to_json()
        return json.dumps(doc, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> PartitionState:
        doc = json.loads(text)
        open_file = doc.get("open_file")
        return cls(int(doc["next_offset"]), OpenFile.from_json(open_file) if open_file else None)


@dataclass(frozen=True)
class CommittedFile:
    """A file a task published (index and ``.gz``), as reported to the driver."""

    key: str
    topic: str
    partition: int
    first_offset: int
    end_offset: int
    num_records: int
    num_chunks: int
    size: int = 0


@dataclass(frozen=True)
class PartitionReport:
    """What one task did for one topic-partition: the row it returns to the driver."""

    topic: str
    partition: int
    files: list[CommittedFile]
    skipped: int
    state: PartitionState
    pid: int
    host: str


#: The tasks' output (one row per topic-partition), in Spark's DDL.
REPORT_DDL = ("topic string, partition int, files array<struct<key:string,first_offset:bigint,end_offset:bigint,"
              "records:bigint,blocks:int,bytes:bigint>>, skipped bigint, state string, pid int, host string")


@lru_cache(maxsize=1)
def _report_schema() -> pa.Schema:
    import pyarrow as pa

    file_type = pa.struct([("key", pa.string()), ("first_offset", pa.int64()), ("end_offset", pa.int64()),
                           ("records", pa.int64()), ("blocks", pa.int32()), ("bytes", pa.int64())])
    return pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("files", pa.list_(file_type)),
                      ("skipped", pa.int64()), ("state", pa.string()), ("pid", pa.int32()), ("host", pa.string())])


def _report_row(report: PartitionReport) -> dict[str, Any]:
    return {"topic": report.topic, "partition": report.partition, "skipped": report.skipped,
            "state": report.state.to_json(), "pid": report.pid, "host": report.host,
            "files": [{"key": f.key, "first_offset": f.first_offset, "end_offset": f.end_offset,
                       "records": f.num_records, "blocks": f.num_chunks, "bytes": f.size} for f in report.files]}


def parse_report(row: Mapping[str, Any]) -> PartitionReport:
    """A task's output row (a collected Spark row as a dict) → :class:`PartitionReport`."""
    topic, partition = str(row["topic"]), int(row["partition"])
    files = [CommittedFile(f["key"], topic, partition, f["first_offset"], f["end_offset"], f["records"],
                           f["blocks"], f["bytes"]) for f in row["files"] or []]
    return PartitionReport(topic, partition, files, int(row["skipped"]), PartitionState.from_json(row["state"]),
                           int(row["pid"]), str(row["host"]))


# --------------------------------------------------------------------------------------------
# In the executor: planning, compressing, uploading
# --------------------------------------------------------------------------------------------


class TaskStaging:
    """The directory a task compresses its files in, under ``local.buffer.dir`` of the host it
    runs on; created on first use, removed when the task ends."""

    def __init__(self, buffer_dir: Path, connector: str):
        self.buffer_dir = buffer_dir
        self.connector = connector
        self._path: Path | None = None

    def path(self) -> Path:
        if self._path is None:
            if not self.buffer_dir.is_dir():
                raise ArchiveWriteError(f"local.buffer.dir={str(self.buffer_dir)!r} does not exist on "
                                        f"{socket.gethostname()} (it must exist on every executor host)")
            self._path = new_staging_dir(self.buffer_dir, self.connector, kind="task")
        return self._path

    def remove(self) -> None:
        if self._path is not None:
            shutil.rmtree(self._path, ignore_errors=True)
            self._path = None


def write_archive_file(store: ObjectStore, prefix: str, block_size: int, topic: str, partition: int,
                       parts: Iterable[Records], staging: TaskStaging) -> CommittedFile | None:
    """Write one whole file from its records and publish it: index first, then the ``.gz``, then
    the partition's cursor (the original's ``last_chunk_index`` object, so that the original
    connector could take the store over; this connector does not read it).

    The name comes from the first record written. Returns None when ``parts`` hold no record
    (every record of the range vanished from Kafka before it was read again)."""
    writer: BlockGzipWriter | None = None
    handle = None
    staged: Path | None = None
    key = ""
    try:
        for part in parts:
            if not part:
                continue
            if writer is None:
                first_offset = part.offsets[0]
                key = object_key(prefix, topic, partition, first_offset, part.timestamps[0])
                staged = staging.path() / f"{topic}-{partition:05d}-{first_offset:012d}.gz.part"
                handle = open(staged, "wb")  # noqa: SIM115 - closed in finally
                writer = BlockGzipWriter(handle, block_size)
            writer.extend(part.offsets, part.values, assume_sorted=True)  # sorted by Spark or by Kafka
        if writer is None or handle is None or staged is None:
            return None
        chunks = writer.finish()
        handle.close()
        store.put_bytes(index_key(key), render_index(chunks))
        store.put_file(key, staged)
        store.put_bytes(cursor_key(prefix, topic, partition), index_key(key).encode("utf-8"))
    finally:
        if handle is not None:
            handle.close()
        if staged is not None:
            with contextlib.suppress(OSError):
                staged.unlink()
    return CommittedFile(key, topic, partition, chunks[0].first_record_offset, chunks[-1].end_offset,
                         writer.num_records, len(chunks), writer.bytes_written)


class _PartitionWork:
    """One topic-partition within one task: plans its records into files and writes the files
    that complete. Records of the partition's unfinished file are kept only until the task ends."""

    def __init__(self, task: ArchiveTask, topic: str, partition: int, staging: TaskStaging):
        state = task.states.get((topic, partition), PartitionState())
        self.task = task
        self.topic = topic
        self.partition = partition
        self.staging = staging
        self.next_offset = state.next_offset
        self.planner = FilePlanner(task.settings.policy, state.open_file)
        #: The unfinished file's records seen by earlier batches: read again only if it completes.
        self.earlier: tuple[int, int] | None = None
        if state.open_file is not None:
            self.earlier = (state.open_file.first_offset, state.open_file.next_offset)
        self.pending: list[Records] = []
        self.files: list[CommittedFile] = []
        self.skipped = 0

    def feed(self, records: Records) -> None:
        """Plan this run of the partition's records (sorted) and write the files it completes."""
        seen = bisect_left(records.offsets, self.next_offset)
        if seen:  # a replayed range: those records are archived or in the open file already
            self.skipped += seen
            records = records.slice(seen)
        if not records:
            return
        position = 0
        for cut in self.planner.feed(records.offsets, records.timestamps, records.values):
            self._write([*self.pending, records.slice(position, cut.stop)], cut)
            position = cut.stop
        if position < len(records):
            self.pending.append(records.slice(position))
        self.next_offset = records.offsets[-1] + 1

    def finish(self, final: bool) -> PartitionReport:
        """End of the task for this partition; ``final``: write the unfinished file too."""
        if final:
            cut = self.planner.close()
            if cut is not None:
                self._write(self.pending, cut)
        return PartitionReport(self.topic, self.partition, self.files, self.skipped,
                               PartitionState(self.next_offset, self.planner.open_file), os.getpid(),
                               socket.gethostname())

    def _write(self, fresh: list[Records], cut: FileCut) -> None:
        earlier: Iterable[Records] = ()
        if self.earlier is not None:
            earlier = self.task.source.read(self.topic, self.partition, *self.earlier)
            self.earlier = None
        self.pending = []
        settings = self.task.settings
        done = write_archive_file(self.task.store, settings.prefix, settings.policy.block_size, self.topic,
                                  self.partition, chain(earlier, fresh), self.staging)
        planned = (cut.first_offset, cut.end_offset, cut.num_records, cut.num_chunks)
        if done is None or (done.first_offset, done.end_offset, done.num_records, done.num_chunks) != planned:
            log.warning("%s-%d: offsets [%d, %d) read again differ from the first read (compaction?); the file "
                        "holds what Kafka returned", self.topic, self.partition, cut.first_offset, cut.end_offset)
        if done is not None:
            self.files.append(done)


def _partition_runs(batch: pa.RecordBatch) -> Iterator[tuple[str, int, int, int]]:
    """``(topic, partition, start, stop)`` of each run of rows of one topic-partition."""
    topics = batch.column("topic").to_pylist()
    partitions = batch.column("partition").to_pylist()
    n = len(topics)
    start = 0
    while start < n:
        topic, partition = topics[start], partitions[start]
        stop = start + 1
        while stop < n and partitions[stop] == partition and topics[stop] == topic:
            stop += 1
        yield topic, partition, start, stop
        start = stop


@dataclass(frozen=True, eq=False)
class ArchiveTask:
    """The ``mapInArrow`` callable: archives the topic-partitions of one Spark partition.

    Input: rows ``topic, partition, offset, ts, value`` grouped by topic-partition and sorted by
    offset — or, for the end-of-run job (``final``), just ``topic, partition`` naming the
    partitions whose open file is to be written. Output: one :data:`REPORT_DDL` row per
    topic-partition. Everything the task needs travels in this object (pickled into the task):
    the store with its credentials, the settings, the Kafka client settings of ``source`` and
    the partition states as of the start of the micro-batch.
    """

    store: ObjectStore = field(repr=False)
    settings: ArchiveSettings
    connector: str
    source: RecordSource = field(repr=False)
    states: Mapping[TopicPartition, PartitionState] = field(repr=False)
    final: bool = False

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        staging = TaskStaging(self.settings.buffer_dir, self.connector)
        work: _PartitionWork | None = None
        try:
            for batch in batches:
                records = Records.from_batch(batch) if "offset" in batch.schema.names else None
                for topic, partition, start, stop in _partition_runs(batch):
                    if work is None or (work.topic, work.partition) != (topic, partition):
                        if work is not None:
                            yield pa.RecordBatch.from_pylist([_report_row(work.finish(self.final))],
                                                             schema=_report_schema())
                        work = _PartitionWork(self, topic, partition, staging)
                    if records is not None:
                        work.feed(records.slice(start, stop))
            if work is not None:
                yield pa.RecordBatch.from_pylist([_report_row(work.finish(self.final))], schema=_report_schema())
        finally:
            staging.remove()


# --------------------------------------------------------------------------------------------
# On the driver: partition states, one job per micro-batch
# --------------------------------------------------------------------------------------------


class ArchiveCoordinator:
    """The driver side of a run: the :class:`PartitionState` of every topic-partition, the
    callable for the next job, and what the jobs reported. Holds no record.

    ``flush_interval_ms`` (``offset.flush.interval.ms``, continuous runs only; None: never): an
    open file is written once this long has passed since its first records were read, even when
    no more records come. Why: the original uploads every open file at each Connect offset
    commit (every ``offset.flush.interval.ms``), so a quiet topic's records reach the store
    within about that interval; rotation on record data alone would hold them back until more
    records arrive. The time is the driver's clock when the job that read them started.
    """

    def __init__(self, store: ObjectStore, settings: ArchiveSettings, connector: str, source: RecordSource,
                 resume: Mapping[TopicPartition, int], subscribed: Iterable[TopicPartition] = (),
                 flush_interval_ms: int | None = None, clock: Callable[[], float] = time.monotonic):
        self.store = store
        self.settings = settings
        self.connector = connector
        self.source = source
        self.states: dict[TopicPartition, PartitionState] = {tp: PartitionState(offset)
                                                             for tp, offset in resume.items()}
        self.known: set[TopicPartition] = set(subscribed) | set(resume)
        #: True from the start of a job until its reports are applied: when a job is cut short,
        #: the states no longer say what the store holds, and nothing may be written from them.
        self.in_flight = False
        self.flush_interval_s = None if flush_interval_ms is None else flush_interval_ms / 1000.0
        self.clock = clock
        #: When the job that read each open file's first records started (``clock`` seconds).
        self.opened_at: dict[TopicPartition, float] = {}
        self._job_started = clock()
        #: Held by whoever runs a job and applies its reports (a micro-batch, the idle flush, the
        #: end of the run): they take turns, so every job starts from the states the last one left.
        self.lock = threading.RLock()
        #: Set when a file opens (a new deadline) — wakes the idle flush (:class:`IdleFlusher`).
        self.opened = threading.Event()

    def task(self, final: bool = False) -> ArchiveTask:
        """The callable for the next job, with fresh store credentials and the current states."""
        self._job_started = self.clock()
        return ArchiveTask(self.store.portable(), self.settings, self.connector, self.source, dict(self.states),
                           final)

    def slots(self) -> dict[TopicPartition, int]:
        """A distinct task for every known topic-partition (see :func:`spread_partitions`)."""
        return {tp: slot for slot, tp in enumerate(sorted(self.known))}

    def open_files(self) -> dict[TopicPartition, OpenFile]:
        return {tp: state.open_file for tp, state in sorted(self.states.items()) if state.open_file is not None}

    def apply(self, rows: Iterable[Mapping[str, Any]]) -> list[PartitionReport]:
        """Take the reports of a completed job: new states, and the files written (logged)."""
        reports = [parse_report(row) for row in rows]
        for report in sorted(reports, key=lambda r: (r.topic, r.partition)):
            tp = (report.topic, report.partition)
            before = self.states.get(tp, PartitionState()).open_file
            self.states[tp] = report.state
            self.known.add(tp)
            now_open = report.state.open_file
            if now_open is None:
                self.opened_at.pop(tp, None)
            elif before is None or before.first_offset != now_open.first_offset or tp not in self.opened_at:
                self.opened_at[tp] = self._job_started
                self.opened.set()
            for done in report.files:
                log.info("archived %s: offsets [%d, %d), %d records in %d blocks (%s, pid %d)",
                         self.store.url(done.key), done.first_offset, done.end_offset, done.num_records,
                         done.num_chunks, report.host, report.pid)
        self.in_flight = False
        return reports

    def next_flush(self) -> float | None:
        """When (``clock`` seconds) the oldest open file is due by ``offset.flush.interval.ms``;
        None when no file is open or the interval is off."""
        for tp in [tp for tp in self.opened_at if self.states.get(tp, PartitionState()).open_file is None]:
            del self.opened_at[tp]  # written by a job meanwhile
        if self.flush_interval_s is None or not self.opened_at:
            return None
        return min(self.opened_at.values()) + self.flush_interval_s

    def due(self, now: float | None = None) -> list[TopicPartition]:
        """The partitions whose open file is due by ``offset.flush.interval.ms`` at ``now``."""
        if self.flush_interval_s is None:
            return []
        now = self.clock() if now is None else now
        return sorted(tp for tp, opened in self.opened_at.items() if now - opened >= self.flush_interval_s)

    def describe_open(self) -> str:
        """``topic-partition@first offset+records`` of every open file, for the log."""
        return ", ".join(f"{t}-{p}@{f.first_offset}+{f.num_records}" for (t, p), f in self.open_files().items()) \
            or "none"


def _murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of one INT column (Murmur3 x86 32-bit, seed 42), as a signed int."""
    mask = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask

    k1 = rotl((value & mask) * 0xCC9E2D51 & mask, 15) * 0x1B873593 & mask
    h1 = (rotl(seed & mask ^ k1, 13) * 5 + 0xE6546B64) & mask
    h1 ^= 4
    h1 = (h1 ^ (h1 >> 16)) * 0x85EBCA6B & mask
    h1 = (h1 ^ (h1 >> 13)) * 0xC2B2AE35 & mask
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


@lru_cache(maxsize=64)
def _slot_keys(slots: int) -> tuple[int, ...]:
    """For each task number ``j < slots``, the smallest int that Spark's hash partitioning sends
    to task ``j`` (``pmod(hash(key), slots) == j``)."""
    keys: dict[int, int] = {}
    candidate = 0
    while len(keys) < slots:
        keys.setdefault(_murmur3_int(candidate) % slots, candidate)
        candidate += 1
    return tuple(keys[j] for j in range(slots))


def spread_partitions(frame: DataFrame, slots: Mapping[TopicPartition, int]) -> DataFrame:
    """``frame`` repartitioned so that every topic-partition is in one Spark partition, and each
    topic-partition of ``slots`` alone in its own (its slot number).

    Why not ``repartition(n, "topic", "partition")``: hashing n keys into n tasks leaves about a
    third of the tasks empty while others compress two partitions one after the other. Spark's
    hash partitioning is ``pmod(murmur3(key), n)``, so each topic-partition is mapped to an int
    key that lands exactly on its slot; a topic-partition not in ``slots`` (a topic that appeared
    after the job was planned) keeps the plain hash of its name. Were Spark's hash ever different,
    the cost would only be shared tasks again: a topic-partition is in one task either way.
    """
    from pyspark.sql import functions as F

    count = max(1, len(slots))
    if not slots:
        return frame.repartition(count, "topic", "partition")
    keys = _slot_keys(count)
    lookup = F.create_map(*chain.from_iterable(
        (F.lit(f"{partition}:{topic}"), F.lit(keys[slot])) for (topic, partition), slot in slots.items()))
    name = F.concat_ws(":", F.col("partition").cast("string"), F.col("topic"))
    key = F.coalesce(lookup[name], F.hash("topic", "partition"))
    return frame.repartition(count, key)


def flush_due_files(spark: SparkSession, coordinator: ArchiveCoordinator) -> list[PartitionReport]:
    """Write the open files due by ``offset.flush.interval.ms`` (none when the interval is off)."""
    due = coordinator.due()
    if not due:
        return []
    log.info("%s: writing files open for offset.flush.interval.ms=%d: %s", coordinator.connector,
             int((coordinator.flush_interval_s or 0) * 1000), ", ".join(f"{t}-{p}" for t, p in due))
    return flush_open_files(spark, coordinator, due)


class IdleFlusher:
    """Writes files due by ``offset.flush.interval.ms`` while no micro-batch runs.

    Why a thread: Spark runs no micro-batch while the topics are quiet, and that is exactly when
    an open file would otherwise wait for records that do not come. The thread sleeps until the
    oldest open file is due (or a file opens), then, holding the coordinator's lock so that it
    takes turns with the micro-batches, runs :func:`flush_due_files` — a Spark job whose tasks
    read the records from Kafka, as at the end of a run. Should that job fail, the thread keeps
    the error and stops the query: the stage runner then sees the failure (and restarts the
    stage when it is transient), and the next run resumes from the store.
    """

    def __init__(self, spark: SparkSession, coordinator: ArchiveCoordinator, on_error: Callable[[], None]):
        self.spark = spark
        self.coordinator = coordinator
        self.on_error = on_error
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"{coordinator.connector}-idle-flush", daemon=True)

    def start(self) -> IdleFlusher:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread, after the flush it may be running."""
        self._stop.set()
        self.coordinator.opened.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()

    def _run(self) -> None:
        coordinator = self.coordinator
        while not self._stop.is_set():
            with coordinator.lock:
                deadline = coordinator.next_flush()
                coordinator.opened.clear()
            wait = None if deadline is None else max(0.0, deadline - coordinator.clock())
            if wait is None or wait > 0:
                coordinator.opened.wait(wait)
                continue  # re-read the deadline: a file opened, or the one waited for may be written
            try:
                with coordinator.lock:
                    if self._stop.is_set() or coordinator.in_flight:
                        return  # stopping, or a job was cut short: the states cannot be trusted
                    flush_due_files(self.spark, coordinator)
            except Exception as exc:
                error = ConnectorError(f"writing the files due by offset.flush.interval.ms failed: {error_line(exc)}")
                error.__cause__ = exc  # the stage runner looks for transient causes in the whole chain
                self.error = error
                log.error("%s: %s", coordinator.connector, error)
                self.on_error()
                return


def archive_frame(frame: DataFrame, coordinator: ArchiveCoordinator) -> list[PartitionReport]:
    """Archive a micro-batch (columns ``topic, partition, offset, ts, value``) in executor tasks;
    only the tasks' reports come back to the driver."""
    coordinator.in_flight = True
    task = coordinator.task()
    rows = (spread_partitions(frame, coordinator.slots())
            .sortWithinPartitions("topic", "partition", "offset")
            .mapInArrow(task, REPORT_DDL)
            .collect())
    return coordinator.apply(row.asDict(recursive=True) for row in rows)


def flush_open_files(spark: SparkSession, coordinator: ArchiveCoordinator,
                     only: Iterable[TopicPartition] | None = None) -> list[PartitionReport]:
    """Write open files as they are (all: end of a ``--once`` run or a clean stop; ``only`` those
    partitions: files due by ``offset.flush.interval.ms``), in tasks that read their records from
    Kafka; the driver only names the partitions."""
    wanted = None if only is None else set(only)
    open_tps = sorted(tp for tp in coordinator.open_files() if wanted is None or tp in wanted)
    if not open_tps:
        return []
    coordinator.in_flight = True
    task = coordinator.task(final=True)
    names = spark.createDataFrame(open_tps, "topic string, partition int")
    slots = {tp: slot for slot, tp in enumerate(open_tps)}
    rows = spread_partitions(names, slots).mapInArrow(task, REPORT_DDL).collect()
    return coordinator.apply(row.asDict(recursive=True) for row in rows)


# --------------------------------------------------------------------------------------------
# Staging directories
# --------------------------------------------------------------------------------------------


def new_staging_dir(buffer_dir: Path, connector: str, kind: str = "run") -> Path:
    """A fresh ``<buffer>/<connector>/<kind>-<host>-<pid>-<id>`` directory (``run``: the driver's,
    for the per-run checkpoint; ``task``: a task's, for files being compressed). Removes the ones
    left by dead processes of this host (their content is never reused: the store is the source
    of truth)."""
    base = buffer_dir / connector
    base.mkdir(parents=True, exist_ok=True)
    host = socket.gethostname()
    for entry in base.iterdir():
        parts = entry.name.rsplit("-", 2)
        if (entry.is_dir() and len(parts) == 3 and parts[0] in (f"run-{host}", f"task-{host}")
                and parts[1].isdigit() and not _pid_alive(int(parts[1]))):
            shutil.rmtree(entry, ignore_errors=True)
    staging = base / f"{kind}-{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    return staging


# --------------------------------------------------------------------------------------------
# The stage
# --------------------------------------------------------------------------------------------


class ArchiveQuery:
    """The archive stage's :class:`StreamingQuery`, plus what happens when it ends.

    Why a wrapper: the last records of each partition are in an open file when the input is
    drained (``--once``) or the query is stopped; only the driver knows that moment. When the
    query has ended cleanly after a complete micro-batch, the open files are written (one more
    job, :func:`flush_open_files`); otherwise they are left (the next run re-reads those
    records). Either way the run's staging directory is removed. Everything else is delegated
    to the Spark query.
    """

    def __init__(self, query: StreamingQuery, coordinator: ArchiveCoordinator, spark: SparkSession,
                 staging_dir: Path, idle_flush: bool = False):
        self._query = query
        self.coordinator = coordinator
        self.spark = spark
        self.staging_dir = staging_dir
        self._finished = False
        self._error: BaseException | None = None
        self._finish_lock = threading.Lock()
        self.flusher: IdleFlusher | None = None
        if idle_flush and coordinator.flush_interval_s is not None:
            self.flusher = IdleFlusher(spark, coordinator, query.stop).start()

    @property
    def isActive(self) -> bool:
        active = bool(self._query.isActive)
        if not active:
            self._finish()
        return active

    def awaitTermination(self, timeout: float | None = None) -> bool | None:
        try:
            result = self._query.awaitTermination(timeout)
        finally:
            if not self._query.isActive:
                self._finish()
        return result

    def stop(self) -> None:
        self._query.stop()
        self._finish()

    def exception(self) -> Any:
        return self._query.exception() or self._error or (self.flusher.error if self.flusher else None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._query, name)

    def _finish(self) -> None:
        with self._finish_lock:
            if self._finished:
                return
            self._finished = True
            try:
                if self.flusher is not None:
                    self.flusher.stop()
                    if self.flusher.error is not None:
                        return
                if self._query.exception() is not None:
                    return
                if self.coordinator.in_flight:
                    log.info("%s: the last micro-batch was cut short; its open files are left to the next run",
                             self.coordinator.connector)
                    return
                with self.coordinator.lock:
                    flush_open_files(self.spark, self.coordinator)
            except Exception as exc:
                self._error = ConnectorError(f"publishing the last files failed: {error_line(exc)}")
                log.error("%s", self._error)
            finally:
                shutil.rmtree(self.staging_dir, ignore_errors=True)


def kafka_options(ctx: PipelineContext, config: ConnectorConfig) -> dict[str, str]:
    """Spark Kafka source options: worker client settings, the connector's
    ``consumer.override.*`` keys, the subscription and the batch size."""
    options = ctx.kafka_client_options("consumer.")
    for key, value in config.passthrough.items():
        if key.startswith("consumer.override."):
            options[f"kafka.{key[len('consumer.override.'):]}"] = value
    topics, regex = config.get("topics"), config.get("topics.regex")
    if topics:
        options["subscribe"] = ",".join(topics)
    else:
        options["subscribePattern"] = str(regex)
    options["maxOffsetsPerTrigger"] = str(ctx.worker.get("pipeline.max.records.per.batch"))
    return options


def select_archive_columns(df: DataFrame) -> DataFrame:
    """A Kafka micro-batch as :class:`ArchiveTask` takes it: ``topic, partition, offset, ts`` (epoch
    milliseconds), ``value``; the other columns (key, headers) are never archived."""
    return df.selectExpr("topic", "CAST(partition AS INT) AS partition", "offset",
                         "unix_millis(timestamp) AS ts", "value")


def start_archive(ctx: PipelineContext, config: ConnectorConfig) -> ArchiveQuery:
    """Start the archive stage: resume from the store, stream Kafka into Block-GZIP objects."""
    from pubsub_connect.io.kafka_source import read_kafka

    ctx.check_kafka("consumer", config)
    settings = ArchiveSettings.from_config(config)
    store = open_store(config)
    try:
        store.check()
        if isinstance(store, LocalStore):
            store.cleanup_temp()
        resume = resume_offsets(store, settings.prefix)
    except (ObjectStoreError, BlockGzipError) as exc:
        raise ConnectorError(f"{config.name}: {exc}") from None
    options = kafka_options(ctx, config)
    subscribed = subscribed_partitions(options)
    options["startingOffsets"] = starting_offsets(resume, subscribed)
    log.info("%s: resuming from %s (startingOffsets=%s)", config.name, store.url(settings.prefix),
             options["startingOffsets"])
    # offset.flush.interval.ms: continuous runs only (a --once run writes its open files when it ends)
    flush_interval = None if ctx.once else int(ctx.worker.get("offset.flush.interval.ms"))
    coordinator = ArchiveCoordinator(store, settings, config.name, KafkaRecordSource(replay_options(options)),
                                     resume, subscribed, flush_interval)
    staging = new_staging_dir(settings.buffer_dir, config.name)

    def process(batch: DataFrame, batch_id: int) -> None:
        with coordinator.lock:
            reports = archive_frame(select_archive_columns(batch), coordinator)
            reports += flush_due_files(ctx.spark, coordinator)
        files = sum(len(r.files) for r in reports)
        log.info("%s: batch %d: %d file(s) archived; open files: %s", config.name, batch_id, files,
                 coordinator.describe_open())

    try:
        df = read_kafka(ctx.spark, options, streaming=True, caps=ctx.caps)
        query = (
            df.writeStream.foreachBatch(process)
            .option("checkpointLocation", str(staging / "checkpoint"))
            .queryName(query_name(config, STAGE))
            .trigger(**ctx.trigger())
            .start()
        )
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return ArchiveQuery(query, coordinator, ctx.spark, staging, idle_flush=not ctx.once)


STAGES: list[Stage] = [Stage(STAGE, start_archive)]


# --------------------------------------------------------------------------------------------
# archive read
# --------------------------------------------------------------------------------------------


def read_archive_records(location: str, offset: int, count: int | None = None,
                         store: ObjectStore | None = None) -> list[tuple[int, bytes | None]]:
    """``(offset, value)`` records of one archive file starting at ``offset``.

    Reads the index, then fetches with a single range request only the block holding
    ``offset`` (``count`` None: to the end of that block) or the run of blocks covering
    ``count`` records (stopping at the end of the file). ``location`` is the ``.gz`` or its
    ``.index.json``, as ``s3://bucket/key`` or a path (``/Volumes/...`` included); with
    ``store`` it is a key in that store.
    """
    if count is not None and count < 0:
        raise ArchiveReadError(f"--count must be positive, got {count}")
    try:
        if store is None:
            store, key = store_for_location(location)
        else:
            key = location
        gz = gz_key_for(key)
        if not gz.endswith(".gz"):
            raise ArchiveReadError(f"{location}: expected a .gz archive file or its .index.json")
        chunks = parse_index(store.read(index_key(gz)))
        first = find_chunk(chunks, offset)
        if first is None:
            held = f"{chunks[0].first_record_offset}..{chunks[-1].end_offset - 1}" if chunks else "nothing"
            raise ArchiveReadError(f"offset {offset} is not in {store.url(gz)} (it holds offsets {held})")
        if count == 0:
            return []
        last = first
        if count is not None:
            while last + 1 < len(chunks) and chunks[last].end_offset < offset + count:
                last += 1
        selected: list[Chunk] = chunks[first:last + 1]
        data = store.read(gz, selected[0].byte_offset, selected[-1].byte_end)
        out: list[tuple[int, bytes | None]] = []
        for chunk, member in zip(selected, iter_members(data), strict=True):
            lines = split_lines(member)
            if len(lines) != chunk.num_records:
                raise ArchiveReadError(f"{store.url(gz)}: block at byte {chunk.byte_offset} holds {len(lines)} "
                                       f"records, its index says {chunk.num_records}")
            for position, line in enumerate(lines):
                if chunk.first_record_offset + position >= offset:
                    out.append((chunk.first_record_offset + position, decode_line(line)))
    except (ObjectStoreError, BlockGzipError, ValueError) as exc:
        raise ArchiveReadError(f"{location}: {exc}") from None
    return out if count is None else out[:count]


def archive_read(path_or_url: str, offset: int, count: int | None = None) -> list[bytes]:
    """The values of the records from ``offset`` (see :func:`read_archive_records`), as bytes for
    printing: a null value (tombstone) is returned as ``b""``."""
    records = read_archive_records(path_or_url, offset, count)
    return [value if value is not None else b"" for _, value in records]
