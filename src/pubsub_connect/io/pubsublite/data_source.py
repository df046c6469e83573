"""Pub/Sub Lite as a Spark streaming source (Python data source ``pubsub_connect_lite``).

Why a Spark source and not a pull loop like the Cloud Pub/Sub source: Lite partitions are
replayable logs with dense offsets, exactly like Kafka. So the pull stage gets what the Kafka
ingest has: a micro-batch is fully described by per-partition offset ranges that Spark writes
to the checkpoint *before* reading, and a replay after a crash re-reads exactly the same
messages. Together with the idempotent bronze append this gives exactly-once into bronze
without any dedupe.

Offsets are ``{"<partition>": <next offset>}`` (numerically sorted). Planning (driver side):

* the first batch of a new checkpoint starts at the subscription's committed cursor, raised to
  the ``startingOffsets`` floor the pipeline passes (the end of what bronze already holds, so a
  lost checkpoint does not duplicate) and to the oldest retained message;
* each batch ends at the partition heads (frozen once under ``availableNow``), capped per
  partition by ``pubsublite.partition_flow_control.messages`` and ``.bytes`` — a batch's
  messages are outstanding until the batch is durable, which is what those keys bound in
  Google's connector — and overall by ``maxMessagesPerTrigger`` (shared like Spark's Kafka
  ``maxOffsetsPerTrigger``);
* a partition added to the topic joins at its start position through a batch that reads
  nothing from it, so every range read is explicit in the checkpoint.

Tasks read their range with :func:`pubsub_connect.io.pubsublite.subscriber.read_range`. Nothing is
committed to Lite here: the pull stage commits cursors after the batch is in bronze (see
:mod:`pubsub_connect.pipelines.lite_source`), where the batch is known to be durable;
:meth:`LiteStreamReader.commit` is a no-op because Spark calls it on its own schedule (when it
plans a later batch), which would leave the last batch's cursors uncommitted in ``--once`` runs.
"""

from __future__ import annotations

import json
import logging
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from pubsub_connect.config.keys import LONG_MAX
from pubsub_connect.io.kafka.offsets import rate_limit
from pubsub_connect.io.pubsublite.connection import LiteConnection
from pubsub_connect.io.pubsublite.offsets import OffsetClient, bounded_end, offsets_from_json, offsets_to_json
from pubsub_connect.io.pubsublite.subscriber import LiteDataLossError, read_range
from pubsub_connect.model.schemas import LITE_MESSAGE_FIELDS

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

SOURCE_NAME = "pubsub_connect_lite"
#: The source's rows: Lite coordinates, the message, its times.
LITE_SOURCE_SCHEMA = StructType(LITE_MESSAGE_FIELDS)
#: Messages per Arrow batch handed to Spark.
_ARROW_BATCH_MESSAGES = 10_000
_DEFAULT_READ_TIMEOUT_MS = 120_000


class LiteOptionsError(ValueError):
    """A source option is missing or malformed (one-line message)."""


