"""What the notebooks show, as plain functions: table counts and samples, checkpoint offsets and
lag, throughput and latency over time.

Why here and not in the notebooks: notebooks are hard to test and to review, so they only pick
parameters, call these functions and print or plot the result. The functions run the same on
Databricks (Unity Catalog tables, checkpoints in a volume) and locally (delta-rs tables under
``storage.root``), because they go through the project's table store and read Spark's own files.

Sources of truth, on purpose the durable ones rather than a live query's memory:

- offsets come from a stage's Spark checkpoint — ``offsets/<N>`` is written when batch N is
  planned (its end offsets), ``commits/<N>`` when batch N finished — so the last committed
  source offsets are ``offsets/<max committed N>``; these are the Kafka Connect offsets of the
  original connectors;
- throughput comes from the Delta log of a table: each stage commits one Delta version per
  micro-batch, with its commit time and row count (``commitInfo.operationMetrics``, else the
  ``numRecords`` statistics of the added files);
- latency comes from the bronze rows themselves: ``ingest_time`` minus the record's own time
  (Kafka ``timestamp`` or Pub/Sub ``publish_time``).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pubsub_connect import config as cfg
from pubsub_connect.io.tables import BRONZE, DLQ, KINDS, OUTBOX, TableRef, TableStore

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

UTC = dt.timezone.utc
TopicPartition = tuple[str, int]

#: Stage order per connector kind, to list a connector's checkpoints in pipeline order.
STAGE_ORDER = {
    cfg.CPS_SINK: ("ingest", "convert", "publish"),
    cfg.CPS_SOURCE: ("pull", "convert", "produce"),
    cfg.LITE_SINK: ("ingest", "convert", "publish"),
    cfg.LITE_SOURCE: ("pull", "convert", "produce"),
    cfg.ARCHIVE: ("archive",),
}


# --------------------------------------------------------------------------------------------
# Parameters and the store
# --------------------------------------------------------------------------------------------


def notebook_params(namespace: Mapping[str, Any], defaults: Mapping[str, str],
                    argv: Sequence[str] | None = None) -> dict[str, str]:
    """A notebook's parameters: Databricks widgets when ``dbutils`` is in the notebook's globals,
    otherwise (the notebook run as a script) ``--name value`` arguments, then environment
    variables ``PUBSUB_CONNECT_<NAME>``, then ``defaults``."""
    dbutils = namespace.get("dbutils")
    if dbutils is not None:
        for name, default in defaults.items():
            dbutils.widgets.text(name, default)
        return {name: str(dbutils.widgets.get(name)) for name in defaults}
    values = {name: os.environ.get(f"PUBSUB_CONNECT_{name.upper()}", default) for name, default in defaults.items()}
    args = list(sys.argv[1:] if argv is None else argv)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            name = name.replace("-", "_")
            if not eq and i + 1 < len(args):
                value, i = args[i + 1], i + 1
            if name in values:
                values[name] = value
        i += 1
    return values


@dataclass(frozen=True)
class ConnectorRef:
    """A connector as the notebooks know it: its ``name`` (which names tables and checkpoints)
    and, when read from its ``.properties`` file, its kind."""

    name: str
    kind: str | None = None

    @property
    def stages(self) -> tuple[str, ...]:
        return STAGE_ORDER.get(self.kind or "", ())


def connector_ref(value: str) -> ConnectorRef:
    """``value`` is a connector name, or the path of its ``.properties`` file (name and kind are
    read from it without resolving secrets, which the notebooks do not need)."""
    if value.endswith(".properties"):
        raw = cfg.read_properties(value)
        if not raw.get("name"):
            raise cfg.ConfigError(f"{value}: missing required key name")
        return ConnectorRef(raw["name"].strip(), cfg.connector_kind(raw, value))
    return ConnectorRef(value)


#: The shapes a connector runs in: its jobs (``<connector>.job.yml``, ``pubsub-connect run``) or
#: its declarative pipeline (``<connector>.pipeline.yml``, ``pubsub-connect pipeline run``).
SHAPES = ("jobs", "pipeline")


def open_store(storage_root: str, catalog: str = "", schema: str = "",
               spark: SparkSession | None = None, shape: str = "jobs",
               connector: ConnectorRef | None = None) -> TableStore:
    """The table store a connector's jobs, or its declarative pipeline (``shape``), write to:
    same worker keys, same backend choice. With a catalog and schema both shapes name their
    tables alike; locally a pipeline keeps its own under ``<storage_root>/pipelines/<name>``."""
    from pubsub_connect.io.spark import build_session, capabilities
    from pubsub_connect.io.tables import table_store

    if shape not in SHAPES:
        raise cfg.ConfigError(f"shape must be one of {', '.join(SHAPES)}, got {shape!r}")

    raw = {"storage.root": storage_root}
    if catalog:
        raw["storage.catalog"] = catalog
    if schema:
        raw["storage.schema"] = schema
    worker = cfg.validate_worker(raw, "<notebook>")
    session = spark or build_session(worker.spark_conf)
    if shape == "pipeline":
        from pubsub_connect.lakeflow.conf import pipeline_store

        if connector is None or not connector.kind:
            raise cfg.ConfigError("the pipeline shape needs the connector's .properties (its kind)")
        return pipeline_store(session, worker, connector.name, connector.kind)
    caps = capabilities(session)
    return table_store(session, worker.storage_root, caps, worker.get("storage.catalog"),
                       worker.get("storage.schema"))


def table_location(store: TableStore, ref: TableRef) -> str:
    """The Unity Catalog name of a table when it has one, else its path."""
    name_of = getattr(store, "table_name", None)
    name = name_of(ref) if name_of else None
    return name.replace("`", "") if name else store.path(ref)


# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------


def table_counts(store: TableStore, connector: str) -> dict[str, int | None]:
    """Rows in the connector's bronze, outbox and dlq tables (``None``: not created yet)."""
    counts: dict[str, int | None] = {}
    for kind in KINDS:
        ref = TableRef(kind, connector)
        counts[kind] = store.read(ref).count() if store.exists(ref) else None
    return counts


