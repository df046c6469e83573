"""Delta Lake's housekeeping on a stage table: compaction, deletion of the rows a reader has read,
VACUUM.

Why by version: a stage's position in the table it streams is a table version (its checkpoint's
Delta offset), so "rows this stage has consumed" are the rows the table held at the last version
it read. Delta's time travel gives that snapshot, whatever compaction did since (it rewrites files,
not rows), so the rows are deleted by a MERGE on the table's key columns with the keys taken from
the snapshot. Nothing is paid per append for it: Delta's row tracking would keep each row's commit
version instead, but it made a 1,000-row append 380-440 ms instead of 150-200 ms on two cores.

Readers stream these tables with ``skipChangeCommits``, so a deletion's commit is not read as
new data; OPTIMIZE's commits change no data and no reader reads them either. VACUUM keeps
Delta's own retention (``delta.deletedFileRetentionDuration``, seven days unless a table says
otherwise) and its safety check, so a reader up to that far behind still finds its files, and so
does the snapshot of the version it last read.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pubsub_connect.io.spark import console_silenced

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROW_TRACKING = "delta.enableRowTracking"
LOG_RETENTION = "delta.logRetentionDuration"
#: Delta's session setting: ``OPTIMIZE`` compacts the files smaller than this many bytes.
OPTIMIZE_MIN_FILE_SIZE = "spark.databricks.delta.optimize.minFileSize"
#: Its default in open-source Delta Lake, 1 GiB: also the size ``OPTIMIZE`` writes files up to.
DELTA_OPTIMIZE_MIN_FILE_SIZE = 1024**3
#: Held while one compaction has the session's threshold set (the worker maintains several
#: connectors, each in its own thread, in one session).
_OPTIMIZE_SETTING = threading.Lock()


@dataclass(frozen=True)
class TableFiles:
    """A table's current data files, their bytes, whether it tracks rows, and the log retention
    it sets itself (None: Delta's default), from one ``DESCRIBE DETAIL``."""

    files: int
    bytes: int
    row_tracking: bool
    log_retention: str | None = None


def describe(spark: SparkSession, target: str) -> TableFiles:
    detail = spark.sql(f"DESCRIBE DETAIL {target}").select("numFiles", "sizeInBytes", "properties").first()
    properties = detail[2] or {}
    return TableFiles(int(detail[0] or 0), int(detail[1] or 0),
                      str(properties.get(ROW_TRACKING, "false")).lower() == "true", properties.get(LOG_RETENTION))


def predictive_optimization(spark: SparkSession, target: str) -> bool:
    """Whether Databricks' predictive optimization maintains this Unity Catalog table (``DESCRIBE
    TABLE EXTENDED`` names it, with ``ENABLE`` when on); open-source Delta has no such row."""
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {target}").collect()
    return any(str(row[0]).strip().lower() == "predictive optimization"
               and str(row[1]).strip().upper().startswith("ENABLE") for row in rows)


def _keys_at(target: str, keys: Sequence[str], version: int | None, condition: str | None) -> str:
    snapshot = target if version is None else f"{target} VERSION AS OF {int(version)}"
    key_list = ", ".join(f"`{k}`" for k in keys)
    return f"SELECT DISTINCT {key_list} FROM {snapshot}" + (f" WHERE {condition}" if condition else "")


def _matching(keys: Sequence[str], left: str, right: str) -> str:
    return " AND ".join(f"{left}.`{k}` <=> {right}.`{k}`" for k in keys)


def delete_held_at(spark: SparkSession, target: str, keys: Sequence[str], version: int,
                   condition: str | None = None) -> int:
    """Delete the rows the table held at ``version`` (and meeting ``condition``, SQL over the
    table's columns) that it still holds; returns how many. ``keys`` identify a row (rows sharing
    them go together)."""
    result = spark.sql(f"MERGE INTO {target} t USING ({_keys_at(target, keys, version, condition)}) s "
                       f"ON {_matching(keys, 't', 's')} WHEN MATCHED THEN DELETE").first()
    return int((result.asDict() if result is not None else {}).get("num_deleted_rows") or 0)


def count_added_after(spark: SparkSession, target: str, keys: Sequence[str], version: int,
                      up_to: int | None = None, condition: str | None = None) -> int:
    """Rows the table held at ``up_to`` (None: now) and meeting ``condition`` that it did not hold
    at ``version`` (-1: before its first commit): the expired rows a reader that has not read past
    ``version`` holds back."""
    newer = _keys_at(target, keys, up_to, condition)
    if version < 0:
        return int(spark.sql(f"SELECT count(*) FROM ({newer})").first()[0])
    older = _keys_at(target, keys, version, None)
    return int(spark.sql(f"SELECT count(*) FROM ({newer}) n LEFT ANTI JOIN ({older}) o "
                         f"ON {_matching(keys, 'n', 'o')}").first()[0])


def delete_where(spark: SparkSession, target: str, condition: str) -> int:
    result = spark.sql(f"DELETE FROM {target} WHERE {condition}").first()
    return int((result.asDict() if result is not None else {}).get("num_affected_rows") or 0)


@dataclass(frozen=True)
class Compaction:
    """What one ``OPTIMIZE`` did, and below which file size it compacted (None: Delta's own
    threshold, the session refusing to set it, as Databricks' serverless compute may)."""

    removed: int
    added: int
    below_bytes: int | None
    removed_bytes: int = 0


def optimize(spark: SparkSession, target: str, below_bytes: int | None = None) -> Compaction:
    """Compact the files smaller than ``below_bytes`` (bin-packing), never above the session's own
    threshold (what the user set, else Delta's default; None: that threshold).

    Why a threshold of its own: Delta's (1 GiB) equals the size OPTIMIZE writes up to, so the file
    one OPTIMIZE wrote is below it and the next rewrites it with the new small files — every run
    rewrites the table up to 1 GiB, and VACUUM keeps each replaced copy for the table's
    ``delta.deletedFileRetentionDuration``. Delta reads the threshold from the session when the
    command starts, so it is set for this command alone, one compaction at a time in the process.
    """
    with _OPTIMIZE_SETTING:
        previous = spark.conf.get(OPTIMIZE_MIN_FILE_SIZE, None)
        ceiling = int(previous or DELTA_OPTIMIZE_MIN_FILE_SIZE)
        applied = None if below_bytes is None else min(int(below_bytes), ceiling)
        if applied is not None:
            try:
                spark.conf.set(OPTIMIZE_MIN_FILE_SIZE, str(applied))
            except Exception:  # a session that does not let this setting be changed
                applied = None
        try:
            metrics = spark.sql(f"OPTIMIZE {target}").select(
                "metrics.numFilesRemoved", "metrics.numFilesAdded", "metrics.filesRemoved.totalSize").first()
        finally:
            if applied is not None:
                if previous is None:
                    spark.conf.unset(OPTIMIZE_MIN_FILE_SIZE)
                else:
                    spark.conf.set(OPTIMIZE_MIN_FILE_SIZE, previous)
    if metrics is None:
        return Compaction(0, 0, applied)
    return Compaction(int(metrics[0] or 0), int(metrics[1] or 0), applied, int(metrics[2] or 0))


def vacuum(spark: SparkSession, target: str) -> None:
    """Remove files no version within the table's retention needs (Delta's default and safety check).
    Delta's own count of what it deleted goes to the JVM's standard output, not to a logger: kept
    off the console, where maintenance prints its report."""
    with console_silenced(spark):
        spark.sql(f"VACUUM {target}").collect()
