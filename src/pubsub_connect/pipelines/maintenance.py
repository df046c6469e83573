"""Keeping a connector's tables healthy for months: retention, compaction, VACUUM.

Why here: each stage commits one Delta version per micro-batch, so a table that nobody looks
after collects a small file per commit forever. ``pubsub-connect maintain NAME`` (a job of the
bundle, or by hand beside a running connector) does, per table of the connector:

1. **retention** (``bronze.retention.ms``, ``outbox.retention.ms``, ``dlq.retention.ms``; -1
   keeps every row): deletes the rows older than the retention *and* held by the table at the
   last version every stage that streams it has read (its checkpoint's Delta offset; the
   snapshot by Delta's time travel), so a stage that is behind — stopped, failing, slow — holds
   back its input's retention, never loses it;
2. **compaction** (``OPTIMIZE``) of the files smaller than a few turns' gain of the table
   (:func:`compaction_threshold`), and 3. **VACUUM** within Delta's own retention;
4. on a local file system, **the Delta log trimmed** (:mod:`~pubsub_connect.io.delta_log`: there
   every commit lists the whole log folder) to the versions still read: from the newest checkpoint
   at or before the oldest of each writing stage's newest marked commit (within the search's reach,
   :data:`MARK_REACH`), the version each reading stage's restart reads from, the versions
   retention dates rows by, and those within the table's own ``delta.logRetentionDuration``;

and skips 2 and 3 on a Unity Catalog table that Databricks' predictive optimization maintains.

How old a row is: bronze rows carry ``ingest_time`` and dead letters ``failed_at``; an outbox row
is as old as its commit, known from the samples ``(table version, time)`` each run keeps beside the
checkpoints (``maintenance.json``): a row counts as older than the retention once the table held
it at a version sampled that long ago (no clock but this one's is compared)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.keys import CPS_SINK, CPS_SOURCE, LITE_SINK, LITE_SOURCE
from pubsub_connect.config.loader import ConnectorConfig
from pubsub_connect.io import checkpoints, delta_log, table_maintenance
from pubsub_connect.io.batch_marks import SEARCH_WINDOWS, query_part
from pubsub_connect.io.spark import running_on_databricks
from pubsub_connect.io.tables import (
    BRONZE,
    DLQ,
    OUTBOX,
    PipelineTableStore,
    SparkDeltaTableStore,
    TableRef,
    TableStore,
)
from pubsub_connect.model.error_text import error_line
from pubsub_connect.pipelines.context import PipelineContext
from pubsub_connect.pipelines.modes import FUSED, last_mode

log = logging.getLogger(__name__)

#: Beside the connector's checkpoints: when each table was at which version.
SAMPLES_FILE = "maintenance.json"
#: Samples kept per table within its retention (:class:`VersionSamples`).
KEPT_SAMPLES = 500
#: Beside the connector's checkpoints: each table's bytes after its last compaction.
COMPACTED_FILE = "compaction.json"
#: Compaction rewrites the files smaller than this many times what the table gained since its last
#: compaction (:func:`compaction_threshold`), and at least those below the floor, so that a table
#: that gains little still gathers its small files.
COMPACTION_GROWTH_FACTOR = 4
COMPACTION_FLOOR_BYTES = 4 * 1024**2

#: Per connector kind and table: the columns that identify a row, and the staged mode's stage
#: that streams the table (whose position holds back its retention).
KAFKA_KEYS = ("topic", "partition", "offset")
TABLES: dict[str, dict[str, tuple[tuple[str, ...], str | None]]] = {
    CPS_SINK: {BRONZE: (KAFKA_KEYS, "convert"), OUTBOX: (KAFKA_KEYS, "publish")},
    LITE_SINK: {BRONZE: (KAFKA_KEYS, "convert"), OUTBOX: (KAFKA_KEYS, "publish")},
    CPS_SOURCE: {BRONZE: (("message_id", "ingest_time"), "convert"), OUTBOX: (("message_id",), "produce")},
    LITE_SOURCE: {BRONZE: (("partition", "offset"), "convert"), OUTBOX: (("lite_partition", "lite_offset"), "produce")},
}
#: The column that dates a row, where the table has one.
AGE_COLUMNS = {BRONZE: "ingest_time", DLQ: "failed_at"}
#: How far back a restarted stage searches the newest commits for its last batch's mark
#: (:mod:`~pubsub_connect.io.batch_marks`): a trimmed log keeps each writer's newest mark within it,
#: so that a trim never makes a stage append a committed batch again.
MARK_REACH = SEARCH_WINDOWS[-1]


@dataclass
class TableReport:
    """What one run did to one table."""

    kind: str
    deleted: int = 0
    files_before: int = 0
    files_after: int = 0
    bytes_after: int = 0
    notes: list[str] = field(default_factory=list)

    def line(self, connector: str) -> str:
        notes = "".join(f"; {note}" for note in self.notes)
        return (f"[{connector}.maintain] {self.kind}: deleted {self.deleted:,} rows, files {self.files_before:,} → "
                f"{self.files_after:,} ({self.bytes_after / 1e6:,.1f} MB){notes}")


def consumed_below(checkpoint: str) -> int:
    """The first table version a streaming stage has not wholly read (0 when it has read nothing:
    no checkpoint, or still reading its first snapshot), from its committed Delta offset."""
    offset = checkpoints.committed_source_offsets(checkpoint)
    if not isinstance(offset, dict) or offset.get("isStartingVersion"):
        return 0
    return int(offset.get("reservoirVersion", 0))


def resumes_at(checkpoint: str) -> int:
    """The oldest table version a restart of a streaming stage reads (0 when it has planned no
    micro-batch: it would read the table from its start). Spark hands a V1 source — Delta's — the
    newest planned batch again, from the end of the batch before it, so that batch's end is read
    too, not only the committed position :func:`consumed_below` gives."""
    offsets = checkpoints.newest_source_offsets(checkpoint, 2)
    versions = [int(o.get("reservoirVersion", 0)) if isinstance(o, dict) else 0 for o in offsets]
    return min(versions) if versions else 0


class VersionSamples:
    """``(version, epoch ms)`` per table, oldest first (:data:`SAMPLES_FILE`): what it takes to
    date a row by its commit version. Kept per table: the newest sample older than the table's
    retention (the answer of the next lookup) and those since, at least a ``retention /
    KEPT_SAMPLES`` apart, so that a short interval and a long retention stay a few hundred samples;
    a sparser sample dates a row later, never earlier."""

    def __init__(self, path: Path):
        self.path = path
        self.samples: dict[str, list[list[int]]] = checkpoints.read_json(self.path) or {}

    def add(self, kind: str, version: int, now_ms: int, retention_ms: int) -> None:
        entries = self.samples.setdefault(kind, [])
        if retention_ms < 0:  # kept forever: no row needs dating
            entries[:] = [[version, now_ms]]
            return
        if not entries or now_ms - entries[-1][1] >= retention_ms / KEPT_SAMPLES:
            entries.append([version, now_ms])
        cutoff = now_ms - retention_ms
        older = [entry for entry in entries if entry[1] <= cutoff]
        entries[:] = older[-1:] + [entry for entry in entries if entry[1] > cutoff]

    def version_at(self, kind: str, when_ms: int) -> int | None:
        """The newest sampled version at or before ``when_ms`` (None: no sample that old)."""
        older = [version for version, at in self.samples.get(kind, []) if at <= when_ms]
        return max(older) if older else None

    def save(self) -> None:
        checkpoints.write_json(self.path, self.samples)


def compaction_threshold(bytes_now: int, bytes_after_last: int | None) -> int | None:
    """Below which size a compaction rewrites a file, given the table's bytes now and after its
    last compaction, between which only appends came (None: no last compaction known, Delta's own
    threshold, a whole compaction).

    Why: a file a compaction wrote is then left alone once it holds a few turns' gain, so each
    byte is rewritten a few times at most, however long the table is kept (Delta's own threshold
    rewrites every file below 1 GiB each turn). At a steady gain of G per turn the files grow
    G, 2G, 3G, 4G and stay; a table that gains little keeps files of at least the floor."""
    if bytes_after_last is None:
        return None
    return max(COMPACTION_FLOOR_BYTES, COMPACTION_GROWTH_FACTOR * max(0, bytes_now - bytes_after_last))


def _retention_ms(config: ConnectorConfig, kind: str) -> int:
    return int(config.get(f"{kind}.retention.ms"))


def not_maintainable(store: TableStore, name: str) -> str | None:
    """Why connector ``name``'s tables in ``store`` cannot be maintained here, or None."""
    if not isinstance(store, SparkDeltaTableStore) or isinstance(store, PipelineTableStore):
        return ("maintain runs on Delta Lake tables kept by the connector's stages "
                "(pipeline.tables.implementation=delta-spark); a declarative pipeline maintains its own")
    if checkpoints.is_remote(store.checkpoint(name, "maintain")):
        return ("maintain reads the stages' positions and keeps its samples beside the checkpoints, which needs "
                "them on a path (a local folder, a /Volumes or /dbfs mount)")
    return None


