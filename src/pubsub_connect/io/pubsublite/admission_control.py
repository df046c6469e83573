"""The Lite source's reader where Spark offers admission control to Python streaming sources (4.2+).

Why a module of its own: ``pyspark.sql.streaming.datasource`` (read limits, ``availableNow``
support) exists only from Spark 4.2, and the reader of :mod:`pubsub_connect.io.pubsublite.stream_reader`
must import on the oldest supported Spark. Where this API exists, each batch is planned from its
start: capped per partition by the flow-control keys and overall by ``maxMessagesPerTrigger``,
frozen at the heads once under ``availableNow`` (which then runs as many capped batches as it takes),
and a partition added to the topic joins through a batch that reads nothing from it, so every range
read is explicit in the checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from pubsub_connect.io.pubsublite.offsets import offsets_from_json, offsets_to_json
from pubsub_connect.io.pubsublite.read_options import LiteReadOptions
from pubsub_connect.io.pubsublite.stream_reader import LiteInputPartition, LiteStreamReader, log


class AdmissionControlledLiteStreamReader(LiteStreamReader, SupportsTriggerAvailableNow):
    """:class:`LiteStreamReader` with Spark 4.2's read limits and ``availableNow`` support."""

    def __init__(self, opts: LiteReadOptions):
        super().__init__(opts)
        self._target: dict[int, int] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_target": None}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_messages_per_trigger:
            return ReadMaxRows(self.opts.max_messages_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Freeze the heads: ``availableNow`` reads up to them and never past them."""
        self._target = self.client.head_offsets(range(self.client.partition_count()))
        log.info("%s: availableNow target %s", self.opts.subscription, offsets_to_json(self._target))

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:  # type: ignore[override]
        begin = offsets_from_json(start)
        if self._target is not None:
            heads = {p: self._target[p] for p in begin if p in self._target}
        else:
            heads = self.client.head_offsets(sorted(begin))
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return self._plan_batch(begin, heads, self.client.partition_count(), capped=True, max_rows=max_rows)

    def reportLatestOffset(self) -> dict[str, int] | None:
        return offsets_to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        begin = offsets_from_json(start)
        return [LiteInputPartition(p, begin[p], stop) for p, stop in sorted(offsets_from_json(end).items())
                if p in begin and stop > begin[p]]