_ORDER_COLUMNS = ("failed_at", "ingest_time", "offset")


def _display_value(value: Any, width: int) -> Any:
    """Bytes as text when they are UTF-8, else ``base64:``; long text cut to ``width``."""
    if isinstance(value, (bytes, bytearray)):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            value = "base64:" + base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {k: _display_value(v, width) for k, v in value.items()}
    if isinstance(value, list):
        return [_display_value(v, width) for v in value]
    if hasattr(value, "asDict"):
        return _display_value(value.asDict(), width)
    if isinstance(value, str) and len(value) > width:
        return value[: width - 1] + "…"
    return value


def sample_rows(store: TableStore, connector: str, kind: str, limit: int = 5,
                width: int = 120) -> list[dict[str, Any]]:
    """The newest ``limit`` rows of a table (by failure/ingest time or offset when the table has
    such a column), binary columns shown as text."""
    ref = TableRef(kind, connector)
    if not store.exists(ref):
        return []
    df = store.read(ref)
    order = next((c for c in _ORDER_COLUMNS if c in df.columns), None)
    if order:
        df = df.orderBy(df[order].desc())
    return [{k: _display_value(v, width) for k, v in row.asDict(recursive=False).items()}
            for row in df.limit(limit).collect()]


# --------------------------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceOffsets:
    """One source's position in a checkpoint's offset log entry.

    ``partitions`` is set for Kafka-style offsets (``{"topic": {"0": 42}}``: the next offset to
    read, i.e. everything before it is done); ``table_version`` for Delta sources: the last table
    version whose files were all read (native Delta's ``reservoirVersion`` points at the next
    version with ``index`` -1 once a version is read whole; delta-rs: ``version``, the last
    version included)."""

    index: int
    raw: Any
    partitions: dict[TopicPartition, int] = field(default_factory=dict)
    table_version: int | None = None


@dataclass(frozen=True)
class CheckpointState:
    """A stage's checkpoint: the last committed batch and its end offsets, plus the batch that was
    planned but not committed (running, or interrupted) when there is one."""

    stage: str
    path: str
    last_committed: int | None
    committed: tuple[SourceOffsets, ...]
    pending: int | None = None
    pending_offsets: tuple[SourceOffsets, ...] = ()
    batch_timestamp: dt.datetime | None = None

    def partition_offsets(self) -> dict[TopicPartition, int]:
        """Committed Kafka-style offsets of all sources, merged."""
        merged: dict[TopicPartition, int] = {}
        for source in self.committed:
            merged.update(source.partitions)
        return merged


_BATCH_FILE = re.compile(r"^\d+$")


