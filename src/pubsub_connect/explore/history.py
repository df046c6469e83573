"""Throughput from a table's Delta log (one commit per micro-batch) and latency from the bronze
rows' own timestamps, bucketed over time.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pubsub_connect.explore.checkpoints import local_path
from pubsub_connect.explore.context import UTC
from pubsub_connect.io.batch_marks import parse_batch_mark
from pubsub_connect.io.tables import BRONZE, TableRef, TableStore

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


# --------------------------------------------------------------------------------------------
# Delta history: throughput
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Commit:
    """One Delta table version: when it was committed and how many rows it added."""

    version: int
    timestamp: dt.datetime
    operation: str
    rows: int | None
    app_id: str | None = None
    batch_id: int | None = None


_ROW_METRICS = ("numOutputRows", "num_added_rows", "numAddedRows")


def _rows_from_metrics(metrics: Mapping[str, Any] | None) -> int | None:
    for key in _ROW_METRICS:
        if metrics and metrics.get(key) is not None:
            return int(metrics[key])
    return None


def parse_commit(version: int, text: str) -> Commit:
    """One ``_delta_log/<version>.json`` file (newline-delimited actions)."""
    info: dict[str, Any] = {}
    txn: dict[str, Any] = {}
    stats_rows: int | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        if "commitInfo" in action:
            info = action["commitInfo"]
        elif "txn" in action:
            txn = action["txn"]
        elif "add" in action and action["add"].get("stats"):
            records = json.loads(action["add"]["stats"]).get("numRecords")
            if records is not None:
                stats_rows = (stats_rows or 0) + int(records)
    rows = _rows_from_metrics(info.get("operationMetrics"))
    if rows is None:
        rows = stats_rows
    stamp = dt.datetime.fromtimestamp(int(info.get("timestamp") or 0) / 1000, UTC)
    app_id, batch_id = _stage_batch(txn.get("appId"), txn.get("version"), info.get("userMetadata"))
    return Commit(version, stamp, str(info.get("operation", "")), rows, app_id, batch_id)


def _stage_batch(txn_app_id: str | None, txn_version: object, user_metadata: str | None) -> tuple[str | None,
                                                                                                  int | None]:
    """The stage micro-batch a commit appended: its mark (``userMetadata``), or the Delta
    transaction id of a table written before marks existed (and by the fallback engine)."""
    mark = parse_batch_mark(user_metadata)
    if mark is not None:
        return mark
    return txn_app_id, int(str(txn_version)) if txn_version is not None else None


def delta_log_commits(table_path: str) -> list[Commit]:
    """Every commit still described by a JSON file in the table's ``_delta_log``, oldest first."""
    log_dir = local_path(table_path) / "_delta_log"
    if not log_dir.is_dir():
        return []
    commits = []
    for entry in log_dir.iterdir():
        stem, suffix = entry.name.split(".", 1) if "." in entry.name else (entry.name, "")
        if suffix == "json" and stem.isdigit():
            commits.append(parse_commit(int(stem), entry.read_text(encoding="utf-8")))
    return sorted(commits, key=lambda c: c.version)


def spark_history_commits(spark: SparkSession, table: str) -> list[Commit]:
    """``DESCRIBE HISTORY`` of a catalog table (Unity Catalog managed tables have no path to read)."""
    commits = []
    for row in spark.sql(f"DESCRIBE HISTORY {table}").collect():
        params = row["operationParameters"] or {}
        stamp = row["timestamp"]
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=UTC)
        app_id, batch_id = _stage_batch(params.get("txnAppId"), params.get("txnVersion") or None,
                                        row["userMetadata"])
        commits.append(Commit(int(row["version"]), stamp, str(row["operation"]),
                              _rows_from_metrics(row["operationMetrics"]), app_id, batch_id))
    return sorted(commits, key=lambda c: c.version)


def table_commits(store: TableStore, connector: str, kind: str) -> list[Commit]:
    """A connector table's commits, from its Delta log (path tables) or its history (catalog)."""
    ref = TableRef(kind, connector)
    name_of = getattr(store, "table_name", None)
    name = name_of(ref) if name_of else None
    if name:
        return spark_history_commits(store.spark, name) if store.exists(ref) else []
    return delta_log_commits(store.path(ref))


@dataclass(frozen=True)
class ThroughputPoint:
    start: dt.datetime
    commits: int
    rows: int
    rows_per_second: float


def throughput(commits: Iterable[Commit], bucket_seconds: int = 60) -> list[ThroughputPoint]:
    """Rows committed per time bucket (commits without a row count — table creation, metadata
    changes — are left out)."""
    if bucket_seconds <= 0:
        raise ValueError("bucket_seconds must be positive")
    buckets: dict[int, list[int]] = {}
    for commit in commits:
        if commit.rows is None or commit.operation.upper().startswith("CREATE"):
            continue
        key = int(commit.timestamp.timestamp()) // bucket_seconds * bucket_seconds
        entry = buckets.setdefault(key, [0, 0])
        entry[0] += 1
        entry[1] += commit.rows
    return [ThroughputPoint(dt.datetime.fromtimestamp(key, UTC), n, rows, rows / bucket_seconds)
            for key, (n, rows) in sorted(buckets.items())]


# --------------------------------------------------------------------------------------------
# Bronze timestamps: latency
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LatencyPoint:
    start: dt.datetime
    records: int
    p50_seconds: float
    p95_seconds: float
    max_seconds: float


def latency(store: TableStore, connector: str, bucket_seconds: int = 60) -> list[LatencyPoint]:
    """Ingest latency per bucket of ``ingest_time``: how long after the record's own time
    (Kafka ``timestamp``, Pub/Sub ``publish_time``) it landed in bronze."""
    from pyspark.sql import functions as F

    ref = TableRef(BRONZE, connector)
    if not store.exists(ref):
        return []
    df = store.read(ref)
    event = next((c for c in ("timestamp", "publish_time", "event_time") if c in df.columns), None)
    if event is None or "ingest_time" not in df.columns:
        return []
    seconds = F.unix_micros(F.col("ingest_time")) / 1e6 - F.unix_micros(F.col(event)) / 1e6
    bucket = (F.floor(F.unix_micros(F.col("ingest_time")) / 1e6 / bucket_seconds) * bucket_seconds).cast("long")
    rows = (df.where(F.col(event).isNotNull() & F.col("ingest_time").isNotNull())
            .select(bucket.alias("bucket"), seconds.alias("latency"))
            .groupBy("bucket")
            .agg(F.count("*").alias("n"), F.percentile_approx("latency", 0.5).alias("p50"),
                 F.percentile_approx("latency", 0.95).alias("p95"), F.max("latency").alias("max"))
            .orderBy("bucket")
            .collect())
    return [LatencyPoint(dt.datetime.fromtimestamp(int(r["bucket"]), UTC), int(r["n"]), float(r["p50"]),
                         float(r["p95"]), float(r["max"])) for r in rows]
