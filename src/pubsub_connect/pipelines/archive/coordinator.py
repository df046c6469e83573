"""On the driver: the partition states, one job per micro-batch, and the files due by
``offset.flush.interval.ms`` (:class:`ArchiveCoordinator`, :class:`IdleFlusher`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from itertools import chain
from typing import TYPE_CHECKING, Any

from pubsub_connect.io.objectstore.base import ObjectStore
from pubsub_connect.model.blockgzip.rotation import OpenFile
from pubsub_connect.model.error_text import error_line
from pubsub_connect.pipelines.archive.records import RecordSource
from pubsub_connect.pipelines.archive.reports import REPORT_DDL, PartitionReport, PartitionState, parse_report
from pubsub_connect.pipelines.archive.settings import ArchiveSettings, TopicPartition
from pubsub_connect.pipelines.archive.task import ArchiveTask
from pubsub_connect.pipelines.context import ConnectorError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


log = logging.getLogger(__name__)


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
                 resume: Mapping[TopicPartition, int], flush_interval_ms: int | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.store = store
        self.settings = settings
        self.connector = connector
        self.source = source
        self.states: dict[TopicPartition, PartitionState] = {tp: PartitionState(offset)
                                                             for tp, offset in resume.items()}
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

    def open_files(self) -> dict[TopicPartition, OpenFile]:
        return {tp: state.open_file for tp, state in sorted(self.states.items()) if state.open_file is not None}

    def apply(self, rows: Iterable[Mapping[str, Any]]) -> list[PartitionReport]:
        """Take the reports of a completed job: new states, and the files written (logged).

        Two reports of one topic-partition mean two tasks each planned its files from the same
        state: the job's output cannot be trusted, so the batch fails and nothing is applied
        (``in_flight`` stays set: no later job starts from these states)."""
        reports = [parse_report(row) for row in rows]
        seen: set[TopicPartition] = set()
        for report in reports:
            tp = (report.topic, report.partition)
            if tp in seen:
                raise ConnectorError(f"{self.connector}: {report.topic}-{report.partition} was archived by two tasks "
                                     "of one micro-batch; the archive needs each topic-partition in one task")
            seen.add(tp)
        for report in sorted(reports, key=lambda r: (r.topic, r.partition)):
            tp = (report.topic, report.partition)
            before = self.states.get(tp, PartitionState()).open_file
            self.states[tp] = report.state
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
    only the tasks' reports come back to the driver.

    A task must hold all of a topic-partition's rows, in offset order. A Kafka source read
    without ``minPartitions`` or ``maxRecordsPerPartition`` gives exactly that: one Spark
    partition per topic-partition, in Kafka's order (the archive's reads set neither), so its
    rows go to the tasks as they are. Moving every value through a shuffle and a sort only to
    get the same grouping cost a third of a micro-batch's time. A frame split any other way is
    refused: the tasks refuse rows out of order, and a topic-partition reported by two tasks
    fails the batch.
    """
    coordinator.in_flight = True
    task = coordinator.task()
    rows = frame.mapInArrow(task, REPORT_DDL).collect()
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
