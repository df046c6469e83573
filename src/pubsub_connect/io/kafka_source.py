"""Kafka for Spark without jars: a Python data source that behaves like Spark's ``kafka`` format.

Why this module exists: it is the fallback engine. Locally the product loads Spark's own Kafka
connector from Maven Central and Databricks has it built in; a machine without an artifact
repository has neither and runs this data source instead. Pipelines call :func:`read_kafka` /
:func:`write_kafka` / :func:`write_kafka_stream` only; those pick the native ``kafka`` format when
the JVM has it and otherwise this module's data source (``pubsub_connect_kafka``), with the same
options, the same output schema and the same offset semantics, so a pipeline cannot tell which
one ran.

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

The sink lives in :mod:`pubsub_connect.io.kafka_sink`.
"""

from __future__ import annotations

import bisect
import json
import logging
import math
import re
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    StructType,
)

from pubsub_connect.io.librdkafka import (
    KafkaOptionsError,
    connection_settings,
    librdkafka_settings,
    with_client_logger,
)
from pubsub_connect.io.spark import Capabilities, capabilities
from pubsub_connect.model.schemas import KAFKA_HEADERS, KAFKA_RECORD_FIELDS

if TYPE_CHECKING:
    import pyarrow as pa
    from confluent_kafka import Consumer, Message
    from confluent_kafka.admin import AdminClient
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

#: Short name of the Python data source; distinct from Spark's built-in ``kafka``.
SOURCE_NAME = "pubsub_connect_kafka"

HEADERS_TYPE = KAFKA_HEADERS

#: Spark's Kafka source schema without headers (``includeHeaders=false``, the default).
KAFKA_SCHEMA_NO_HEADERS = StructType([f for f in KAFKA_RECORD_FIELDS if f.name != "headers"])
#: Spark's Kafka source schema with ``includeHeaders=true`` (the bronze table contract, ``model.schemas``).
KAFKA_SCHEMA = StructType(KAFKA_RECORD_FIELDS)

#: Offset sentinels of Spark's JSON offsets: -2 = earliest, -1 = latest.
EARLIEST = -2
LATEST = -1

TopicPartitionKey = tuple[str, int]
OffsetJson = dict[str, dict[str, int]]

_DEFAULT_GROUP_ID = "pubsub-connect-kafka-source"
_DEFAULT_POLL_TIMEOUT_MS = 120_000
_DEFAULT_OFFSET_TIMEOUT_MS = 60_000
#: Records per Arrow batch handed to Spark (Spark's own default for Arrow batches).
_ARROW_BATCH_RECORDS = 10_000
#: How long a task tolerates a high watermark below its planned range before calling it data
#: loss: on a real cluster a new partition leader can briefly report a lower watermark.
_DATA_LOSS_GRACE_S = 5.0


class KafkaDataLossError(RuntimeError):
    """Records the query was supposed to read are gone (retention, topic recreated, truncation)."""


# --------------------------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------------------------

#: Options Spark's connector rejects because the connector itself owns them.
_SOURCE_FORBIDDEN = {
    "auto.offset.reset": "set the source option 'startingOffsets' instead",
    "key.deserializer": "keys are always returned as binary",
    "value.deserializer": "values are always returned as binary",
    "enable.auto.commit": "offsets live in the Spark checkpoint, nothing is committed to Kafka",
    "interceptor.classes": "Java interceptors cannot run in a Python client",
}
SINK_FORBIDDEN = {
    "key.serializer": "keys are always written as binary (cast the column)",
    "value.serializer": "values are always written as binary (cast the column)",
    "interceptor.classes": "Java interceptors cannot run in a Python client",
}
def _lower_keys(options: Mapping[str, Any]) -> dict[str, str]:
    """Spark options are case-insensitive; normalise once (values keep their case)."""
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def client_config(options: Mapping[str, str], forbidden: Mapping[str, str]) -> dict[str, str]:
    """The Spark-style ``kafka.*`` options as a librdkafka configuration.

    Why a translation: the same option map must work for Spark's JVM connector (Java client
    names) and for this module (librdkafka names); see :mod:`pubsub_connect.io.librdkafka`.
    """
    opts = _lower_keys(options)
    java: dict[str, str] = {}
    for key, value in opts.items():
        if not key.startswith("kafka."):
            continue
        name = key[len("kafka."):]
        if name in forbidden:
            raise KafkaOptionsError(f"Kafka option 'kafka.{name}' is not supported: {forbidden[name]}")
        java[name] = value
    conf = librdkafka_settings(java, shown_prefix="kafka.")
    if not conf.get("bootstrap.servers"):
        raise KafkaOptionsError("option 'kafka.bootstrap.servers' is required")
    return conf