def _local_path(path: str) -> Path:
    """Checkpoints are read with plain file I/O: local paths and Databricks' FUSE mounts
    (``/Volumes/...``, ``dbfs:/x`` → ``/dbfs/x``)."""
    if path.startswith("dbfs:/"):
        return Path("/dbfs") / path[len("dbfs:/"):].lstrip("/")
    if path.startswith("file://"):
        return Path(path[len("file://"):])
    if path.startswith("file:"):
        return Path(path[len("file:"):])
    if "://" in path:
        raise ValueError(f"{path}: only local, /Volumes and dbfs:/ checkpoint locations can be read here")
    return Path(path)


def _batch_ids(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if _BATCH_FILE.match(p.name) and p.is_file())


def _is_partition_offsets(value: Any) -> bool:
    return (isinstance(value, dict) and bool(value)
            and all(isinstance(parts, dict) and all(str(k).lstrip("-").isdigit() for k in parts)
                    for parts in value.values()))


def parse_source_offset(index: int, text: str) -> SourceOffsets:
    """One source line of an offset log entry (``-`` when the source had no offset yet)."""
    text = text.strip()
    if text in ("", "-"):
        return SourceOffsets(index, None)
    raw = json.loads(text)
    if _is_partition_offsets(raw):
        parts = {(str(topic), int(p)): int(off) for topic, offs in raw.items() for p, off in offs.items()}
        return SourceOffsets(index, raw, dict(sorted(parts.items())))
    if isinstance(raw, dict) and "reservoirVersion" in raw:
        version = int(raw["reservoirVersion"])
        whole = int(raw.get("index", -1)) == -1 and not raw.get("isStartingVersion", False)
        return SourceOffsets(index, raw, table_version=version - 1 if whole else version)
    if isinstance(raw, dict) and set(raw) == {"version"}:
        return SourceOffsets(index, raw, table_version=int(raw["version"]))
    return SourceOffsets(index, raw)


def parse_offset_log(text: str) -> tuple[dict[str, Any], tuple[SourceOffsets, ...]]:
    """An ``offsets/<N>`` file: a version line (``v1``), the batch metadata JSON, then one line
    per source."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("v"):
        raise ValueError("not a Spark offset log entry (no version line)")
    metadata = json.loads(lines[1]) if len(lines) > 1 and lines[1].strip() else {}
    return metadata, tuple(parse_source_offset(i, line) for i, line in enumerate(lines[2:]))


def checkpoint_state(path: str, stage: str = "") -> CheckpointState:
    """Read a stage's checkpoint folder (see the module docstring for the file semantics)."""
    root = _local_path(path)
    committed_ids = _batch_ids(root / "commits")
    planned_ids = _batch_ids(root / "offsets")
    last = committed_ids[-1] if committed_ids else None
    committed: tuple[SourceOffsets, ...] = ()
    stamp: dt.datetime | None = None
    if last is not None and (root / "offsets" / str(last)).is_file():
        metadata, committed = parse_offset_log((root / "offsets" / str(last)).read_text(encoding="utf-8"))
        if metadata.get("batchTimestampMs"):
            stamp = dt.datetime.fromtimestamp(int(metadata["batchTimestampMs"]) / 1000, UTC)
    pending = planned_ids[-1] if planned_ids and (last is None or planned_ids[-1] > last) else None
    pending_offsets: tuple[SourceOffsets, ...] = ()
    if pending is not None:
        _, pending_offsets = parse_offset_log((root / "offsets" / str(pending)).read_text(encoding="utf-8"))
    return CheckpointState(stage or root.name, str(root), last, committed, pending, pending_offsets, stamp)


def connector_checkpoints(store: TableStore, connector: ConnectorRef) -> list[CheckpointState]:
    """Every stage checkpoint of a connector that exists, in pipeline order when the kind is
    known (then alphabetically)."""
    folder = _local_path(store.root) / "checkpoints" / connector.name
    if not folder.is_dir():
        return []
    present = {p.name for p in folder.iterdir() if p.is_dir()}
    order = [s for s in connector.stages if s in present] + sorted(present - set(connector.stages))
    return [checkpoint_state(str(folder / stage), stage) for stage in order]


