"""In the executor: planning, compressing and uploading a partition's files (:class:`ArchiveTask`,
the ``mapInArrow`` callable).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING

from pubsub_connect.io.objectstore.base import ObjectStore
from pubsub_connect.model.blockgzip.blocks import BlockGzipWriter
from pubsub_connect.model.blockgzip.index import render_index
from pubsub_connect.model.blockgzip.names import cursor_key, index_key, object_key
from pubsub_connect.model.blockgzip.rotation import FileCut, FilePlanner
from pubsub_connect.pipelines.archive.records import Records, RecordSource
from pubsub_connect.pipelines.archive.reports import (
    CommittedFile,
    PartitionReport,
    PartitionState,
    report_row,
    report_schema,
)
from pubsub_connect.pipelines.archive.settings import ArchiveSettings, ArchiveWriteError, TopicPartition
from pubsub_connect.pipelines.archive.staging import new_staging_dir

if TYPE_CHECKING:
    import pyarrow as pa


log = logging.getLogger(__name__)


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
        #: Whether this task gave the partition records already: only its first records may be
        #: below ``next_offset`` (a replayed micro-batch), never later ones.
        self.fed = False

    def feed(self, records: Records) -> None:
        """Plan this run of the partition's records (sorted) and write the files it completes."""
        if self.fed and records and records.offsets[0] < self.next_offset:
            raise ArchiveWriteError(f"{self.topic}-{self.partition}: offset {records.offsets[0]} came after "
                                    f"{self.next_offset - 1} in one task; the archive needs each partition's "
                                    "records in offset order")
        self.fed = True
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
    """``(topic, partition, start, stop)`` of each run of rows of one topic-partition; raises
    when a run's offsets do not increase (checked on the column, not per record in Python)."""
    import numpy as np

    topics = batch.column("topic").to_pylist()
    partitions = batch.column("partition").to_pylist()
    offsets = batch.column("offset").to_numpy(zero_copy_only=False) if "offset" in batch.schema.names else None
    n = len(topics)
    start = 0
    while start < n:
        topic, partition = topics[start], partitions[start]
        stop = start + 1
        while stop < n and partitions[stop] == partition and topics[stop] == topic:
            stop += 1
        if offsets is not None and stop - start > 1 and not bool(np.all(np.diff(offsets[start:stop]) > 0)):
            raise ArchiveWriteError(f"{topic}-{partition}: offsets out of order in one task; the archive needs "
                                    "each partition's records in offset order")
        yield topic, partition, start, stop
        start = stop


@dataclass(frozen=True, eq=False)
class ArchiveTask:
    """The ``mapInArrow`` callable: archives the topic-partitions of one Spark partition.

    Input: rows ``topic, partition, offset, ts, value`` grouped by topic-partition and in
    increasing offsets (as a Kafka source reads them; refused otherwise: a record out of order
    would be taken for a replayed one and skipped) — or, for the end-of-run job (``final``),
    just ``topic, partition`` naming the partitions whose open file is to be written. Output: one
    :data:`REPORT_DDL` row per topic-partition. Everything the task needs travels in this object
    (pickled into the task): the store with its credentials, the settings, the Kafka client
    settings of ``source`` and the partition states as of the start of the micro-batch.
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
        done: set[TopicPartition] = set()
        try:
            for batch in batches:
                records = Records.from_batch(batch) if "offset" in batch.schema.names else None
                for topic, partition, start, stop in _partition_runs(batch):
                    if work is None or (work.topic, work.partition) != (topic, partition):
                        if (topic, partition) in done:
                            raise ArchiveWriteError(f"{topic}-{partition}: its records came apart in one task; the "
                                                    "archive needs each partition's records together")
                        if work is not None:
                            done.add((work.topic, work.partition))
                            yield pa.RecordBatch.from_pylist([report_row(work.finish(self.final))],
                                                             schema=report_schema())
                        work = _PartitionWork(self, topic, partition, staging)
                    if records is not None:
                        work.feed(records.slice(start, stop))
            if work is not None:
                yield pa.RecordBatch.from_pylist([report_row(work.finish(self.final))], schema=report_schema())
        finally:
            staging.remove()