def _parse_bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise KafkaOptionsError(f"option '{key}' must be true or false, got {raw!r}")


def _parse_positive_int(opts: Mapping[str, str], key: str) -> int | None:
    raw = opts.get(key.lower())
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise KafkaOptionsError(f"option '{key}' must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise KafkaOptionsError(f"option '{key}' must be a positive integer, got {raw!r}")
    return value


def _parse_offsets_option(key: str, raw: str | None, default: str) -> str | dict[TopicPartitionKey, int]:
    """``earliest`` / ``latest`` or Spark's per-partition JSON (``{"t":{"0":5,"1":-2}}``)."""
    if raw is None:
        return default
    text = raw.strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        parsed = json.loads(text)
        offsets: dict[TopicPartitionKey, int] = {}
        for topic, parts in parsed.items():
            for part, offset in parts.items():
                offsets[(str(topic), int(part))] = int(offset)
    except (ValueError, AttributeError, TypeError):
        raise KafkaOptionsError(
            f"option '{key}' must be 'earliest', 'latest' or JSON like "
            f"{{\"topic\":{{\"0\":23}}}}, got {raw!r}"
        ) from None
    return offsets


@dataclass(frozen=True)
class KafkaReadOptions:
    """The source options of Spark's Kafka connector, parsed and validated once.

    Validated eagerly by :func:`read_kafka` for both implementations so that a bad option fails
    the same way whichever connector would have run.
    """

    client: dict[str, str]
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: tuple[TopicPartitionKey, ...] = ()
    starting: str | dict[TopicPartitionKey, int] = "latest"
    ending: str | dict[TopicPartitionKey, int] = "latest"
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = _DEFAULT_POLL_TIMEOUT_MS
    offset_timeout_ms: int = _DEFAULT_OFFSET_TIMEOUT_MS

    @classmethod
    def parse(cls, options: Mapping[str, Any], *, streaming: bool,
              python_client: bool = True) -> KafkaReadOptions:
        """Validate ``options``; ``python_client=False`` (native connector) skips the translation
        to librdkafka names, since the JVM client understands the Java ones."""
        opts = _lower_keys(options)
        strategies = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k, "").strip()]
        if len(strategies) != 1:
            raise KafkaOptionsError(
                "exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be set"
                + (f" (got {', '.join(strategies)})" if strategies else "")
            )
        for unsupported in ("startingtimestamp", "startingoffsetsbytimestamp", "endingtimestamp",
                            "endingoffsetsbytimestamp", "minoffsetspertrigger"):
            if unsupported in opts:
                raise KafkaOptionsError(f"option '{unsupported}' is not supported by the Python Kafka source")
        if python_client:
            client = client_config(opts, _SOURCE_FORBIDDEN)
        else:
            for name, why in _SOURCE_FORBIDDEN.items():
                if f"kafka.{name}" in opts:
                    raise KafkaOptionsError(f"Kafka option 'kafka.{name}' is not supported: {why}")
            if not opts.get("kafka.bootstrap.servers"):
                raise KafkaOptionsError("option 'kafka.bootstrap.servers' is required")
            client = {}
        subscribe: tuple[str, ...] = ()
        pattern: str | None = None
        assign: tuple[TopicPartitionKey, ...] = ()
        if strategies[0] == "subscribe":
            subscribe = tuple(sorted({t.strip() for t in opts["subscribe"].split(",") if t.strip()}))
            if not subscribe:
                raise KafkaOptionsError("option 'subscribe' must list at least one topic")
        elif strategies[0] == "subscribepattern":
            pattern = opts["subscribepattern"].strip()
            try:
                re.compile(pattern)
            except re.error as exc:
                raise KafkaOptionsError(f"option 'subscribePattern' is not a valid regex: {exc}") from None
        else:
            try:
                parsed = json.loads(opts["assign"])
                assign = tuple(sorted((str(t), int(p)) for t, parts in parsed.items() for p in parts))
            except (ValueError, AttributeError, TypeError):
                raise KafkaOptionsError(
                    f"option 'assign' must be JSON like {{\"topicA\":[0,1]}}, got {opts['assign']!r}"
                ) from None
        starting = _parse_offsets_option("startingOffsets", opts.get("startingoffsets"),
                                         "latest" if streaming else "earliest")
        ending = _parse_offsets_option("endingOffsets", opts.get("endingoffsets"), "latest")
        if streaming and "endingoffsets" in opts:
            raise KafkaOptionsError("option 'endingOffsets' is only valid for batch queries")
        if not streaming:
            if starting == "latest" or (isinstance(starting, dict) and LATEST in starting.values()):
                raise KafkaOptionsError("startingOffsets 'latest' (-1) is not allowed for batch queries")
            if ending == "earliest" or (isinstance(ending, dict) and EARLIEST in ending.values()):
                raise KafkaOptionsError("endingOffsets 'earliest' (-2) is not allowed for batch queries")
            if "maxoffsetspertrigger" in opts:
                raise KafkaOptionsError("option 'maxOffsetsPerTrigger' is only valid for streaming queries")
        poll_timeout = _parse_positive_int(opts, "kafkaConsumer.pollTimeoutMs") or _DEFAULT_POLL_TIMEOUT_MS
        offset_timeout = _parse_positive_int(opts, "fetchOffset.timeoutMs") or _DEFAULT_OFFSET_TIMEOUT_MS
        return cls(
            client=client,
            subscribe=subscribe,
            subscribe_pattern=pattern,
            assign=assign,
            starting=starting,
            ending=ending,
            max_offsets_per_trigger=_parse_positive_int(opts, "maxOffsetsPerTrigger"),
            min_partitions=_parse_positive_int(opts, "minPartitions"),
            fail_on_data_loss=_parse_bool(opts, "failOnDataLoss", True),
            include_headers=_parse_bool(opts, "includeHeaders", False),
            poll_timeout_ms=poll_timeout,
            offset_timeout_ms=offset_timeout,
        )

    @property
    def schema(self) -> StructType:
        return KAFKA_SCHEMA if self.include_headers else KAFKA_SCHEMA_NO_HEADERS

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` belongs to the subscription (a Java regex must match the whole name)."""
        if self.subscribe:
            return topic in self.subscribe
        if self.subscribe_pattern is not None:
            # Internal topics (__consumer_offsets, __transaction_state) are never subscribed,
            # like the Java consumer's exclude.internal.topics=true.
            return not topic.startswith("__") and re.fullmatch(self.subscribe_pattern, topic) is not None
        return any(t == topic for t, _ in self.assign)

    def consumer_config(self, **overrides: Any) -> dict[str, Any]:
        """A consumer that never joins a group nor commits: offsets live in the checkpoint.

        ``isolation.level`` defaults to the Java client's ``read_uncommitted`` (librdkafka's own
        default is ``read_committed``), so both connectors return the same records.
        """
        conf: dict[str, Any] = {"group.id": _DEFAULT_GROUP_ID, "isolation.level": "read_uncommitted",
                                **self.client}
        conf.update(
            {
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "error",  # an out-of-range position must surface, never reset
                "enable.partition.eof": True,
            }
        )
        conf.update(overrides)
        return conf


# --------------------------------------------------------------------------------------------
# Offsets: JSON form, arithmetic
# --------------------------------------------------------------------------------------------


def offsets_to_json(offsets: Mapping[TopicPartitionKey, int]) -> OffsetJson:
    """Canonical JSON form (sorted topics, numerically sorted partitions) so that equal offsets
    serialise equally — Spark decides "no new data" by comparing the serialised offsets."""
    result: OffsetJson = {}
    for topic, part in sorted(offsets):
        result.setdefault(topic, {})[str(part)] = int(offsets[(topic, part)])
    return result


def offsets_from_json(offsets: Mapping[str, Mapping[str, int]] | None) -> dict[TopicPartitionKey, int]:
    return {(topic, int(part)): int(off) for topic, parts in (offsets or {}).items()
            for part, off in parts.items()}


def rate_limit(start: Mapping[TopicPartitionKey, int], end: dict[TopicPartitionKey, int],
               max_records: int) -> dict[TopicPartitionKey, int]:
    """Cap ``end`` so that at most about ``max_records`` are read, shared by each partition's backlog.

    Same rule as Spark's ``maxOffsetsPerTrigger``: every partition gets its proportional share
    rounded down, but a partition with a share below one record still gets one, so small
    partitions are never starved.
    """
    backlog = {tp: end[tp] - start[tp] for tp in end if start.get(tp, -1) >= 0 and end[tp] > start[tp]}
    total = sum(backlog.values())
    if total <= max_records:
        return end
    capped = dict(end)
    for tp, size in backlog.items():
        share = max_records * size / total
        take = math.ceil(share) if share < 1 else math.floor(share)
        capped[tp] = start[tp] + min(size, take)
    return capped


class KafkaInputPartition(InputPartition):
    """One Spark task: the records ``[start, end)`` of one topic-partition (or a slice of it)."""

    def __init__(self, topic: str, partition: int, start: int, end: int):
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"KafkaInputPartition({self.topic}-{self.partition} [{self.start}, {self.end}))"


def plan_partitions(ranges: Sequence[tuple[TopicPartitionKey, int, int]],
                    min_partitions: int | None) -> list[KafkaInputPartition]:
    """One task per non-empty range; with ``minPartitions`` above the range count, large ranges
    are cut into near-equal slices in proportion to their size. Pure function of its input, so a
    replayed batch is split exactly like the original."""
    ranges = [r for r in ranges if r[2] > r[1]]
    if not min_partitions or len(ranges) >= min_partitions:
        return [KafkaInputPartition(t, p, s, e) for (t, p), s, e in ranges]
    total = sum(e - s for _, s, e in ranges)
    planned: list[KafkaInputPartition] = []
    for (topic, part), start, end in ranges:
        size = end - start
        pieces = max(1, min(size, math.ceil(size * min_partitions / total)))
        for i in range(pieces):
            lo = start + size * i // pieces
            hi = start + size * (i + 1) // pieces
            planned.append(KafkaInputPartition(topic, part, lo, hi))
    return planned


# --------------------------------------------------------------------------------------------
# Driver-side offset lookups
# --------------------------------------------------------------------------------------------


class OffsetReader:
    """Metadata and offset lookups for planning (driver side only, never in tasks).

    Ends come from ListOffsets at the consumer's isolation level, as Spark's connector gets
    them: the high watermark for ``read_uncommitted`` (the default), the last stable offset for
    ``read_committed``, so a planned range never ends inside an open transaction.
    """

    def __init__(self, opts: KafkaReadOptions):
        from confluent_kafka.admin import AdminClient

        self.opts = opts
        self.timeout_s = opts.offset_timeout_ms / 1000
        self._admin: AdminClient = AdminClient(with_client_logger(connection_settings(opts.client)))
        self._read_committed = str(opts.consumer_config().get("isolation.level")) == "read_committed"

    def close(self) -> None:
        """Nothing to close: an AdminClient has no group membership or open fetches."""

    def partitions(self) -> list[TopicPartitionKey]:
        """The topic-partitions the subscription covers right now, sorted."""
        metadata = self._admin.list_topics(timeout=self.timeout_s)
        found: list[TopicPartitionKey] = []
        for name, topic in metadata.topics.items():
            if topic.error is not None or not self.opts.matches(name):
                continue
            for part in topic.partitions:
                if self.opts.assign and (name, part) not in self.opts.assign:
                    continue
                found.append((name, part))
        return sorted(found)

    def _list_offsets(self, tps: Sequence[TopicPartitionKey], spec: str) -> dict[TopicPartitionKey, int]:
        from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        if not tps:
            return {}
        which = OffsetSpec.earliest() if spec == "earliest" else OffsetSpec.latest()
        isolation = IsolationLevel.READ_COMMITTED if self._read_committed else IsolationLevel.READ_UNCOMMITTED
        futures = self._admin.list_offsets({TopicPartition(t, p): which for t, p in tps},
                                           isolation_level=isolation, request_timeout=self.timeout_s)
        found: dict[TopicPartitionKey, int] = {}
        for tp, fut in futures.items():
            try:
                found[(tp.topic, tp.partition)] = fut.result().offset
            except KafkaException as exc:
                if not _is_gone(exc.args[0]):
                    raise
                log.debug("%s-%d disappeared while listing offsets", tp.topic, tp.partition)
        return found

    def earliest(self, tps: Sequence[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        return self._list_offsets(tps, "earliest")

    def end_offsets(self, tps: Sequence[TopicPartitionKey],
                    earliest: Mapping[TopicPartitionKey, int] | None = None) -> dict[TopicPartitionKey, int]:
        """The end of each partition as of now; a partition that no longer exists (missing from
        ``earliest`` or from the answer) is left out."""
        lo = dict(earliest) if earliest is not None else self.earliest(tps)
        return self._list_offsets([tp for tp in tps if tp in lo], "latest")


# --------------------------------------------------------------------------------------------
# Task-side reading: assign + seek, Arrow batches
# --------------------------------------------------------------------------------------------


def _arrow_schema(schema: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


class ArrowBatchBuilder:
    """Column-wise conversion of one partition's consumed messages to Arrow batches.

    Why column-wise: building Python row tuples costs roughly twice as much per record, and the
    Python data source API takes Arrow batches directly. The topic and partition columns are
    constant for a task, so they are built once and sliced (zero-copy) per batch.
    ``timestampType`` follows the Java client's numbering (0 = CreateTime, 1 = LogAppendTime,
    -1 = none), which is librdkafka's numbering minus one.
    """

    def __init__(self, topic: str, partition: int, schema: pa.Schema, include_headers: bool,
                 max_rows: int = _ARROW_BATCH_RECORDS):
        import numpy as np
        import pyarrow as pa

        self.schema = schema
        self.include_headers = include_headers
        self._topic = pa.array([topic] * max_rows, pa.string())
        self._partition = pa.array(np.full(max_rows, partition, dtype=np.int32))
        self._ts_type = schema.field("timestamp").type
        self._headers_type = schema.field("headers").type if include_headers else None

    def build(self, messages: Sequence[Message], offsets: Any) -> pa.RecordBatch:
        """``offsets``: the messages' offsets (a list, or a numpy range when contiguous)."""
        import numpy as np
        import pyarrow as pa

        n = len(messages)
        stamps = [m.timestamp() for m in messages]
        ts_type = np.fromiter((s[0] for s in stamps), dtype=np.int32, count=n) - 1
        ts_us = np.fromiter((s[1] for s in stamps), dtype=np.int64, count=n) * 1000
        arrays = [
            pa.array([m.key() for m in messages], pa.binary()),
            pa.array([m.value() for m in messages], pa.binary()),
            self._topic.slice(0, n),
            self._partition.slice(0, n),
            pa.array(offsets, pa.int64()),
            pa.array(ts_us, self._ts_type),
            pa.array(ts_type),
        ]
        if self.include_headers:
            # Spark gives null (not an empty array) for a record without headers.
            arrays.append(pa.array([m.headers() or None for m in messages], self._headers_type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def read_partition(opts: KafkaReadOptions, part: KafkaInputPartition) -> Iterator[pa.RecordBatch]:
    """Read exactly the offsets ``[part.start, part.end)`` of one partition as Arrow batches.

    Offsets inside the range that hold no record (compaction, transaction markers) are skipped
    silently, as in Spark; a range that starts before the log start or ends beyond the high
    watermark is data loss (fail, or skip with a warning when ``failOnDataLoss=false``).
    """
    import numpy as np
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    topic, partition, until = part.topic, part.partition, part.end
    builder = ArrowBatchBuilder(topic, partition, _arrow_schema(opts.schema), opts.include_headers)
    # Bound read-ahead to the range (librdkafka would otherwise prefetch up to 64 MB beyond it),
    # and resume fetching as soon as the bounded queue drains, not after the default 1 s pause.
    read_ahead = max(1, min(until - part.start, 100_000))
    consumer = Consumer(with_client_logger(opts.consumer_config(**{"queued.min.messages": read_ahead,
                                                                   "fetch.queue.backoff.ms": 5})))
    tp = TopicPartition(topic, partition, part.start)
    position = part.start
    try:
        consumer.assign([tp])
        last_progress = time.monotonic()
        while position < until:
            batch: list[Message] = []
            offsets: Any = []  # list[int], or a numpy range for a contiguous batch
            msgs = consumer.consume(num_messages=min(until - position, _ARROW_BATCH_RECORDS), timeout=0.1)
            n = len(msgs)
            if n and all(m.error() is None for m in msgs):
                # Common case, records only. Offsets ascend; when they are contiguous the wanted
                # slice is plain arithmetic, otherwise (compaction, markers) a bisection.
                first, last = msgs[0].offset(), msgs[-1].offset()
                if last - first == n - 1:
                    lo = min(max(0, position - first), n)
                    hi = max(lo, min(n, until - first))
                    offsets = np.arange(first + lo, first + hi, dtype=np.int64)
                else:
                    all_offsets = [m.offset() for m in msgs]
                    lo = bisect.bisect_left(all_offsets, position)
                    hi = bisect.bisect_left(all_offsets, until)
                    offsets = all_offsets[lo:hi]
                batch = msgs[lo:hi]
                position = until if hi < n else max(position, last + 1)
                msgs = []
            for msg in msgs:
                err = msg.error()
                if err is None:
                    offset = msg.offset()
                    if offset >= until:
                        position = until
                        break
                    if offset >= position:
                        batch.append(msg)
                        offsets.append(offset)
                        position = offset + 1
                elif err.code() == KafkaError._PARTITION_EOF:
                    # Everything below the high watermark has been delivered: offsets without a
                    # record up to it (markers, compaction) are done.
                    position = max(position, min(msg.offset(), until))
                elif err.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
                    position = _out_of_range(opts, consumer, topic, partition, position, until)
                elif err.fatal():
                    raise KafkaException(err)
                else:
                    log.warning("transient Kafka error reading %s-%d: %s", topic, partition, err)
            now = time.monotonic()
            if batch:
                yield builder.build(batch, offsets)
                last_progress = now
                continue
            if position >= until:
                break
            stalled = now - last_progress
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
            if 0 <= high <= position and stalled > _DATA_LOSS_GRACE_S:
                _report_data_loss(
                    opts,
                    f"{topic}-{partition}: records [{position}, {until}) were planned but the partition now "
                    f"ends at {high} (topic recreated or log truncated)",
                )
                return
            if stalled * 1000 > opts.poll_timeout_ms:
                raise TimeoutError(
                    f"{topic}-{partition}: no record at offset {position} within {opts.poll_timeout_ms} ms "
                    "(option kafkaConsumer.pollTimeoutMs)"
                )
    finally:
        consumer.close()


def _out_of_range(opts: KafkaReadOptions, consumer: Consumer, topic: str, partition: int,
                  position: int, until: int) -> int:
    """The broker refused ``position``: decide between aged-out records and a shrunken log."""
    from confluent_kafka import TopicPartition

    low, _ = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                            timeout=opts.offset_timeout_ms / 1000)
    if position < low:
        _report_data_loss(opts, f"{topic}-{partition}: records [{position}, {min(low, until)}) were deleted "
                                f"(retention?) before they could be read")
        if low >= until:
            return until
        consumer.assign([TopicPartition(topic, partition, low)])
        return low
    _report_data_loss(opts, f"{topic}-{partition}: offset {position} is beyond the end of the partition "
                            "(topic recreated or log truncated)")
    return until


def _is_gone(err: Any) -> bool:
    """Whether a client error means the topic/partition does not exist (any more)."""
    from confluent_kafka import KafkaError

    return err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION,
                          KafkaError._UNKNOWN_TOPIC)


def _report_data_loss(opts: KafkaReadOptions, message: str) -> None:
    if opts.fail_on_data_loss:
        raise KafkaDataLossError(
            f"{message}. Some data may have been lost. If you want the query to continue, set the "
            "source option failOnDataLoss=false."
        )
    log.warning("%s. Continuing because failOnDataLoss=false.", message)


# --------------------------------------------------------------------------------------------
# Spark Python data source
# --------------------------------------------------------------------------------------------


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
                _report_data_loss(self.opts, f"{tp[0]}-{tp[1]} is gone (topic deleted or partitions removed)")
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
                    _report_data_loss(self.opts, f"{tp[0]}-{tp[1]}: offset went back from {known} to "
                                                 f"{high[tp]} (topic recreated or log truncated)")
                elif known < lo[tp]:
                    _report_data_loss(self.opts, f"{tp[0]}-{tp[1]}: records [{known}, {lo[tp]}) were deleted "
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
                _report_data_loss(self.opts, f"{tp[0]}-{tp[1]}: offset went back from {first} to {until}")
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


class KafkaDataSource(DataSource):
    """``spark.read[Stream].format("pubsub_connect_kafka")`` and the matching sink."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return KAFKA_SCHEMA if _parse_bool(_lower_keys(self.options), "includeHeaders", False) else (
            KAFKA_SCHEMA_NO_HEADERS
        )

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBatchReader(KafkaReadOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(KafkaReadOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from pubsub_connect.io.kafka_sink import KafkaBatchWriter, KafkaWriteOptions

        if overwrite:
            raise KafkaOptionsError("the Kafka sink only appends: use mode('append')")
        return KafkaBatchWriter(KafkaWriteOptions.parse(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from pubsub_connect.io.kafka_sink import KafkaStreamWriter, KafkaWriteOptions

        return KafkaStreamWriter(KafkaWriteOptions.parse(self.options, schema))


# --------------------------------------------------------------------------------------------
# Public API used by the pipelines
# --------------------------------------------------------------------------------------------


_REGISTERED: weakref.WeakSet[Any] = weakref.WeakSet()


def register(spark: SparkSession) -> None:
    """Register the Python Kafka data source on ``spark``, once per session (Spark would
    accept a re-registration but logs a warning each time)."""
    if spark in _REGISTERED:
        return
    spark.dataSource.register(KafkaDataSource)
    _REGISTERED.add(spark)


def _format(spark: SparkSession, caps: Capabilities | None) -> str:
    """``kafka`` when the JVM has Spark's connector, else this module's source (registered)."""
    caps = caps or capabilities(spark)
    if caps.native_kafka:
        return "kafka"
    register(spark)
    return SOURCE_NAME


def read_kafka(spark: SparkSession, options: dict[str, str], *, streaming: bool = True,
               caps: Capabilities | None = None) -> DataFrame:
    """A Kafka DataFrame with Spark's Kafka schema, from the native connector or this module.

    Options are validated here for both implementations, so a mistake fails the same way
    wherever the pipeline runs.
    """
    fmt = _format(spark, caps)
    KafkaReadOptions.parse(options, streaming=streaming, python_client=fmt == SOURCE_NAME)
    reader = spark.readStream if streaming else spark.read
    return reader.format(fmt).options(**options).load()


def write_kafka(df: DataFrame, options: dict[str, str], *, caps: Capabilities | None = None) -> None:
    """Write a batch DataFrame with the Kafka sink's columns (``key``, ``value``, optional
    ``topic``, ``partition``, ``headers``); returns once every record was acknowledged."""
    from pubsub_connect.io.kafka_sink import KafkaWriteOptions

    fmt = _format(df.sparkSession, caps)
    KafkaWriteOptions.parse(options, df.schema, python_client=fmt == SOURCE_NAME)
    df.write.format(fmt).mode("append").options(**options).save()


_TRIGGER_KEYS = ("processingTime", "once", "availableNow", "continuous")


def write_kafka_stream(df: DataFrame, options: dict[str, str], checkpoint_location: str, *,
                       caps: Capabilities | None = None, trigger: dict[str, Any] | None = None,
                       query_name: str | None = None) -> StreamingQuery:
    """Start a streaming write to Kafka (at-least-once, like Spark's sink).

    ``trigger`` takes the keyword form of ``DataStreamWriter.trigger``, e.g.
    ``{"availableNow": True}`` or ``{"processingTime": "1 second"}``.
    """
    from pubsub_connect.io.kafka_sink import KafkaWriteOptions

    fmt = _format(df.sparkSession, caps)
    KafkaWriteOptions.parse(options, df.schema, python_client=fmt == SOURCE_NAME)
    writer = df.writeStream.format(fmt).options(**options).option("checkpointLocation", checkpoint_location)
    if trigger:
        unknown = set(trigger) - set(_TRIGGER_KEYS)
        if unknown:
            raise KafkaOptionsError(f"unknown trigger {sorted(unknown)}; use one of {list(_TRIGGER_KEYS)}")
        writer = writer.trigger(**trigger)
    if query_name:
        writer = writer.queryName(query_name)
    return writer.start()
