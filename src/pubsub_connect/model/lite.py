"""Pub/Sub Lite data model: Kafka record → Lite message (sink) and Lite message → Kafka record (source).

Why this exists: Google's ``PubSubLiteSinkConnector`` / ``PubSubLiteSourceConnector`` define how
Connect values become Lite bytes and back (README "Pub/Sub Lite turn-down and migration"). This module
states that mapping once, as pure functions, so the convert stages of both Lite pipelines and
their tests share it. No I/O; protobuf message classes are only *built* here.

Per-record reference functions:

* :func:`encode_to_bytes` — a key, value or header value by its Connect schema (``Schemas.
  encodeToBytes``): null schema → STRING; BYTES unchanged; STRING UTF-8; integers
  ``Long.toString``; floats ``Double.toString`` of the value widened to double (FLOAT32 is first
  rounded to float32, so 1.1 → ``1.100000023841858``); booleans ``true``/``false``;
  ARRAY/MAP/STRUCT → a serialized ``google.protobuf.Value`` (:func:`encode_value`).
* :func:`sink_message` — a :class:`LiteSinkRecord` (converted Kafka record) → :class:`LiteMessage`
  with the ``x-goog-pubsublite-source-kafka-*`` attributes and ``event_time``.
* :func:`source_record` — a :class:`LiteReceived` (SequencedMessage) → :class:`KafkaSourceRecord`,
  serialized the way Kafka Connect's worker serializes what Google's source task returns
  (:class:`LiteSourceConverters`: ``key.converter`` on an OPTIONAL_BYTES key, ``value.converter``
  on a BYTES value, ``header.converter`` on BYTES headers: Base64 text by default).
* :class:`KafkaPartitioner` — same non-empty key → same Kafka partition (murmur2, like Kafka's
  Java producer), null keys round-robin.

Arrow-batched versions for the convert stages: :func:`sink_outbox_batch` (bronze Kafka rows →
Lite outbox) and :func:`kafka_outbox_batch` (Lite bronze → Kafka outbox), with the table schemas
:data:`LITE_OUTBOX_SCHEMA`, :data:`LITE_BRONZE_SCHEMA`, :data:`KAFKA_OUTBOX_SCHEMA` (and Spark
DDL strings); :func:`bronze_batch` and :func:`outbox_messages` serve the pull and publish stages.

Decisions where Google's connector crashes or is silent (so the pipeline neither stops nor
publishes garbage):

* A null inside an ARRAY/MAP/STRUCT (Java: ``NullPointerException``, the task dies) is a
  :class:`LiteEncodingError` → dead-letter row, unless ``nested_null="null_value"`` is passed,
  which encodes it as ``NullValue``.
* A header whose value is null (Java: exception) is skipped and counted
  (:attr:`LiteSinkResult.skipped_headers`), like the Pub/Sub sink does.
* A schemaless value that is not a string is rendered with
  :func:`pubsub_connect.model.converters.java_text` (the project's ``toString``: numbers as Java
  prints them, containers as compact JSON); a schemaless ``bytes`` value is kept unchanged
  (Java would print an identity hash such as ``[B@1b6d3586``).
* Kafka timestamps < 0 mean "no timestamp" (Connect turns ``-1`` into null).
* Serialized ``Value`` bytes use deterministic (sorted-key) map order; Java's order differs, so
  compare such payloads parsed, never as raw bytes.
* Source with ``StringConverter`` for keys or values: Java writes ``byte[].toString()`` (an
  identity hash such as ``[B@6d06d69c``: the data is lost); ours writes the bytes as UTF-8 text.
  The number and boolean converters, which fail every record in the original, are refused at
  start-up (:meth:`LiteSourceConverters.check`).
"""

from __future__ import annotations

import base64
import functools
import struct as _struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from google.protobuf import struct_pb2

from pubsub_connect.model.connect import DataError, Schema, SchemaAndValue, Struct, Type
from pubsub_connect.model.converters import (
    BYTE_ARRAY_CONVERTER,
    SIMPLE_HEADER_CONVERTER,
    JsonConverter,
    StringConverter,
    java_text,
    shared_converter,
    utf8,
)
from pubsub_connect.model.javatext import java_double_to_string, to_float32

if TYPE_CHECKING:
    import pyarrow as pa

    from pubsub_connect.model.converters import Converter

