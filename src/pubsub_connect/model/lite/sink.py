"""Pub/Sub Lite sink, one record at a time: a converted Kafka record → a Lite message with the
``x-goog-pubsublite-source-kafka-*`` attributes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pubsub_connect.model.connect import SchemaAndValue
from pubsub_connect.model.lite.encoding import BYTES_TYPES, LiteEncodingError, NestedNull, encode_to_bytes

if TYPE_CHECKING:

    pass


KAFKA_TOPIC_ATTRIBUTE = "x-goog-pubsublite-source-kafka-topic"
KAFKA_PARTITION_ATTRIBUTE = "x-goog-pubsublite-source-kafka-partition"
KAFKA_OFFSET_ATTRIBUTE = "x-goog-pubsublite-source-kafka-offset"
KAFKA_EVENT_TIME_TYPE_ATTRIBUTE = "x-goog-pubsublite-source-kafka-event-time-type"

#: Kafka's ``TimestampType`` ids (as in Spark's ``timestampType`` column) and their ``name``.
TIMESTAMP_TYPE_NAMES: dict[int, str] = {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}

#: ``Timestamps.fromMillis`` rejects instants after 9999-12-31T23:59:59.999Z.
MAX_TIMESTAMP_MS = 253_402_300_799_999

# ----------------------------------------------------------------------------------------------
# Sink: record → message
# ----------------------------------------------------------------------------------------------

HeaderValue = SchemaAndValue | bytes | None


@dataclass(frozen=True)
class LiteSinkRecord:
    """A Kafka record after the converters (Connect's ``SinkRecord``).

    ``headers`` values are converter output or raw header bytes (= BYTES, kept unchanged).
    ``timestamp_ms`` < 0 or None means no timestamp; ``timestamp_type`` is Kafka's id
    (0 CreateTime, 1 LogAppendTime) or its name.
    """

    key: SchemaAndValue | None = None
    value: SchemaAndValue | None = None
    topic: str | None = None
    partition: int | None = None
    offset: int = 0
    timestamp_ms: int | None = None
    timestamp_type: int | str = 0
    headers: Sequence[tuple[str, HeaderValue]] = ()


@dataclass(frozen=True)
class LiteMessage:
    """A Lite ``PubSubMessage``: ``attributes`` keep insertion order, values in order."""

    key: bytes = b""
    data: bytes = b""
    attributes: Mapping[str, tuple[bytes, ...]] = field(default_factory=dict)
    event_time_ms: int | None = None

    @property
    def event_time(self) -> tuple[int, int] | None:
        """``(seconds, nanos)`` as in ``google.protobuf.Timestamp`` (nanos always ≥ 0)."""
        if self.event_time_ms is None:
            return None
        seconds, ms = divmod(self.event_time_ms, 1000)
        return seconds, ms * 1_000_000

    def to_proto(self) -> Any:
        """The ``google.cloud.pubsublite.v1.PubSubMessage`` protobuf (raw, not proto-plus)."""
        from google.cloud.pubsublite_v1.types import common

        msg = common.PubSubMessage.pb()(key=self.key, data=self.data)
        for name, values in self.attributes.items():
            msg.attributes[name].values.extend(values)
        if self.event_time is not None:
            msg.event_time.seconds, msg.event_time.nanos = self.event_time
        return msg


@dataclass(frozen=True)
class LiteSinkResult:
    message: LiteMessage
    skipped_headers: int = 0


def timestamp_type_name(t: int | str) -> str:
    """Kafka's name of a timestamp type given by id (or already by name)."""
    if isinstance(t, str):
        return t
    try:
        return TIMESTAMP_TYPE_NAMES[t]
    except KeyError:
        raise LiteEncodingError(f"unknown Kafka timestamp type {t}") from None


def _header_bytes(value: HeaderValue, nested_null: NestedNull) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, BYTES_TYPES):
        return bytes(value)
    if value.value is None:
        return None
    return encode_to_bytes(value.schema, value.value, nested_null=nested_null)


def sink_message(record: LiteSinkRecord, *, nested_null: NestedNull = "error") -> LiteSinkResult:
    """Google's ``PubSubLiteSinkTask.put`` for one record.

    Attribute order: headers in record order (values of a repeated name grouped under its first
    occurrence), then topic, partition, offset and event-time type. A header named like one of
    those attributes adds to its values, as Java's multimap does.
    """
    key = b""
    if record.key is not None and record.key.value is not None:
        key = encode_to_bytes(record.key.schema, record.key.value, nested_null=nested_null)
    data = b""
    if record.value is not None and record.value.value is not None:
        data = encode_to_bytes(record.value.schema, record.value.value, nested_null=nested_null)
    attributes: dict[str, list[bytes]] = {}
    skipped = 0
    for name, header in record.headers:
        encoded = _header_bytes(header, nested_null)
        if encoded is None:
            skipped += 1
            continue
        attributes.setdefault(name, []).append(encoded)
    if record.topic is not None:
        attributes.setdefault(KAFKA_TOPIC_ATTRIBUTE, []).append(record.topic.encode("utf-8"))
    if record.partition is not None:
        attributes.setdefault(KAFKA_PARTITION_ATTRIBUTE, []).append(str(record.partition).encode("ascii"))
        attributes.setdefault(KAFKA_OFFSET_ATTRIBUTE, []).append(str(record.offset).encode("ascii"))
    event_time_ms = None
    if record.timestamp_ms is not None and record.timestamp_ms >= 0:
        if record.timestamp_ms > MAX_TIMESTAMP_MS:
            raise LiteEncodingError(f"timestamp {record.timestamp_ms} ms is after year 9999")
        event_time_ms = record.timestamp_ms
        type_name = timestamp_type_name(record.timestamp_type)
        attributes.setdefault(KAFKA_EVENT_TIME_TYPE_ATTRIBUTE, []).append(type_name.encode("utf-8"))
    message = LiteMessage(
        key=key,
        data=data,
        attributes={k: tuple(v) for k, v in attributes.items()},
        event_time_ms=event_time_ms,
    )
    return LiteSinkResult(message, skipped)
