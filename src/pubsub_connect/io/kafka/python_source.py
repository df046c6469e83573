"""The fallback engine's Kafka source: Spark Python data source readers that behave like Spark's ``kafka``.

Why this module exists: a machine without an artifact repository has no Spark Kafka connector,
so the product reads Kafka through these readers instead, with the same options, the same output
schema and the same offset semantics, so a pipeline cannot tell which one ran. The data source
Spark registers is :mod:`pubsub_connect.io.kafka.datasource`; the pipelines' entry point is
:func:`pubsub_connect.io.kafka.reader.read_kafka`.

Design choices (each mirrors what Spark's connector does unless stated):

* Offsets are per topic-partition, serialised like Spark's (``{"topic": {"0": 123}}``, sorted)
  and stored by Spark in the checkpoint. A planned micro-batch is fully described by its start
  and end offsets, so a replay after a crash re-reads exactly the same records.
* Two deliberate deviations keep replays deterministic without Spark's side metadata log:
  ``startingOffsets=latest`` is written into the first batch's start as ``-1`` (Spark's own JSON
  sentinel) and pinned to real offsets by batch 0, which is therefore empty; and a partition that
  appears mid-query (new partition, new topic matching the pattern) first enters the offsets at
  its earliest offset through a batch that reads nothing from it, then is read normally.
* The end of a partition is ListOffsets(latest) at the consumer's isolation level (the high
  watermark, or the last stable offset for ``read_committed``), as Spark's connector plans.
* Records are read in Spark tasks with ``assign`` + ``seek`` (no consumer group, nothing committed
  to Kafka) and handed to Spark as Arrow record batches, not Python rows.

The sink lives in :mod:`pubsub_connect.io.kafka.python_sink`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from pubsub_connect.io.kafka.offsets import (
    KafkaInputPartition,
    OffsetReader,
    offsets_from_json,
    offsets_to_json,
    plan_partitions,
    rate_limit,
)
from pubsub_connect.io.kafka.options import KafkaOptionsError
from pubsub_connect.io.kafka.partition_reader import read_partition
from pubsub_connect.io.kafka.read_options import (
    EARLIEST,
    LATEST,
    KafkaReadOptions,
    OffsetJson,
    TopicPartitionKey,
    report_data_loss,
)

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader. Offset methods run in one long-lived driver-side Python process (so
    the :class:`OffsetReader` is created once and reused); ``read`` runs in tasks on a fresh
    copy of this object and must not rely on driver state."""

    def __init__(self, opts: KafkaReadOptions):
        self.opts = opts
        self._offsets: OffsetReader | None = None
        self._target: dict[TopicPartitionKey, int] | None = None
        self._latest: dict[TopicPartitionKey, int] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Clients are never shipped to tasks.
        return {"opts": self.opts, "_offsets": None, "_target": None, "_latest": None}

    @property
    def offsets(self) -> OffsetReader:
        if self._offsets is None:
            self._offsets = OffsetReader(self.opts)
        return self._offsets

    def initialOffset(self) -> OffsetJson:
        tps = self.offsets.partitions()
        starting = self.opts.starting
        if starting == "latest":
            # Pinned to real offsets by batch 0 (see the module docstring).
            return offsets_to_json(dict.fromkeys(tps, LATEST))
        lo = self.offsets.earliest(tps)
        if starting == "earliest":
            return offsets_to_json(lo)
        assert isinstance(starting, dict)
        _check_json_covers(starting, tps, "startingOffsets")
        return offsets_to_json({tp: lo[tp] if off == EARLIEST else off for tp, off in starting.items()})

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Freeze the end of every current partition: availableNow reads up to it, in as many
        batches as ``maxOffsetsPerTrigger`` requires, and never past it."""
        tps = self.offsets.partitions()
        self._target = self.offsets.end_offsets(tps)
        log.info("availableNow target offsets: %s", offsets_to_json(self._target))

    def latestOffset(self, start: OffsetJson, limit: ReadLimit) -> OffsetJson:
        begin = offsets_from_json(start)
        listed = set(self.offsets.partitions())
        candidates = sorted(listed & set(self._target) if self._target is not None else listed)
        lo = self.offsets.earliest(candidates)
        if self._target is not None:
            high = {tp: self._target[tp] for tp in candidates}
        else:
            high = self.offsets.end_offsets(candidates, lo)
        tps = [tp for tp in candidates if tp in lo and tp in high]
        for tp in sorted(set(begin) - set(tps)):
            if tp not in listed or tp in candidates:
                report_data_loss(self.opts, f"{tp[0]}-{tp[1]} is gone (topic deleted or partitions removed)")
        end: dict[TopicPartitionKey, int] = {}
        for tp in tps:
            known = begin.get(tp)
            if known is None:
                # A partition new to this query enters at its earliest offset; nothing is read
                # from it in this batch, so the batch's ranges stay explicit in the checkpoint.
                end[tp] = min(lo[tp], high[tp])
            elif known == LATEST:
                end[tp] = high[tp]
            else:
                if known > high[tp]:
                    report_data_loss(self.opts, f"{tp[0]}-{tp[1]}: offset went back from {known} to "
                                                 f"{high[tp]} (topic recreated or log truncated)")
                elif known < lo[tp]:
                    report_data_loss(self.opts, f"{tp[0]}-{tp[1]}: records [{known}, {lo[tp]}) were deleted "
                                                 "before they could be read")
                end[tp] = high[tp]
        self._latest = dict(end)
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(begin, end, limit.max_rows)
        return offsets_to_json(end)

    def reportLatestOffset(self) -> OffsetJson | None:
        return offsets_to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: OffsetJson, end: OffsetJson) -> Sequence[InputPartition]:
        begin = offsets_from_json(start)
        ranges: list[tuple[TopicPartitionKey, int, int]] = []
        for tp, until in sorted(offsets_from_json(end).items()):
            first = begin.get(tp)
            if first is None or first == LATEST:
                continue  # entered this batch: nothing to read yet
            if until < first:
                report_data_loss(self.opts, f"{tp[0]}-{tp[1]}: offset went back from {first} to {until}")
                continue
            ranges.append((tp, first, until))
        return plan_partitions(ranges, self.opts.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, KafkaInputPartition):
            return iter(())
        return read_partition(self.opts, partition)

    def commit(self, end: OffsetJson) -> None:
        """Nothing to do: Spark's checkpoint is the only record of progress (like Spark's source,
        which commits nothing to Kafka)."""

    def stop(self) -> None:
        if self._offsets is not None:
            self._offsets.close()
            self._offsets = None


class KafkaBatchReader(DataSourceReader):
    """Batch read of ``[startingOffsets, endingOffsets)``, resolved once when the query is planned."""

    def __init__(self, opts: KafkaReadOptions):
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        offsets = OffsetReader(self.opts)
        try:
            tps = offsets.partitions()
            lo = offsets.earliest(tps)
            needs_end = self.opts.ending == "latest" or (
                isinstance(self.opts.ending, dict) and LATEST in self.opts.ending.values()
            )
            high = offsets.end_offsets(tps, lo) if needs_end else {}
        finally:
            offsets.close()
        tps = [tp for tp in tps if tp in lo and (tp in high or not needs_end)]  # not deleted meanwhile
        start = _resolve_batch_offsets(self.opts.starting, tps, lo, high, "startingOffsets")
        end = _resolve_batch_offsets(self.opts.ending, tps, lo, high, "endingOffsets")
        ranges: list[tuple[TopicPartitionKey, int, int]] = []
        for tp in tps:
            if start[tp] > end[tp]:
                raise KafkaOptionsError(
                    f"{tp[0]}-{tp[1]}: starting offset {start[tp]} is after the ending offset {end[tp]}: "
                    "either the offsets are wrong or the topic was damaged"
                )
            ranges.append((tp, start[tp], end[tp]))
        return plan_partitions(ranges, self.opts.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, KafkaInputPartition):
            return iter(())
        return read_partition(self.opts, partition)


def _check_json_covers(offsets: Mapping[TopicPartitionKey, int], tps: Sequence[TopicPartitionKey],
                       option: str) -> None:
    """Like Spark: per-partition JSON offsets must name exactly the subscribed partitions."""
    if set(offsets) != set(tps):
        raise KafkaOptionsError(
            f"{option} must specify every subscribed partition ({sorted(tps)}), got {sorted(offsets)}; "
            "use -2 for earliest and -1 for latest"
        )


def _resolve_batch_offsets(spec: str | dict[TopicPartitionKey, int], tps: Sequence[TopicPartitionKey],
                           lo: Mapping[TopicPartitionKey, int], high: Mapping[TopicPartitionKey, int],
                           option: str) -> dict[TopicPartitionKey, int]:
    if spec == "earliest":
        return {tp: lo[tp] for tp in tps}
    if spec == "latest":
        return {tp: high[tp] for tp in tps}
    assert isinstance(spec, dict)
    _check_json_covers(spec, tps, option)
    resolved = {}
    for tp, off in spec.items():
        resolved[tp] = lo[tp] if off == EARLIEST else high[tp] if off == LATEST else off
    return resolved
