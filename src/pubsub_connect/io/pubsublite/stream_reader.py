"""The Lite source's micro-batch reader on every supported Spark, and how a task reads its range.

The planning rules are in :mod:`pubsub_connect.io.pubsublite.data_source`; where Spark offers
Python sources admission control, :mod:`pubsub_connect.io.pubsublite.admission_control` extends
this reader.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from pubsub_connect.config.keys import LONG_MAX
from pubsub_connect.io.kafka.offsets import rate_limit
from pubsub_connect.io.pubsublite.offsets import OffsetClient, bounded_end, offsets_from_json, offsets_to_json
from pubsub_connect.io.pubsublite.read_options import LiteReadOptions
from pubsub_connect.io.pubsublite.subscriber import LiteDataLossError, read_range
from pubsub_connect.model.schemas import LITE_MESSAGE_FIELDS

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

#: The source's rows: Lite coordinates, the message, its times.
LITE_SOURCE_SCHEMA = StructType(LITE_MESSAGE_FIELDS)
#: Messages per Arrow batch handed to Spark.
_ARROW_BATCH_MESSAGES = 10_000


def plan_end(begin: Mapping[int, int], heads: Mapping[int, int], flow_messages: int,
             partition_bytes: Any = None, flow_bytes: int | None = None) -> dict[int, int]:
    """Per-partition batch ends: the head, capped by the flow-control message count and (when
    ``partition_bytes(partition, start, end)`` is given) by ``flow_bytes``. A head below the
    planned start means the partition went backwards: data loss, never silently skipped."""
    end: dict[int, int] = {}
    for partition, start in sorted(begin.items()):
        head = heads.get(partition)
        if head is None:
            raise LiteDataLossError(f"partition {partition} no longer exists (was the topic recreated?)")
        if head < start:
            raise LiteDataLossError(f"partition {partition} ends at {head}, below the checkpoint's offset {start} "
                                    "(was the topic recreated?)")
        stop = min(head, start + flow_messages)
        if partition_bytes is not None and flow_bytes is not None and stop > start:
            stop = bounded_end(lambda e, p=partition, s=start: partition_bytes(p, s, e), start, stop, flow_bytes)
        end[partition] = stop
    return end


class LiteInputPartition(InputPartition):
    """One Spark task: offsets ``[start, end)`` of one Lite partition."""

    def __init__(self, partition: int, start: int, end: int):
        super().__init__((partition, start, end))
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"LiteInputPartition({self.partition} [{self.start}, {self.end}))"


class LiteStreamReader(DataSourceStreamReader):
    """Micro-batch reader with the streaming API of every supported Spark. Offset methods run in one
    long-lived driver-side Python process; ``read`` runs in tasks on a fresh copy (clients are
    never pickled).

    Before Spark 4.2 a Python source has no admission control: Spark asks ``latestOffset()``
    without the batch's start. So this reader keeps the start itself: the end of the batch it was
    last asked to plan, or (before the first, after a restart) where :meth:`_start_positions`
    puts each partition — the committed cursors, which the pull stage commits with every batch.
    Batches are then capped as the module docstring says, except under ``availableNow``
    (``until_heads``): Spark asks only once then, so that one batch reads to the heads. A
    partition the checkpoint does not have yet is read from its start position in the batch that
    first names it. Where Spark has admission control,
    :class:`~pubsub_connect.io.pubsublite.admission_control.AdmissionControlledLiteStreamReader`
    plans from the start Spark gives it instead.
    """

    def __init__(self, opts: LiteReadOptions):
        self.opts = opts
        self._client: OffsetClient | None = None
        self._latest: dict[int, int] | None = None
        self._next_start: dict[int, int] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None, "_latest": None, "_next_start": None}

    @property
    def client(self) -> OffsetClient:
        if self._client is None:
            self._client = OffsetClient(self.opts.connection, self.opts.subscription)
        return self._client

    def _start_positions(self, partitions: Sequence[int]) -> dict[int, int]:
        """Where a partition new to this checkpoint starts (see the module docstring)."""
        cursors = self.client.committed_cursors()
        earliest = self.client.earliest_offsets(partitions)
        return {p: max(cursors.get(p, 0), self.opts.starting.get(p, 0), earliest[p]) for p in partitions}

    def initialOffset(self) -> dict[str, int]:
        start = self._start_positions(range(self.client.partition_count()))
        log.info("%s: starting at %s", self.opts.subscription, offsets_to_json(start))
        self._next_start = start
        return offsets_to_json(start)

    def _plan_batch(self, begin: dict[int, int], heads: dict[int, int], count: int, *, capped: bool,
                    max_rows: int | None) -> dict[str, int]:
        """The batch's end from ``begin``: each partition's head, capped by flow control when
        ``capped`` and by ``max_rows`` in all; a partition of the ``count`` that ``begin`` lacks
        joins at its start position, nothing read from it in this batch. Both readers plan so."""
        if capped:
            limit_bytes = self.opts.flow_bytes < LONG_MAX
            end = plan_end(begin, heads, self.opts.flow_messages,
                           self.client.range_bytes if limit_bytes else None, self.opts.flow_bytes)
        else:
            end = plan_end(begin, heads, LONG_MAX)
        if max_rows:
            end = rate_limit(begin, end, max_rows)
        new = [p for p in range(count) if p not in begin]
        if new:
            end.update(self._start_positions(new))
        self._latest = dict(heads)
        return offsets_to_json(end)

    def latestOffset(self) -> dict[str, int]:
        """The next batch's end (Spark 4.0 and 4.1, which give no start)."""
        count = self.client.partition_count()
        if self._next_start is None:
            self._next_start = self._start_positions(range(count))
        begin = dict(self._next_start)
        heads = self.client.head_offsets(sorted(begin))
        until_heads = self.opts.until_heads
        return self._plan_batch(begin, heads, count, capped=not until_heads,
                                max_rows=None if until_heads else self.opts.max_messages_per_trigger)

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        begin = offsets_from_json(start)
        stop = offsets_from_json(end)
        self._next_start = dict(stop)
        joined = sorted(p for p in stop if p not in begin)
        if joined:
            begin.update(self._start_positions(joined))
        for partition in sorted(stop):
            if stop[partition] < begin[partition]:
                raise LiteDataLossError(f"partition {partition} ends at {stop[partition]}, below the checkpoint's "
                                        f"offset {begin[partition]} (was the topic recreated?)")
        return [LiteInputPartition(p, begin[p], stop[p]) for p in sorted(stop) if stop[p] > begin[p]]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, LiteInputPartition):
            return iter(())
        return read_partition(self.opts, partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing: the pull stage commits cursors once the batch is in bronze."""

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def read_partition(opts: LiteReadOptions, part: LiteInputPartition) -> Iterator[pa.RecordBatch]:
    """Exactly the messages ``[part.start, part.end)`` as Arrow batches of the source schema."""
    from pubsub_connect.model.lite.arrow import bronze_batch
    from pubsub_connect.model.lite.source import LiteReceived
    from pubsub_connect.model.schemas import to_arrow

    schema = to_arrow(LITE_SOURCE_SCHEMA)
    pending: list[LiteReceived] = []
    for messages in read_range(opts.connection, opts.subscription, part.partition, part.start, part.end,
                               flow_messages=opts.flow_messages, flow_bytes=opts.flow_bytes,
                               timeout_s=opts.read_timeout_ms / 1000):
        pending.extend(LiteReceived.from_proto(part.partition, m) for m in messages)
        if len(pending) >= _ARROW_BATCH_MESSAGES:
            yield bronze_batch(pending).cast(schema)
            pending = []
    if pending:
        yield bronze_batch(pending).cast(schema)