def maintain(ctx: PipelineContext, config: ConnectorConfig, now_ms: Callable[[], int] | None = None,
             stopping: Callable[[], bool] = lambda: False) -> list[TableReport]:
    """One maintenance run over the connector's tables; one report per table that exists.

    ``stopping`` is asked before each table. A stopping connector cancels the Spark job in flight,
    but much of a Delta command runs on the driver between jobs, where a cancel finds nothing to
    cancel and the run would go on through every table, holding the stop up for tens of seconds
    beside busy stages. What a run cut short leaves undone, the next run does."""
    store = ctx.store
    refused = not_maintainable(store, config.name)
    if refused:
        raise ConfigError(f"{config.name}: {refused}")
    assert isinstance(store, SparkDeltaTableStore)
    spark = ctx.spark
    clock = now_ms or (lambda: int(time.time() * 1000))
    now = clock()
    staged = last_mode(ctx, config) != FUSED
    samples = VersionSamples(checkpoints.beside(store.checkpoint(config.name, "maintain"), SAMPLES_FILE))
    compacted_file = checkpoints.beside(store.checkpoint(config.name, "maintain"), COMPACTED_FILE)
    compacted: dict[str, int] = checkpoints.read_json(compacted_file) or {}
    reports: list[TableReport] = []
    for kind in (BRONZE, OUTBOX, DLQ):
        table = TableRef(kind, config.name)
        if stopping():
            break
        if not store.exists(table):
            continue
        target = store.sql_target(table)
        before = table_maintenance.describe(spark, target)
        report = TableReport(kind, files_before=before.files)
        retention = _retention_ms(config, kind)
        version = store.version(table)
        samples.add(kind, version, now, retention)
        if retention >= 0:
            report.deleted = _expire(ctx, config, table, version, staged, samples, now - retention, report)
        if store.table_name(table) and table_maintenance.predictive_optimization(spark, target):
            report.notes.append("compaction and VACUUM left to predictive optimization")
        else:
            below = compaction_threshold(before.bytes, compacted.get(kind))
            if table_maintenance.optimize(spark, target, below).below_bytes is None and below is not None:
                report.notes.append(f"compacted at Delta's own threshold: this session refuses to set "
                                    f"{table_maintenance.OPTIMIZE_MIN_FILE_SIZE}")
            table_maintenance.vacuum(spark, target)
        after = table_maintenance.describe(spark, target)
        compacted[kind] = after.bytes
        report.files_after, report.bytes_after = after.files, after.bytes
        log_dir = None if running_on_databricks() else delta_log.local_log(store.location(table))
        if log_dir is not None:
            _trim_log(ctx, config, table, staged, samples, after, now, log_dir, version, report)
        reports.append(report)
    samples.save()
    checkpoints.write_json(compacted_file, compacted)
    return reports


