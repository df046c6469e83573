"""What the driver keeps between micro-batches (a few numbers per partition,
:class:`PartitionState`) and what a task reports back (:class:`PartitionReport`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from pubsub_connect.model.blockgzip.rotation import OpenFile

if TYPE_CHECKING:
    import pyarrow as pa


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
def report_schema() -> pa.Schema:
    import pyarrow as pa

    file_type = pa.struct([("key", pa.string()), ("first_offset", pa.int64()), ("end_offset", pa.int64()),
                           ("records", pa.int64()), ("blocks", pa.int32()), ("bytes", pa.int64())])
    return pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("files", pa.list_(file_type)),
                      ("skipped", pa.int64()), ("state", pa.string()), ("pid", pa.int32()), ("host", pa.string())])


def report_row(report: PartitionReport) -> dict[str, Any]:
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