KAFKA_TOPIC_ATTRIBUTE = "x-goog-pubsublite-source-kafka-topic"
KAFKA_PARTITION_ATTRIBUTE = "x-goog-pubsublite-source-kafka-partition"
KAFKA_OFFSET_ATTRIBUTE = "x-goog-pubsublite-source-kafka-offset"
KAFKA_EVENT_TIME_TYPE_ATTRIBUTE = "x-goog-pubsublite-source-kafka-event-time-type"

#: Kafka's ``TimestampType`` ids (as in Spark's ``timestampType`` column) and their ``name``.
TIMESTAMP_TYPE_NAMES: dict[int, str] = {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}

_INT_RANGE = {
    Type.INT8: (-(2**7), 2**7 - 1),
    Type.INT16: (-(2**15), 2**15 - 1),
    Type.INT32: (-(2**31), 2**31 - 1),
    Type.INT64: (-(2**63), 2**63 - 1),
}
_BYTES_TYPES = (bytes, bytearray, memoryview)
#: ``Timestamps.fromMillis`` rejects instants after 9999-12-31T23:59:59.999Z.
_MAX_TIMESTAMP_MS = 253_402_300_799_999

NestedNull = Literal["error", "null_value"]


class LiteEncodingError(DataError):
    """A Connect value that Google's Lite sink cannot encode (complex map key, nested null, …)."""

    error_class = "LiteEncodingError"


# ----------------------------------------------------------------------------------------------
# Sink: Connect values → bytes
# ----------------------------------------------------------------------------------------------


def _type_of(schema: Schema | None) -> Type:
    """``safeSchemaType``: a missing schema is treated as STRING."""
    return Type.STRING if schema is None else schema.type


def _as_bytes(value: Any, where: str) -> bytes:
    if isinstance(value, _BYTES_TYPES):
        return bytes(value)
    raise LiteEncodingError(f"{where}: expected bytes for a BYTES schema, got {type(value).__name__}")