def _expire(ctx: PipelineContext, config: ConnectorConfig, table: TableRef, version: int, staged: bool,
            samples: VersionSamples, cutoff_ms: int, report: TableReport) -> int:
    """Delete the rows of ``table`` (now at ``version``) older than ``cutoff_ms`` that every reading
    stage has consumed: those the table held at the last version the reader read (and, for a table
    without a time column, at the last version sampled before the cutoff)."""
    spark, store = ctx.spark, ctx.store
    assert isinstance(store, SparkDeltaTableStore)  # maintain() refuses every other store
    target = store.sql_target(table)
    age = AGE_COLUMNS.get(table.kind)
    if table.kind == DLQ:  # no stage reads the dead letters
        try:
            with store.appends_held(table):
                return table_maintenance.delete_where(spark, target, f"{age} < timestamp_millis({cutoff_ms})")
        except Exception as exc:  # e.g. a stage of another process appended a dead letter meanwhile
            report.notes.append(f"nothing deleted: {error_line(exc)}")
            return 0
    keys, reader = TABLES[config.kind][table.kind]
    up_to = samples.version_at(table.kind, cutoff_ms) if age is None else None
    if age is None and up_to is None:
        report.notes.append("no sample old enough yet to date its rows")
        return 0
    condition = f"{age} < timestamp_millis({cutoff_ms})" if age else None
    expired_up_to, held_by = up_to, None
    if staged and reader is not None:
        read_up_to = consumed_below(ctx.store.checkpoint(config.name, reader)) - 1
        if up_to is None or read_up_to < up_to:
            up_to, held_by = read_up_to, reader
    if up_to is None:
        up_to = version
    try:  # a MERGE commits whole or not at all; this process's stages wait for it (appends_held)
        with store.appends_held(table):
            deleted = table_maintenance.delete_held_at(spark, target, keys, up_to, condition) if up_to >= 0 else 0
    except Exception as exc:  # a reader so far behind that VACUUM removed its version's files, or a
        # stage of another process that appended meanwhile (open-source Delta Lake: a conflict)
        report.notes.append(f"nothing deleted of the rows held at version {up_to}: {error_line(exc)}")
        return 0
    if held_by is not None:
        held = table_maintenance.count_added_after(spark, target, keys, up_to, expired_up_to, condition)
        if held:
            report.notes.append(f"{held:,} expired rows held back: {held_by} has not read past version {up_to}")
    return deleted


