"""The Block-GZIP archive sink: Kafka topics → ``.gz`` + ``.index.json`` objects (S3, local, Volumes).

Equivalent of ``com.deviantart.kafka_connect_s3.S3SinkConnector`` (see ``model/blockgzip.py``
for the format). One stage, ``archive``: it reads Kafka with :func:`read_kafka` and writes
objects; unlike the Pub/Sub connectors it has no bronze/outbox tables because the object store
itself is the durable output *and* the offset store.

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
  shorter file (like Connect's flush on stop) instead of being left for the next run.
- **Atomic objects, index first.** Blocks are staged in ``local.buffer.dir``; when a file
  closes, its ``.index.json`` is written, then the ``.gz`` (one PUT or a multipart upload
  completed only when whole; temp file + rename locally). A visible ``.gz`` is therefore always
  whole and indexed; an index without its ``.gz`` is a crash leftover the retry overwrites.

So after ``kill -9`` at any moment a restart neither skips nor repeats a record: files that were
committed are resumed after, and the file being written was never visible.

Where the work happens: the micro-batch is collected to the driver as Arrow (bounded by
``pipeline.max.records.per.batch``) and compressed there, because a file spans micro-batches
and its open gzip member lives in the driver between them. Throughput is then that of one zlib
stream on one driver core, partitions taking turns (see ``benchmarks/blockgzip.py``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import threading
import uuid
from bisect import bisect_left
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

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
    RotationPolicy,
    decode_line,
    find_chunk,
    gz_key_for,
    index_key,
    iter_members,
    object_key,
    parse_index,
    read_records,
    render_index,
    split_lines,
)
from pubsub_connect.pipelines.base import ConnectorError, PipelineContext, Stage, query_name

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import StreamingQuery

    from pubsub_connect.config import ConnectorConfig

log = logging.getLogger(__name__)

STAGE = "archive"
#: Spark's JSON sentinel for "earliest" in ``startingOffsets``.
EARLIEST = -2

TopicPartition = tuple[str, int]


class ArchiveReadError(ConnectorError):
    """``archive read`` cannot serve the request (offset not in the file, no index, unreachable
    store…). A :class:`ConnectorError`, so the CLI prints its one-line message."""


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
        # The seed requires the directory to exist: creating it silently could stage gigabytes
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
        return cls(str(config.get("s3.prefix") or ""), policy, buffer_dir)


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


def starting_offsets(resume: dict[TopicPartition, int], subscribed: Sequence[TopicPartition]) -> str:
    """Spark's ``startingOffsets`` for the subscribed partitions: the stored position, else
    earliest. Spark (and the Python source) require JSON offsets to name every subscribed
    partition, so partitions without files are listed with -2 (earliest)."""
    if not any(tp in resume for tp in subscribed):
        return "earliest"
    doc: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(subscribed):
        doc.setdefault(topic, {})[str(partition)] = resume.get((topic, partition), EARLIEST)
    return json.dumps(doc, separators=(",", ":"))


# --------------------------------------------------------------------------------------------
# Writing files
# --------------------------------------------------------------------------------------------


@dataclass
class _OpenFile:
    key: str
    staged: Path
    handle: BinaryIO
    writer: BlockGzipWriter
    first_offset: int
    first_timestamp_ms: int


@dataclass(frozen=True)
class CommittedFile:
    key: str
    topic: str
    partition: int
    first_offset: int
    end_offset: int
    num_records: int
    num_chunks: int


class PartitionArchiver:
    """The open file of one topic-partition: records in, committed objects out."""

    def __init__(self, topic: str, partition: int, next_offset: int, store: ObjectStore,
                 settings: ArchiveSettings, staging_dir: Path, committed: list[CommittedFile]):
        self.topic = topic
        self.partition = partition
        self.next_offset = next_offset
        self.store = store
        self.settings = settings
        self.staging_dir = staging_dir
        self.committed = committed
        self.file: _OpenFile | None = None
        self.skipped = 0

    def _open(self, offset: int, timestamp_ms: int) -> _OpenFile:
        key = object_key(self.settings.prefix, self.topic, self.partition, offset, timestamp_ms)
        staged = self.staging_dir / f"{self.topic}-{self.partition:05d}-{offset:012d}.gz.part"
        handle = open(staged, "wb")  # noqa: SIM115 - closed in commit()/discard()
        writer = BlockGzipWriter(handle, self.settings.policy.block_size)
        self.file = _OpenFile(key, staged, handle, writer, offset, timestamp_ms)
        return self.file

    def write(self, offsets: Sequence[int], timestamps: Sequence[int],
              values: Sequence[bytes | None]) -> None:
        """Append records of this partition, sorted by offset. Offsets already archived are
        skipped, so a replayed range never produces duplicates.

        The records go to the writer in bulk, cut where a rotation rule fires: ``flush.size``
        and ``chunks.per.file`` close the file after a record, ``rotate.interval.ms`` before
        the first record that is too far (in record time) from the file's first record.
        """
        policy = self.settings.policy
        n = len(offsets)
        i = bisect_left(offsets, self.next_offset)
        self.skipped += i
        while i < n:
            current = self.file or self._open(offsets[i], timestamps[i])
            writer = current.writer
            limit = n
            if policy.flush_size:
                limit = min(limit, i + policy.flush_size - writer.num_records)
            rotate_at = None
            if policy.rotate_interval_ms:
                too_late = current.first_timestamp_ms + policy.rotate_interval_ms
                rotate_at = next((k for k in range(i, limit) if timestamps[k] >= too_late), None)
                if rotate_at is not None:
                    limit = rotate_at
            if limit > i:
                i += writer.extend(offsets[i:limit], values[i:limit], max_chunks=policy.chunks_per_file,
                                   assume_sorted=True)  # write_arrow sorted them
                self.next_offset = offsets[i - 1] + 1
            if i == rotate_at or policy.full(writer.num_records, writer.num_chunks):
                self.commit()

    def commit(self) -> CommittedFile | None:
        """Close the open file and publish it: index first, then the ``.gz``."""
        current = self.file
        if current is None:
            return None
        chunks = current.writer.finish()
        current.handle.close()
        self.store.put_bytes(index_key(current.key), render_index(chunks))
        self.store.put_file(current.key, current.staged)
        current.staged.unlink()
        self.file = None
        done = CommittedFile(current.key, self.topic, self.partition, current.first_offset,
                             chunks[-1].end_offset, current.writer.num_records, len(chunks))
        self.committed.append(done)
        log.info("archived %s: offsets [%d, %d), %d records in %d blocks", self.store.url(done.key),
                 done.first_offset, done.end_offset, done.num_records, done.num_chunks)
        return done

    def discard(self) -> None:
        """Drop the open file without publishing it (the next run re-reads its records)."""
        if self.file is not None:
            with contextlib.suppress(OSError):
                self.file.handle.close()
                self.file.staged.unlink()
            self.file = None


class ArchiveWriter:
    """Driver-side state of one run: one :class:`PartitionArchiver` per topic-partition."""

    def __init__(self, store: ObjectStore, settings: ArchiveSettings, staging_dir: Path,
                 resume: dict[TopicPartition, int]):
        self.store = store
        self.settings = settings
        self.staging_dir = staging_dir
        self.resume = dict(resume)
        self.partitions: dict[TopicPartition, PartitionArchiver] = {}
        self.committed: list[CommittedFile] = []
        self.failed = False
        self.lock = threading.Lock()

    def partition(self, topic: str, partition: int) -> PartitionArchiver:
        tp = (topic, partition)
        archiver = self.partitions.get(tp)
        if archiver is None:
            archiver = PartitionArchiver(topic, partition, self.resume.get(tp, 0), self.store, self.settings,
                                         self.staging_dir, self.committed)
            self.partitions[tp] = archiver
        return archiver

    def write_arrow(self, table: pa.Table) -> None:
        """Archive a micro-batch with columns ``topic, partition, offset, ts (epoch ms), value``."""
        with self.lock:
            if self.failed:
                raise ConnectorError("the archive writer failed earlier in this run")
            try:
                self._write_arrow(table)
            except BaseException:
                self.failed = True
                raise

    def _write_arrow(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        table = table.sort_by([("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")])
        topics = table.column("topic").to_pylist()
        partitions = table.column("partition").to_pylist()
        offsets = table.column("offset").to_pylist()
        # A record without a timestamp (-1 in Kafka, null here) dates its file 1969-12-31.
        timestamps = [-1 if ts is None else ts for ts in table.column("ts").to_pylist()]
        values = table.column("value").to_pylist()
        n = len(offsets)
        runs = []
        start = 0
        while start < n:
            topic, part = topics[start], partitions[start]
            end = start + 1
            while end < n and partitions[end] == part and topics[end] == topic:
                end += 1
            runs.append((self.partition(topic, part), offsets[start:end], timestamps[start:end], values[start:end]))
            start = end
        # Partitions are independent files (Connect gives each its own task) and compression,
        # the bulk of the work, releases the GIL: write them on as many threads as there are cores.
        if len(runs) == 1:
            archiver, *records = runs[0]
            archiver.write(*records)
            return
        with ThreadPoolExecutor(max_workers=min(len(runs), os.cpu_count() or 1)) as pool:
            for done in [pool.submit(archiver.write, *records) for archiver, *records in runs]:
                done.result()

    def close_all(self) -> None:
        """Publish every open file (end of a ``--once`` run, or a clean stop)."""
        with self.lock:
            if self.failed:
                return
            for tp in sorted(self.partitions):
                self.partitions[tp].commit()

    def discard(self) -> None:
        for archiver in self.partitions.values():
            archiver.discard()


# --------------------------------------------------------------------------------------------
# Staging directories
# --------------------------------------------------------------------------------------------




def new_staging_dir(buffer_dir: Path, connector: str) -> Path:
    """A fresh ``<buffer>/<connector>/run-<host>-<pid>-<id>`` directory; removes the ones left by
    dead runs of this host (their content is never reused: the store is the source of truth)."""
    base = buffer_dir / connector
    base.mkdir(parents=True, exist_ok=True)
    host = socket.gethostname()
    for entry in base.iterdir():
        parts = entry.name.rsplit("-", 2)
        if (entry.is_dir() and len(parts) == 3 and parts[0] == f"run-{host}" and parts[1].isdigit()
                and not _pid_alive(int(parts[1]))):
            shutil.rmtree(entry, ignore_errors=True)
    run = base / f"run-{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    run.mkdir()
    return run


# --------------------------------------------------------------------------------------------
# The stage
# --------------------------------------------------------------------------------------------


class ArchiveQuery:
    """The archive stage's :class:`StreamingQuery`, plus what happens when it ends.

    Why a wrapper: the last records of each partition sit in an open file when the input is
    drained (``--once``) or the query is stopped; only the driver knows that moment. When the
    query has ended cleanly, the open files are published; when it failed, they are dropped
    (the next run re-reads those records). Either way the run's staging directory is removed.
    Everything else is delegated to the Spark query.
    """

    def __init__(self, query: StreamingQuery, writer: ArchiveWriter, staging_dir: Path):
        self._query = query
        self.writer = writer
        self.staging_dir = staging_dir
        self._finished = False
        self._error: BaseException | None = None
        self._finish_lock = threading.Lock()

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
        return self._query.exception() or self._error

    def __getattr__(self, name: str) -> Any:
        return getattr(self._query, name)

    def _finish(self) -> None:
        with self._finish_lock:
            if self._finished:
                return
            self._finished = True
            try:
                if self._query.exception() is None:
                    self.writer.close_all()
            except Exception as exc:
                self.writer.failed = True
                self._error = ConnectorError(f"publishing the last files failed: {exc}")
                log.error("%s", self._error)
            finally:
                self.writer.discard()
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


def subscribed_partitions(options: dict[str, str]) -> list[TopicPartition]:
    """The topic-partitions the subscription covers now (for a complete ``startingOffsets``)."""
    from pubsub_connect.io.kafka_source import KafkaReadOptions, OffsetReader

    reader = OffsetReader(KafkaReadOptions.parse(options, streaming=True))
    try:
        return list(reader.partitions())
    finally:
        reader.close()


def _select_columns(df: DataFrame) -> DataFrame:
    return df.selectExpr("topic", "CAST(partition AS INT) AS partition", "offset",
                         "unix_millis(timestamp) AS ts", "value")


def start_archive(ctx: PipelineContext, config: ConnectorConfig) -> ArchiveQuery:
    """Start the archive stage: resume from the store, stream Kafka into Block-GZIP objects."""
    from pubsub_connect.io.kafka_source import read_kafka

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
    options["startingOffsets"] = starting_offsets(resume, subscribed_partitions(options))
    log.info("%s: resuming from %s (startingOffsets=%s)", config.name, store.url(settings.prefix),
             options["startingOffsets"])
    staging = new_staging_dir(settings.buffer_dir, config.name)
    writer = ArchiveWriter(store, settings, staging, resume)

    def process(batch: DataFrame, batch_id: int) -> None:
        try:
            writer.write_arrow(_select_columns(batch).toArrow())
        except (ObjectStoreError, BlockGzipError, OSError) as exc:
            # A one-line ConnectorError is what run_stages extracts from the JVM's wrapper.
            raise ConnectorError(str(exc)) from None

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
    return ArchiveQuery(query, writer, staging)


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
