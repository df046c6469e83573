"""A stage's position from its Spark checkpoint: the last committed source offsets (the Kafka
Connect offsets of the original connectors) and the lag behind Kafka's end offsets.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pubsub_connect.explore.context import UTC, ConnectorRef
from pubsub_connect.io.tables import TableStore

if TYPE_CHECKING:
    pass


TopicPartition = tuple[str, int]
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


def local_path(path: str) -> Path:
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


def batch_ids(folder: Path) -> list[int]:
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
    """Read a stage's checkpoint folder (see the package docstring for the file semantics)."""
    root = local_path(path)
    committed_ids = batch_ids(root / "commits")
    planned_ids = batch_ids(root / "offsets")
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
    folder = local_path(store.root) / "checkpoints" / connector.name
    if not folder.is_dir():
        return []
    present = {p.name for p in folder.iterdir() if p.is_dir()}
    order = [s for s in connector.stages if s in present] + sorted(present - set(connector.stages))
    return [checkpoint_state(str(folder / stage), stage) for stage in order]


def pipeline_mode(store: TableStore, connector: ConnectorRef) -> str:
    """How the connector last ran, in words: ``pipeline.mode=fused`` (one query on the ``ingest``
    checkpoint; no outbox) or staged, from the mode its last run recorded beside its checkpoints."""
    from pubsub_connect.io.checkpoints import read_json
    from pubsub_connect.pipelines.modes import MODE_FILE

    recorded = read_json(local_path(store.root) / "checkpoints" / connector.name / MODE_FILE)
    if recorded is not None and recorded.get("mode") == "fused":
        return ("pipeline.mode=fused: one query lands bronze and publishes; its position is the ingest "
                "checkpoint, and it writes no outbox")
    return "pipeline.mode=staged: one query per stage, handing records on through bronze and outbox"


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
    from pubsub_connect.io.kafka.offsets import OffsetReader
    from pubsub_connect.io.kafka.read_options import KafkaReadOptions

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