def newest_marks_from(log_dir: Path, version: int) -> int:
    """The oldest of the newest commits each writing stage marked, among the :data:`MARK_REACH`
    commits up to ``version`` (``version`` when none has a mark): what a restarted stage's search
    must still find."""
    newest: dict[str, int] = {}
    for commit in delta_log.commits(log_dir, version - MARK_REACH + 1, version):
        mark = commit.mark
        if mark is not None:
            newest[query_part(mark[0])] = commit.version
    return min(newest.values(), default=version)


def _trim_log(ctx: PipelineContext, config: ConnectorConfig, table: TableRef, staged: bool,
              samples: VersionSamples, files: table_maintenance.TableFiles, now_ms: int, log_dir: Path,
              version: int, report: TableReport) -> None:
    """Trim ``table``'s local Delta log (at ``version`` when the run began) to the oldest version
    still read: each writing stage's newest mark (:func:`newest_marks_from`), where its reading
    stage's restart reads from (staged mode: the fused mode's hand-back starts that stage afresh),
    where retention's next runs may look back to (the oldest sample kept), and the oldest commit
    within the table's own ``delta.logRetentionDuration``."""
    needed = [newest_marks_from(log_dir, version)]
    reader = TABLES[config.kind].get(table.kind, ((), None))[1]
    if staged and reader is not None:
        needed.append(resumes_at(ctx.store.checkpoint(config.name, reader)))
    if table.kind not in AGE_COLUMNS and _retention_ms(config, table.kind) >= 0:
        needed.extend(version for version, _ in samples.samples.get(table.kind, [])[:1])
    if files.log_retention is not None:
        window = delta_log.interval_ms(files.log_retention)
        if window is None:
            report.notes.append(f"Delta log not trimmed: its {table_maintenance.LOG_RETENTION} "
                                f"{files.log_retention!r} is not one number of one unit")
            return
        since = delta_log.first_version_since(log_dir, (now_ms - window) / 1000)
        if since is not None:
            needed.append(since)
    trimmed = delta_log.trim(log_dir, min(needed))
    if trimmed.removed:
        report.notes.append(f"Delta log: {trimmed.removed:,} files before version {trimmed.starts_at:,} removed")
    elif trimmed.note:
        report.notes.append(trimmed.note)


@contextlib.contextmanager
def maintained_while_running(ctx: PipelineContext, config: ConnectorConfig, every_s: float,
                             guard: Callable[[], AbstractContextManager[object]]) -> Iterator[None]:
    """Run :func:`maintain` on the connector every ``every_s`` seconds while the body runs (its
    stages), on a thread of its own: ``pubsub-connect run`` and the worker keep their connectors'
    tables healthy without a second process. ``guard`` is entered around each run (the
    connector's ``maintain`` lock: a run already going elsewhere, ``maintain`` from a shell, makes
    this one skip its turn, by raising). A failed run is one line, and the next turn comes as
    usual; on exit a run in progress has its Spark jobs cancelled."""
    if every_s <= 0 or not_maintainable(ctx.store, config.name):
        yield
        return
    stop = threading.Event()
    group = f"pubsub-connect-maintain-{config.name}"

    def loop() -> None:
        while not stop.wait(every_s):
            try:
                with guard():
                    ctx.spark.sparkContext.setJobGroup(group, f"maintain {config.name}", interruptOnCancel=True)
                    for report in maintain(ctx, config, stopping=stop.is_set):
                        ctx.progress(report.line(config.name))
            except Exception as exc:  # the stages go on; the next turn tries again
                if not stop.is_set():
                    ctx.progress(f"[{config.name}.maintain] skipped this turn: {error_line(exc)}")
                    log.debug("%s maintenance failed", config.name, exc_info=exc)

    thread = threading.Thread(target=loop, name=f"maintain-{config.name}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        ctx.spark.sparkContext.cancelJobGroup(group)
        thread.join()