def lag(committed: Mapping[TopicPartition, int],
        end_offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
    """Records not yet processed per partition: end offset minus committed offset (``None`` for
    a partition the checkpoint has not seen yet)."""
    result: dict[TopicPartition, int | None] = {}
    for tp in sorted(set(committed) | set(end_offsets)):
        if tp in committed and tp in end_offsets:
            result[tp] = max(0, end_offsets[tp] - committed[tp])
        else:
            result[tp] = None
    return result


def describe_position(sources: Sequence[SourceOffsets]) -> str:
    """One line per checkpoint: ``topic-partition:offset`` pairs or the Delta table version."""
    parts: list[str] = []
    for source in sources:
        if source.partitions:
            parts.append(", ".join(f"{t}-{p}:{o}" for (t, p), o in source.partitions.items()))
        elif source.table_version is not None:
            parts.append(f"table version {source.table_version}")
        elif source.raw is not None:
            parts.append(json.dumps(source.raw, sort_keys=True))
    return "; ".join(parts) or "-"


def checkpoint_rows(states: Sequence[CheckpointState]) -> list[dict[str, Any]]:
    """A summary row per stage checkpoint, for :func:`format_table`."""
    return [{"stage": s.stage, "committed_batch": s.last_committed, "committed_at": s.batch_timestamp,
             "position": describe_position(s.committed), "pending_batch": s.pending} for s in states]


def offset_rows(state: CheckpointState,
                end_offsets: Mapping[TopicPartition, int] | None = None) -> list[dict[str, Any]]:
    """Per topic-partition: committed offset, and with ``end_offsets`` the end offset and lag."""
    committed = state.partition_offsets()
    ends = dict(end_offsets or {})
    lags = lag(committed, ends) if end_offsets is not None else {}
    return [{"stage": state.stage, "topic": t, "partition": p, "committed_offset": committed.get((t, p)),
             "end_offset": ends.get((t, p)), "lag": lags.get((t, p))}
            for t, p in sorted(set(committed) | set(ends))]


def kafka_end_offsets(bootstrap_servers: str, topics: Iterable[str],
                      client_options: Mapping[str, str] | None = None) -> dict[TopicPartition, int]:
    """The current end offset of every partition of ``topics``, read the way the project's Kafka
    source plans batches (exact on Kafka and on the test broker). ``client_options`` are
    Spark-Kafka style ``kafka.*`` options (security settings)."""
    from pubsub_connect.io.kafka_source import KafkaReadOptions, OffsetReader

    names = sorted(set(topics))
    if not names:
        return {}
    options = {"kafka.bootstrap.servers": bootstrap_servers, "subscribe": ",".join(names),
               **dict(client_options or {})}
    reader = OffsetReader(KafkaReadOptions.parse(options, streaming=True))
    try:
        return reader.end_offsets(reader.partitions())
    finally:
        reader.close()


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
    return Commit(version, stamp, str(info.get("operation", "")), rows, txn.get("appId"),
                  int(txn["version"]) if txn.get("version") is not None else None)


def delta_log_commits(table_path: str) -> list[Commit]:
    """Every commit still described by a JSON file in the table's ``_delta_log``, oldest first."""
    log_dir = _local_path(table_path) / "_delta_log"
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
        commits.append(Commit(int(row["version"]), stamp, str(row["operation"]),
                              _rows_from_metrics(row["operationMetrics"]), params.get("txnAppId"),
                              int(params["txnVersion"]) if params.get("txnVersion") else None))
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


# --------------------------------------------------------------------------------------------
# Text output (the notebooks print; Databricks also renders the plots)
# --------------------------------------------------------------------------------------------


def format_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """A fixed-width text table: readable in a notebook cell, a job log and a test assertion."""
    if not rows:
        return "(no rows)"
    columns = list(columns or rows[0].keys())
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dt.datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, float):
        return f"{value:,.3f}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str, ensure_ascii=False)
    return str(value)


def plot_series(title: str, x: Sequence[dt.datetime], series: Mapping[str, Sequence[float]],
                ylabel: str) -> Any:
    """A line plot when matplotlib is installed (it is on Databricks), else ``None``."""
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(10, 3.5))
    for label, values in series.items():
        ax.plot(list(x), list(values), marker="o", label=label)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.legend()
    fig.autofmt_xdate()
    return fig


__all__ = [
    "BRONZE",
    "DLQ",
    "OUTBOX",
    "CheckpointState",
    "Commit",
    "ConnectorRef",
    "LatencyPoint",
    "SourceOffsets",
    "ThroughputPoint",
    "checkpoint_rows",
    "checkpoint_state",
    "connector_checkpoints",
    "connector_ref",
    "delta_log_commits",
    "describe_position",
    "format_table",
    "kafka_end_offsets",
    "lag",
    "latency",
    "notebook_params",
    "offset_rows",
    "open_store",
    "parse_commit",
    "parse_offset_log",
    "plot_series",
    "sample_rows",
    "table_commits",
    "table_counts",
    "table_location",
    "throughput",
]