@dataclass(frozen=True)
class LiteReadOptions:
    """The source's options, parsed once. Options are strings (Spark's data source contract);
    :meth:`to_options` and :meth:`parse` are inverses. The credentials JSON travels under a key
    containing ``secret`` so Spark's default redaction hides it in plans and logs."""

    connection: LiteConnection
    subscription: str
    flow_messages: int = LONG_MAX
    flow_bytes: int = 20_000_000
    max_messages_per_trigger: int | None = None
    starting: dict[int, int] = field(default_factory=dict)
    read_timeout_ms: int = _DEFAULT_READ_TIMEOUT_MS

    def to_options(self) -> dict[str, str]:
        conn = self.connection
        options = {
            "project": conn.project, "location": conn.location, "subscription": self.subscription,
            "flowControlMessages": str(self.flow_messages), "flowControlBytes": str(self.flow_bytes),
            "startingOffsets": json.dumps(offsets_to_json(self.starting)),
            "readTimeoutMs": str(self.read_timeout_ms),
        }
        if conn.endpoint:
            options["endpoint"] = conn.endpoint
        if conn.credentials_file:
            options["credentialsFile"] = conn.credentials_file
        if conn.credentials_json:
            options["credentialsSecret"] = conn.credentials_json
        if self.max_messages_per_trigger:
            options["maxMessagesPerTrigger"] = str(self.max_messages_per_trigger)
        return options

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> LiteReadOptions:
        opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
        missing = [k for k in ("project", "location", "subscription") if not opts.get(k.lower())]
        if missing:
            raise LiteOptionsError(f"Lite source option(s) {', '.join(missing)} must be set")

        def number(key: str, default: int | None) -> int | None:
            raw = opts.get(key.lower())
            if raw is None:
                return default
            try:
                value = int(raw)
            except ValueError:
                raise LiteOptionsError(f"Lite source option {key} must be an integer, got {raw!r}") from None
            if value < 1:
                raise LiteOptionsError(f"Lite source option {key} must be at least 1, got {value}")
            return value

        conn = LiteConnection(project=opts["project"], location=opts["location"],
                              endpoint=opts.get("endpoint") or None,
                              credentials_file=opts.get("credentialsfile") or None,
                              credentials_json=opts.get("credentialssecret") or None)
        try:
            starting = offsets_from_json(opts.get("startingoffsets"))
        except (ValueError, TypeError, AttributeError):
            raise LiteOptionsError("Lite source option startingOffsets must be JSON like {\"0\": 12}") from None
        return cls(
            connection=conn,
            subscription=conn.subscription_path(opts["subscription"]),
            flow_messages=number("flowControlMessages", LONG_MAX) or LONG_MAX,
            flow_bytes=number("flowControlBytes", 20_000_000) or 20_000_000,
            max_messages_per_trigger=number("maxMessagesPerTrigger", None),
            starting=starting,
            read_timeout_ms=number("readTimeoutMs", _DEFAULT_READ_TIMEOUT_MS) or _DEFAULT_READ_TIMEOUT_MS,
        )


class LiteInputPartition(InputPartition):
    """One Spark task: offsets ``[start, end)`` of one Lite partition."""

    def __init__(self, partition: int, start: int, end: int):
        super().__init__((partition, start, end))
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"LiteInputPartition({self.partition} [{self.start}, {self.end}))"


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


class LiteStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader. Offset methods run in one long-lived driver-side Python process;
    ``read`` runs in tasks on a fresh copy (clients are never pickled)."""

    def __init__(self, opts: LiteReadOptions):
        self.opts = opts
        self._client: OffsetClient | None = None
        self._target: dict[int, int] | None = None
        self._latest: dict[int, int] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"opts": self.opts, "_client": None, "_target": None, "_latest": None}

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
        return offsets_to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_messages_per_trigger:
            return ReadMaxRows(self.opts.max_messages_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Freeze the heads: ``availableNow`` reads up to them and never past them."""
        self._target = self.client.head_offsets(range(self.client.partition_count()))
        log.info("%s: availableNow target %s", self.opts.subscription, offsets_to_json(self._target))

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        begin = offsets_from_json(start)
        count = self.client.partition_count()
        new = [p for p in range(count) if p not in begin]
        if self._target is not None:
            heads = {p: self._target[p] for p in begin if p in self._target}
        else:
            heads = self.client.head_offsets(sorted(begin))
        capped = self.opts.flow_bytes < LONG_MAX
        end = plan_end(begin, heads, self.opts.flow_messages,
                       self.client.range_bytes if capped else None, self.opts.flow_bytes)
        self._latest = dict(heads)
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(begin, end, limit.max_rows)
        if new:  # joins at its start position; nothing is read from it in this batch
            end.update(self._start_positions(new))
        return offsets_to_json(end)

    def reportLatestOffset(self) -> dict[str, int] | None:
        return offsets_to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        begin = offsets_from_json(start)
        return [LiteInputPartition(p, begin[p], stop) for p, stop in sorted(offsets_from_json(end).items())
                if p in begin and stop > begin[p]]

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


class LiteDataSource(DataSource):
    """``spark.readStream.format("pubsub_connect_lite")`` (streaming only)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return LITE_SOURCE_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return LiteStreamReader(LiteReadOptions.parse(self.options))


_REGISTERED: weakref.WeakSet[Any] = weakref.WeakSet()


def read_lite(spark: SparkSession, opts: LiteReadOptions) -> DataFrame:
    """A streaming DataFrame of Lite messages (``LITE_SOURCE_SCHEMA``) for ``opts``."""
    if spark not in _REGISTERED:
        spark.dataSource.register(LiteDataSource)
        _REGISTERED.add(spark)
    return spark.readStream.format(SOURCE_NAME).options(**opts.to_options()).load()


__all__ = ["LITE_SOURCE_SCHEMA", "LiteDataSource", "LiteReadOptions", "LiteStreamReader", "plan_end", "read_lite"]
