"""Throughput from a table's Delta log (one commit per micro-batch) and latency from the bronze
rows' own timestamps, bucketed over time.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pubsub_connect.explore.checkpoints import local_path
from pubsub_connect.explore.context import UTC
from pubsub_connect.io import delta_log
from pubsub_connect.io.delta_log import Commit
from pubsub_connect.io.tables import BRONZE, TableRef, TableStore

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


# --------------------------------------------------------------------------------------------
# Delta history: throughput
# --------------------------------------------------------------------------------------------


def delta_log_commits(table_path: str) -> list[Commit]:
    """Every commit still described by a JSON file in the table's ``_delta_log``, oldest first."""
    log_dir = local_path(table_path) / "_delta_log"
    return delta_log.commits(log_dir) if log_dir.is_dir() else []


def spark_history_commits(spark: SparkSession, table: str) -> list[Commit]:
    """``DESCRIBE HISTORY`` of a catalog table (Unity Catalog managed tables have no path to read)."""
    commits = []
    for row in spark.sql(f"DESCRIBE HISTORY {table}").collect():
        params = row["operationParameters"] or {}
        stamp = row["timestamp"]
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=UTC)
        app_id, batch_id = delta_log.stage_batch(params.get("txnAppId"), params.get("txnVersion") or None,
                                                 row["userMetadata"])
        commits.append(Commit(int(row["version"]), stamp, str(row["operation"]),
                              delta_log.rows_from_metrics(row["operationMetrics"]), app_id, batch_id,
                              row["userMetadata"]))
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
