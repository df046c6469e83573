"""Records as the archive's tasks take them, and where a file's first records are read again
(Kafka, by offset range, from inside a task).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import pyarrow as pa

    from pubsub_connect.io.kafka.read_options import KafkaReadOptions


@dataclass(frozen=True)
class Records:
    """A run of one partition's records in increasing offsets, as the plain lists the writer and
    the planner take (timestamps in epoch milliseconds, -1 when the record has none)."""

    offsets: list[int]
    timestamps: list[int]
    values: list[bytes | None]

    def __len__(self) -> int:
        return len(self.offsets)

    def slice(self, start: int, stop: int | None = None) -> Records:
        return Records(self.offsets[start:stop], self.timestamps[start:stop], self.values[start:stop])

    @classmethod
    def from_batch(cls, batch: pa.RecordBatch) -> Records:
        """Rows of a micro-batch as :func:`select_archive_columns` shapes them (``offset, ts, value``)."""
        # A record without a timestamp (-1 in Kafka, null here) dates its file 1969-12-31.
        timestamps = [-1 if ts is None else ts for ts in batch.column("ts").to_pylist()]
        return cls(batch.column("offset").to_pylist(), timestamps, batch.column("value").to_pylist())

    @classmethod
    def from_kafka(cls, batch: pa.RecordBatch) -> Records:
        """Rows in Spark's Kafka schema (``timestamp`` in microseconds), as the task-side reader
        of :mod:`pubsub_connect.io.kafka.partition_reader` returns them."""
        import pyarrow as pa
        import pyarrow.compute as pc

        micros = pc.fill_null(batch.column("timestamp").cast(pa.int64()), -1000)
        millis = micros.to_numpy(zero_copy_only=False) // 1000  # floor, like Spark's unix_millis
        return cls(batch.column("offset").to_pylist(), millis.tolist(), batch.column("value").to_pylist())


class RecordSource(Protocol):
    """Where a task reads a partition's records again: those of a file that began in an earlier
    micro-batch. Must pickle (it travels to the executors with :class:`ArchiveTask`)."""

    def read(self, topic: str, partition: int, start: int, end: int) -> Iterator[Records]:
        """The records of ``[start, end)`` in increasing offsets (offsets without a record —
        compaction, transaction markers — are skipped)."""
        ...


@dataclass(frozen=True)
class KafkaRecordSource:
    """Reads Kafka directly from the task, with the stream's own client settings (security,
    isolation level…) and the task-side reader of the Python Kafka source.

    Why not a Spark read planned by the driver: whether a file completes is only known inside
    the task, after planning the batch's records; a second job would have to re-plan first."""

    options: KafkaReadOptions = field(repr=False)  # bootstrap servers, credentials

    def read(self, topic: str, partition: int, start: int, end: int) -> Iterator[Records]:
        from pubsub_connect.io.kafka.offsets import KafkaInputPartition
        from pubsub_connect.io.kafka.partition_reader import read_partition

        for batch in read_partition(self.options, KafkaInputPartition(topic, partition, start, end)):
            yield Records.from_kafka(batch)


def replay_options(options: Mapping[str, str]) -> KafkaReadOptions:
    """The stream's Kafka options as the task-side reader takes them (parsed once, on the driver,
    where a bad option fails with its own message)."""
    from pubsub_connect.io.kafka.read_options import KafkaReadOptions

    return KafkaReadOptions.parse(options, streaming=True)