def _as_int(t: Type, value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise LiteEncodingError(f"{where}: expected an integer for {t.name}, got {value!r}")
    lo, hi = _INT_RANGE[t]
    if not lo <= value <= hi:
        raise LiteEncodingError(f"{where}: {value} is out of range for {t.name}")
    return value


def _as_double(t: Type, value: Any, where: str) -> float:
    """``((Number) x).doubleValue()``: FLOAT32 values are float32 first (Java ``Float``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LiteEncodingError(f"{where}: expected a number for {t.name}, got {type(value).__name__}")
    x = float(value)
    return to_float32(x) if t is Type.FLOAT32 else x


def _text(value: Any) -> str:
    """``object.toString()`` for STRING/BOOLEAN (and schemaless) values."""
    if isinstance(value, str):
        return value
    return java_text(None, value)


def string_rep(schema: Schema | None, value: Any, where: str = "value") -> str:
    """``Schemas.stringRep``: the text of a primitive (used for top-level values and map keys)."""
    t = _type_of(schema)
    if t.is_integer:
        return str(_as_int(t, value, where))
    if t.is_float:
        return java_double_to_string(_as_double(t, value, where))
    if t is Type.BOOLEAN:
        if isinstance(value, bool):
            return "true" if value else "false"
        return _text(value)
    if t is Type.STRING:
        return _text(value)
    if t is Type.BYTES:
        return base64.b64encode(_as_bytes(value, where)).decode("ascii")
    raise LiteEncodingError(f"{where}: cannot convert {t.name} to a string (map keys must be primitive)")


def encode_to_bytes(schema: Schema | None, value: Any, *, nested_null: NestedNull = "error") -> bytes:
    """``Schemas.encodeToBytes``: the bytes of a non-null key, value or header value."""
    if value is None:
        raise LiteEncodingError("a null value has no encoding (the record's key/data stay empty instead)")
    if schema is None and isinstance(value, _BYTES_TYPES):
        return bytes(value)  # see module docstring: keep schemaless bytes instead of "[B@…"
    t = _type_of(schema)
    if t is Type.BYTES:
        return _as_bytes(value, "value")
    if t.is_primitive:
        return utf8(string_rep(schema, value))  # copyFromUtf8: lone surrogates become "?"
    return encode_value(schema, value, nested_null=nested_null).SerializeToString(deterministic=True)


def encode_value(
    schema: Schema | None, value: Any, *, nested_null: NestedNull = "error", path: str = "value"
) -> struct_pb2.Value:
    """``Schemas.encode``: a Connect value as a ``google.protobuf.Value``.

    Numbers become doubles, BYTES base64 strings, MAP and STRUCT a ``Struct`` (map keys through
    :func:`string_rep`), ARRAY a ``ListValue``.
    """
    out = struct_pb2.Value()
    if value is None:
        if nested_null == "null_value":
            out.null_value = struct_pb2.NULL_VALUE
            return out
        raise LiteEncodingError(f"{path}: null values inside arrays, maps and structs cannot be encoded")
    t = _type_of(schema)
    if t.is_integer:
        out.number_value = float(_as_int(t, value, path))
    elif t.is_float:
        out.number_value = _as_double(t, value, path)
    elif t is Type.BOOLEAN:
        if not isinstance(value, bool):
            raise LiteEncodingError(f"{path}: expected a boolean, got {type(value).__name__}")
        out.bool_value = value
    elif t is Type.STRING:
        out.string_value = _text(value)
    elif t is Type.BYTES:
        out.string_value = base64.b64encode(_as_bytes(value, path)).decode("ascii")
    elif t is Type.ARRAY:
        assert schema is not None
        if not isinstance(value, (list, tuple)):
            raise LiteEncodingError(f"{path}: expected a list for ARRAY, got {type(value).__name__}")
        out.list_value.SetInParent()  # an empty list is still a list (Java sets the kind)
        items = out.list_value.values
        for i, item in enumerate(value):
            encoded = encode_value(schema.value_schema, item, nested_null=nested_null, path=f"{path}[{i}]")
            items.add().CopyFrom(encoded)
    elif t is Type.MAP:
        assert schema is not None
        fields = out.struct_value.fields
        out.struct_value.SetInParent()
        for key, item in _map_items(value, path):
            if key is None:
                raise LiteEncodingError(f"{path}: null map keys cannot be encoded")
            name = string_rep(schema.key_schema, key, f"{path} key")
            encoded = encode_value(schema.value_schema, item, nested_null=nested_null, path=f"{path}.{name}")
            fields[name].CopyFrom(encoded)
    else:  # STRUCT
        assert schema is not None
        if not isinstance(value, Struct):
            raise LiteEncodingError(f"{path}: expected a Struct, got {type(value).__name__}")
        out.struct_value.SetInParent()
        for f in schema.fields:
            out.struct_value.fields[f.name].CopyFrom(
                encode_value(f.schema, value.get(f.name), nested_null=nested_null, path=f"{path}.{f.name}")
            )
    return out


def _map_items(value: Any, path: str) -> Iterable[tuple[Any, Any]]:
    if isinstance(value, Mapping):
        return value.items()
    if isinstance(value, (list, tuple)):  # list of (key, value) pairs when keys are unhashable
        return value
    raise LiteEncodingError(f"{path}: expected a map, got {type(value).__name__}")


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


def _timestamp_type_name(t: int | str) -> str:
    if isinstance(t, str):
        return t
    try:
        return TIMESTAMP_TYPE_NAMES[t]
    except KeyError:
        raise LiteEncodingError(f"unknown Kafka timestamp type {t}") from None


def _header_bytes(value: HeaderValue, nested_null: NestedNull) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, _BYTES_TYPES):
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
        if record.timestamp_ms > _MAX_TIMESTAMP_MS:
            raise LiteEncodingError(f"timestamp {record.timestamp_ms} ms is after year 9999")
        event_time_ms = record.timestamp_ms
        type_name = _timestamp_type_name(record.timestamp_type)
        attributes.setdefault(KAFKA_EVENT_TIME_TYPE_ATTRIBUTE, []).append(type_name.encode("utf-8"))
    message = LiteMessage(
        key=key,
        data=data,
        attributes={k: tuple(v) for k, v in attributes.items()},
        event_time_ms=event_time_ms,
    )
    return LiteSinkResult(message, skipped)


# ----------------------------------------------------------------------------------------------
# Source: Lite message → Kafka record
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LiteReceived:
    """A ``SequencedMessage`` from a Lite partition, times in nanoseconds since the epoch."""

    partition: int
    offset: int
    publish_time_ns: int
    key: bytes = b""
    data: bytes = b""
    attributes: Mapping[str, Sequence[bytes]] = field(default_factory=dict)
    event_time_ns: int | None = None

    @classmethod
    def from_proto(cls, partition: int, sequenced: Any) -> LiteReceived:
        """From a raw or proto-plus ``SequencedMessage``; attributes sorted by name.

        Protobuf maps have no order on the wire, so sorting is the only reproducible choice.
        """
        pb = getattr(sequenced, "_pb", sequenced)
        msg = pb.message
        event = None
        if msg.HasField("event_time"):
            event = msg.event_time.seconds * 1_000_000_000 + msg.event_time.nanos
        return cls(
            partition=partition,
            offset=pb.cursor.offset,
            publish_time_ns=pb.publish_time.seconds * 1_000_000_000 + pb.publish_time.nanos,
            key=bytes(msg.key),
            data=bytes(msg.data),
            attributes={name: tuple(msg.attributes[name].values) for name in sorted(msg.attributes)},
            event_time_ns=event,
        )


@dataclass(frozen=True)
class KafkaSourceRecord:
    """What the source produces to Kafka, plus the Lite coordinates it came from."""

    topic: str
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int
    lite_partition: int
    lite_offset: int
    #: None = let the producer's partitioner decide (see :class:`KafkaPartitioner`).
    partition: int | None = None


#: The header converters the Lite source implements: Connect's default writes a BYTES header as
#: Base64 text, ByteArrayConverter keeps the bytes.
LITE_SOURCE_HEADER_CONVERTERS = (SIMPLE_HEADER_CONVERTER, BYTE_ARRAY_CONVERTER)
#: The schemas Google's source task gives the key (``OPTIONAL_BYTES_SCHEMA``) and the value
#: (``BYTES_SCHEMA``) of each record: the worker's converters serialize them with these.
SOURCE_KEY_SCHEMA = Schema(Type.BYTES, optional=True)
SOURCE_VALUE_SCHEMA = Schema(Type.BYTES)
#: Converters whose output for a BYTES key or value is usable: ByteArrayConverter (the bytes),
#: JsonConverter (Base64 in JSON, like the original) and StringConverter (the bytes as UTF-8
#: text; Java prints an identity hash such as ``[B@1b6d3586`` instead). The number and boolean
#: converters cannot serialize bytes at all (the original fails every record).
LITE_SOURCE_CONVERTERS = (BYTE_ARRAY_CONVERTER, StringConverter.class_name, JsonConverter.class_name)


class UnsupportedLiteSourceConverter(ValueError):
    """A ``key.converter`` / ``value.converter`` / ``header.converter`` the Lite source cannot
    use: a configuration error reported at start-up, not per record."""


@dataclass(frozen=True)
class LiteSourceConverters:
    """How the Lite source serializes keys, values and headers, as Kafka Connect's worker does
    with what Google's source task returns (``key.converter``, ``value.converter``,
    ``header.converter``). Primitives only: shipped to Spark executors."""

    key_converter: str = BYTE_ARRAY_CONVERTER
    key_schemas_enable: bool = True
    value_converter: str = BYTE_ARRAY_CONVERTER
    value_schemas_enable: bool = True
    header_converter: str = SIMPLE_HEADER_CONVERTER

    def check(self) -> None:
        """Raise :class:`UnsupportedLiteSourceConverter` for a converter that cannot write bytes."""
        for what, name in (("key.converter", self.key_converter), ("value.converter", self.value_converter)):
            if name not in LITE_SOURCE_CONVERTERS:
                raise UnsupportedLiteSourceConverter(
                    f"{what}={name} cannot serialize the bytes keys and values of Pub/Sub Lite messages "
                    f"(Google's connector fails every record with it); use one of {', '.join(LITE_SOURCE_CONVERTERS)}")
        if self.header_converter not in LITE_SOURCE_HEADER_CONVERTERS:
            raise UnsupportedLiteSourceConverter(
                f"header.converter={self.header_converter} is not supported by the Lite source; use one of "
                f"{', '.join(LITE_SOURCE_HEADER_CONVERTERS)}")

    @property
    def raw_keys(self) -> bool:
        return self.key_converter == BYTE_ARRAY_CONVERTER

    @property
    def raw_values(self) -> bool:
        return self.value_converter == BYTE_ARRAY_CONVERTER

    @property
    def raw_headers(self) -> bool:
        return self.header_converter == BYTE_ARRAY_CONVERTER

    def key(self, key: bytes | None) -> bytes | None:
        """The Kafka key bytes for a Lite key already mapped to None when empty."""
        return shared_converter(self.key_converter, self.key_schemas_enable).from_connect(SOURCE_KEY_SCHEMA, key)

    def value(self, data: bytes) -> bytes | None:
        return shared_converter(self.value_converter, self.value_schemas_enable).from_connect(SOURCE_VALUE_SCHEMA, data)

    def header(self, value: bytes) -> bytes:
        """``SimpleHeaderConverter`` prints a BYTES header as Base64 text (``Values.convertToString``)."""
        return value if self.raw_headers else base64.b64encode(value)


#: What an unconfigured worker uses: ByteArrayConverter for keys and values, SimpleHeaderConverter.
DEFAULT_SOURCE_CONVERTERS = LiteSourceConverters()


def source_record(message: LiteReceived, kafka_topic: str,
                  converters: LiteSourceConverters = DEFAULT_SOURCE_CONVERTERS) -> KafkaSourceRecord:
    """Google's Lite source mapping: empty key → null, each attribute value → one bytes header,
    timestamp = event time if present else publish time (milliseconds, rounded down); then the
    worker's converters: key, value and header values serialized by ``converters``."""
    time_ns = message.event_time_ns if message.event_time_ns is not None else message.publish_time_ns
    headers = tuple((name, converters.header(bytes(v))) for name, values in message.attributes.items() for v in values)
    return KafkaSourceRecord(
        topic=kafka_topic,
        key=converters.key(message.key or None),
        value=converters.value(message.data) or b"",
        headers=headers,
        timestamp_ms=time_ns // 1_000_000,
        lite_partition=message.partition,
        lite_offset=message.offset,
    )


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (the Java producer's key hash), as a signed 32-bit int."""
    mask = 0xFFFFFFFF
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    whole = length - length % 4
    for (k,) in _struct.iter_unpack("<I", data[:whole]):
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    tail = data[whole:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_partition_for_key(key: bytes, num_partitions: int) -> int:
    """The Java producer's partition for a keyed record: ``toPositive(murmur2(key)) % n``."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class KafkaPartitioner:
    """Explicit Kafka partitions for source records: same key → same partition, null keys
    round-robin (from ``start``, so a pipeline can continue the sequence across batches)."""

    def __init__(self, num_partitions: int, start: int = 0) -> None:
        if num_partitions < 1:
            raise ValueError("num_partitions must be at least 1")
        self.num_partitions = num_partitions
        self.counter = start

    def partition(self, key: bytes | None) -> int:
        if key:
            return kafka_partition_for_key(key, self.num_partitions)
        p = self.counter % self.num_partitions
        self.counter += 1
        return p


# ----------------------------------------------------------------------------------------------
# Arrow-batched convert stages
# ----------------------------------------------------------------------------------------------


def _pa() -> Any:
    import pyarrow as pa

    return pa


def _attributes_type() -> Any:
    pa = _pa()
    return pa.map_(pa.string(), pa.list_(pa.binary()))


@functools.cache
def _schemas() -> tuple[Any, Any, Any]:
    pa = _pa()
    ts = pa.timestamp("us", tz="UTC")
    outbox = pa.schema(
        [
            pa.field("key", pa.binary(), nullable=False),
            pa.field("data", pa.binary(), nullable=False),
            pa.field("attributes", _attributes_type()),
            pa.field("event_time", ts),
            pa.field("topic", pa.string()),  # Kafka source coordinates (tracing, ordering mode KAFKA)
            pa.field("partition", pa.int32()),
            pa.field("offset", pa.int64()),
        ]
    )
    bronze = pa.schema(
        [
            pa.field("partition", pa.int64(), nullable=False),  # Lite partition and offset
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("key", pa.binary(), nullable=False),
            pa.field("data", pa.binary(), nullable=False),
            pa.field("attributes", _attributes_type()),
            pa.field("event_time", ts),
            pa.field("publish_time", ts, nullable=False),
        ]
    )
    header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
    kafka_outbox = pa.schema(
        [
            pa.field("key", pa.binary()),
            pa.field("value", pa.binary()),
            pa.field("headers", pa.list_(header)),
            pa.field("partition", pa.int32()),
            pa.field("timestamp", ts),
            pa.field("lite_partition", pa.int64(), nullable=False),
            pa.field("lite_offset", pa.int64(), nullable=False),
        ]
    )
    return outbox, bronze, kafka_outbox


def __getattr__(name: str) -> Any:
    """Arrow schemas are built on first use so importing this module does not import pyarrow."""
    index = {"LITE_OUTBOX_SCHEMA": 0, "LITE_BRONZE_SCHEMA": 1, "KAFKA_OUTBOX_SCHEMA": 2}.get(name)
    if index is None:
        raise AttributeError(name)
    return _schemas()[index]


#: Spark DDL of the tables (same columns as the Arrow schemas).
LITE_OUTBOX_DDL = (
    "key binary, data binary, attributes map<string,array<binary>>, event_time timestamp, "
    "topic string, partition int, offset bigint"
)
LITE_BRONZE_DDL = (
    "partition bigint, offset bigint, key binary, data binary, attributes map<string,array<binary>>, "
    "event_time timestamp, publish_time timestamp"
)
KAFKA_OUTBOX_DDL = (
    "key binary, value binary, headers array<struct<key:string,value:binary>>, partition int, "
    "timestamp timestamp, lite_partition bigint, lite_offset bigint"
)


@dataclass(frozen=True)
class RowFailure:
    """A bronze row the convert stage could not map (becomes a dead-letter row)."""

    index: int
    error: DataError


def sink_outbox_batch(
    bronze: pa.RecordBatch | pa.Table,
    *,
    key_converter: Converter | None = None,
    value_converter: Converter | None = None,
    nested_null: NestedNull = "error",
) -> tuple[pa.RecordBatch, list[RowFailure], int]:
    """Convert stage of the Lite sink: Kafka bronze rows → Lite outbox rows (same result as
    :func:`sink_message` per row).

    ``bronze`` has Spark's Kafka source columns (``key, value, topic, partition, offset,
    timestamp, timestampType, headers``). A converter of None means ``ByteArrayConverter``: the
    column is used as is, without a Python loop. Header values are raw bytes (BYTES). Returns the
    outbox batch (failed rows left out), the failures (by row index in ``bronze``) and the number
    of skipped null-valued headers.
    """
    pa = _pa()
    cols = _columns(bronze)
    n = len(cols["key"])
    failures: dict[int, DataError] = {}
    keys = _encoded_column(cols["key"], key_converter, nested_null, failures)
    datas = _encoded_column(cols["value"], value_converter, nested_null, failures)
    attributes, event_time, skipped = _sink_attributes(cols, n, failures)
    schema = _schemas()[0]
    batch = pa.RecordBatch.from_arrays(
        [keys, datas, attributes, event_time, cols["topic"].cast(pa.string()),
         cols["partition"].cast(pa.int32()), cols["offset"].cast(pa.int64())],
        schema=schema,
    )
    if failures:
        batch = batch.filter(pa.array([i not in failures for i in range(n)]))
    return batch, [RowFailure(i, e) for i, e in sorted(failures.items())], skipped


def _encoded_column(
    column: Any, converter: Converter | None, nested_null: NestedNull, failures: dict[int, DataError]
) -> Any:
    """Key or value column → encoded bytes (b"" for null), recording per-row failures."""
    pa = _pa()
    if converter is None:
        return column.cast(pa.binary()).fill_null(b"")
    out: list[bytes] = []
    for i, raw in enumerate(column.to_pylist()):
        encoded = b""
        if raw is not None:
            try:
                converted = converter.to_connect(bytes(raw))
                if converted.value is not None:
                    encoded = encode_to_bytes(converted.schema, converted.value, nested_null=nested_null)
            except DataError as e:
                failures.setdefault(i, e)
        out.append(encoded)
    return pa.array(out, pa.binary())


def _sink_attributes(cols: dict[str, Any], n: int, failures: dict[int, DataError]) -> tuple[Any, Any, int]:
    """Attributes (headers, then the Kafka coordinates and event-time type) and event times.

    Built as flat key/value arrays plus offsets: far cheaper than converting nested Python lists.
    """
    pa = _pa()
    headers = cols["headers"].to_pylist() if "headers" in cols else [None] * n
    topics = cols["topic"].to_pylist()
    partitions = cols["partition"].to_pylist()
    offsets = cols["offset"].to_pylist()
    stamps = cols["timestamp"].cast(pa.int64()).to_pylist()  # µs since the epoch
    types = cols["timestampType"].to_pylist() if "timestampType" in cols else [0] * n
    topic_attr, partition_attr = KAFKA_TOPIC_ATTRIBUTE, KAFKA_PARTITION_ATTRIBUTE
    offset_attr, type_attr = KAFKA_OFFSET_ATTRIBUTE, KAFKA_EVENT_TIME_TYPE_ATTRIBUTE
    entry_keys: list[str] = []
    values: list[bytes] = []
    value_offsets = [0]
    entry_offsets = [0]
    event_us: list[int | None] = []
    skipped = 0
    for i in range(n):
        groups: dict[str, list[bytes]] = {}
        for header in headers[i] or ():
            value = header["value"]
            if value is None:
                skipped += 1
            else:
                groups.setdefault(header["key"], []).append(value)
        if topics[i] is not None:
            groups.setdefault(topic_attr, []).append(topics[i].encode("utf-8"))
        if partitions[i] is not None:
            groups.setdefault(partition_attr, []).append(str(partitions[i]).encode("ascii"))
            groups.setdefault(offset_attr, []).append(str(offsets[i] or 0).encode("ascii"))
        event = None
        if stamps[i] is not None and stamps[i] >= 0:
            ms = stamps[i] // 1000
            try:
                if ms > _MAX_TIMESTAMP_MS:
                    raise LiteEncodingError(f"timestamp {ms} ms is after year 9999")
                name = _timestamp_type_name(types[i] if types[i] is not None else 0)
            except DataError as e:
                failures.setdefault(i, e)
            else:
                groups.setdefault(type_attr, []).append(name.encode("utf-8"))
                event = ms * 1000
        event_us.append(event)
        for name, vals in groups.items():
            entry_keys.append(name)
            values.extend(vals)
            value_offsets.append(len(values))
        entry_offsets.append(len(entry_keys))
    items = pa.ListArray.from_arrays(pa.array(value_offsets, pa.int32()), pa.array(values, pa.binary()))
    attributes = pa.MapArray.from_arrays(
        pa.array(entry_offsets, pa.int32()), pa.array(entry_keys, pa.string()), items, type=_attributes_type()
    )
    event_time = pa.array(event_us, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    return attributes, event_time, skipped


def outbox_messages(outbox: pa.RecordBatch | pa.Table) -> Iterator[tuple[int | None, LiteMessage]]:
    """Publish stage helper: ``(kafka partition, LiteMessage)`` for each Lite outbox row."""
    pa = _pa()
    cols = _columns(outbox)
    keys = cols["key"].to_pylist()
    datas = cols["data"].to_pylist()
    attributes = cols["attributes"].to_pylist()
    events = cols["event_time"].cast(pa.int64()).to_pylist()  # µs, no datetime objects
    partitions = cols["partition"].to_pylist()
    for key, data, attrs, event, partition in zip(keys, datas, attributes, events, partitions, strict=True):
        yield (
            partition,
            LiteMessage(
                key=key or b"",
                data=data or b"",
                attributes={k: tuple(v) for k, v in attrs or ()},
                event_time_ms=None if event is None else event // 1000,
            ),
        )


def bronze_batch(messages: Iterable[LiteReceived]) -> pa.RecordBatch:
    """Pull stage helper: received Lite messages → Lite bronze rows (times truncated to µs)."""
    pa = _pa()
    schema = _schemas()[1]
    cols: dict[str, list[Any]] = {name: [] for name in schema.names}
    for m in messages:
        cols["partition"].append(m.partition)
        cols["offset"].append(m.offset)
        cols["key"].append(m.key)
        cols["data"].append(m.data)
        cols["attributes"].append([(k, list(v)) for k, v in m.attributes.items()])
        cols["event_time"].append(None if m.event_time_ns is None else m.event_time_ns // 1000)
        cols["publish_time"].append(m.publish_time_ns // 1000)
    return pa.RecordBatch.from_arrays([pa.array(cols[f.name], type=f.type) for f in schema], schema=schema)


def kafka_outbox_batch(
    bronze: pa.RecordBatch | pa.Table, *, num_partitions: int | None = None, round_robin_start: int = 0,
    converters: LiteSourceConverters = DEFAULT_SOURCE_CONVERTERS,
) -> tuple[pa.RecordBatch, int]:
    """Convert stage of the Lite source, vectorized: Lite bronze → Kafka outbox.

    Empty keys become null; every attribute value becomes one header (name repeated for
    multi-valued attributes); ``timestamp`` = event time, else publish time, in whole
    milliseconds. Keys, values and header values are then serialized by ``converters`` (the
    byte-array ones leave the columns as they are; the others run per value). With
    ``num_partitions`` the Kafka partition is set explicitly (murmur2 of the serialized key, as
    the producer hashes it; null keys round-robin from ``round_robin_start``); without it, it
    is left null for the producer's partitioner. Returns the batch and the next round-robin counter.
    """
    import numpy as np
    import pyarrow.compute as pc

    pa = _pa()
    cols = _columns(bronze)
    n = len(cols["key"])
    key = cols["key"]
    key = pc.if_else(pc.equal(pc.binary_length(key), 0), pa.scalar(None, pa.binary()), key)
    if not converters.raw_keys:
        key = pa.array([converters.key(k) for k in key.to_pylist()], pa.binary())
    value = cols["data"]
    if not converters.raw_values:
        value = pa.array([converters.value(v) for v in value.to_pylist()], pa.binary())
    # event time, else publish time, floored to whole ms (Timestamps.toMillis rounds down)
    us = pc.coalesce(cols["event_time"], cols["publish_time"]).cast(pa.int64())
    ms = np.floor_divide(np.asarray(us.to_numpy(zero_copy_only=False), dtype=np.int64), 1000)
    timestamp = pa.array(ms * 1000, pa.int64()).cast(pa.timestamp("us", tz="UTC"))

    headers = _headers_from_attributes(cols["attributes"], n, np, converters)

    partition: Any
    counter = round_robin_start
    if num_partitions is None:
        partition = pa.nulls(n, pa.int32())
    else:
        partitioner = KafkaPartitioner(num_partitions, round_robin_start)
        partition = pa.array([partitioner.partition(k) for k in key.to_pylist()], pa.int32())
        counter = partitioner.counter
    schema = _schemas()[2]
    arrays = [
        key,
        value,
        headers,
        partition,
        timestamp,
        cols["partition"],
        cols["offset"],
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema), counter


def _columns(data: pa.RecordBatch | pa.Table) -> dict[str, Any]:
    """Columns as contiguous arrays, for a RecordBatch or a (possibly chunked) Table."""
    pa = _pa()
    if isinstance(data, pa.Table):
        return {name: data.column(name).combine_chunks() for name in data.column_names}
    return {name: data.column(name) for name in data.schema.names}


def _headers_from_attributes(attributes: Any, n: int, np: Any, converters: LiteSourceConverters) -> Any:
    """``map<string, list<binary>>`` → ``list<struct<key, value>>`` with one entry per value."""
    pa = _pa()
    header_type = _schemas()[2].field("headers").type
    if n == 0:
        return pa.array([], type=header_type)
    attributes = pa.concat_arrays([attributes])  # re-based offsets even if the input is a slice
    if attributes.null_count:
        attributes = attributes.fill_null(pa.scalar([], type=attributes.type))
    entry_offsets = np.asarray(attributes.offsets)  # rows → entries
    names = attributes.keys
    value_lists = attributes.items
    if value_lists.null_count:
        value_lists = value_lists.fill_null(pa.scalar([], type=value_lists.type))
    value_offsets = np.asarray(value_lists.offsets)  # entries → values
    per_entry = np.diff(value_offsets)
    header_names = names.take(pa.array(np.repeat(np.arange(len(names)), per_entry)))
    header_values = value_lists.flatten()
    if not converters.raw_headers:
        header_values = pa.array([converters.header(v) for v in header_values.to_pylist()], pa.binary())
    row_offsets = value_offsets[entry_offsets].astype(np.int32)
    structs = pa.StructArray.from_arrays([header_names, header_values], fields=list(header_type.value_type))
    return pa.ListArray.from_arrays(pa.array(row_offsets, pa.int32()), structs, type=header_type)

