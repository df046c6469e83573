"""Kafka record -> Cloud Pub/Sub message: the data model of Google's ``CloudPubSubSinkConnector``.

Two implementations of one mapping:

* :func:`map_record` / :func:`record_to_message` — the per-record *reference*, written to read like
  the original's behaviour ( ``CloudPubSubSinkTask.put``/``handleValue``).
* :func:`to_outbox` — the batch version used by the convert stage (bronze -> outbox). With
  byte/string/number converters every step is a Spark column expression (no Python per row);
  when a converter must parse (JSON, or a float key that needs Java's text) the rows go through
  ``mapInArrow`` in Arrow batches, each batch mapped with the reference code. Tests hold the two
  to identical output on the fixtures.

Decisions where the issue is silent or Java's behaviour is a crash (each keeps the pipeline from
publishing garbage or getting stuck on a message Pub/Sub will reject):

* Pub/Sub rejects a publish whose attributes break its limits, so besides the 10 MB size check
  (issue), an attribute key > 256 bytes, an attribute value > 1024 bytes, > 100 attributes from a
  struct/map, or an ordering key > 1024 bytes make the record a dead-letter row
  (:class:`PubsubLimitError`). Headers are different: the issue says over-limit headers are
  silently skipped, and they are (and counted).
* Size limit: the official Python publisher refuses (``MessageTooLargeError``) any message whose
  ``PublishRequest`` would exceed 10,000,000 bytes (``_SERVER_PUBLISH_MAX_BYTES``), so 10 MiB
  would let through messages the publisher then rejects. We bound the *payload* — data +
  attribute keys and values + ordering key, in UTF-8 bytes — by ``10,000,000 - 4,000``; 4,000
  bytes covers the request's protobuf framing for the largest topic path and 100 attributes.
* Null header values (Java: ``NullPointerException``) are skipped and counted like over-limit
  ones. Header values are published as their UTF-8 text (malformed bytes become U+FFFD, as in the
  original), not re-parsed by Connect's ``SimpleHeaderConverter``: the original publishes Java's
  ``toString`` of the parsed value (``1.50`` → ``1.5``, ``007`` → ``7``, ``{"a": 1}`` → ``{a=1}``,
  ``2024-02-29`` → a date in the JVM's time zone) and stops on a header whose text is ``null``.
* A MAP entry with a null value is skipped (like a null optional struct field); a null map key or
  a null array element is an :class:`UnsupportedValueError` (Java: ``NullPointerException``).
* A record whose data would be empty *and* that has no attributes publishes nothing, like a null
  value: Pub/Sub rejects such a message (Java would crash the task on it).
* Kafka timestamps < 0 mean "no timestamp" (Connect turns ``-1`` into ``null``).
* Text of a BYTES key/field is its UTF-8 decoding with U+FFFD replacement, and arrays/maps render
  as compact JSON (see :func:`pubsub_connect.model.converters.java_text`).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from pubsub_connect.model.connect import DataError, Schema, Struct, Type
from pubsub_connect.model.converters import (
    BOOLEAN_CONVERTER,
    BYTE_ARRAY_CONVERTER,
    DEFAULT_CONVERTER,
    KNOWN_CONVERTERS,
    NUMBER_CONVERTER_TYPES,
    STRING_CONVERTER,
    Converter,
    dump_json,
    java_text,
    make_converter,
    to_float32,
    utf8,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

DEFAULT_MESSAGE_BODY_NAME = "cps_message_body"
ORDERING_KEY_SOURCES = ("none", "key", "partition")

#: Pub/Sub resource limits (https://cloud.google.com/pubsub/quotas#resource_limits).
MAX_ATTRIBUTES = 100
MAX_ATTRIBUTE_KEY_BYTES = 256
MAX_ATTRIBUTE_VALUE_BYTES = 1024
MAX_ORDERING_KEY_BYTES = 1024
#: The official publisher rejects a PublishRequest larger than this (google-cloud-pubsub
#: ``_SERVER_PUBLISH_MAX_BYTES``).
PUBLISH_REQUEST_MAX_BYTES = 10_000_000
#: Room for the request's protobuf framing: topic path (<= ~310 bytes), message and field tags and
#: lengths (<= ~20 bytes), and <= 9 bytes per attribute entry (<= 900 bytes).
FRAMING_RESERVE_BYTES = 4_000
#: Largest accepted data + attribute keys + attribute values + ordering key, in bytes.
MAX_MESSAGE_BYTES = PUBLISH_REQUEST_MAX_BYTES - FRAMING_RESERVE_BYTES

KEY_ATTRIBUTE = "key"
TOPIC_ATTRIBUTE = "kafka.topic"
PARTITION_ATTRIBUTE = "kafka.partition"
OFFSET_ATTRIBUTE = "kafka.offset"
TIMESTAMP_ATTRIBUTE = "kafka.timestamp"

#: Column contract of the outbox rows :func:`to_outbox` returns (``skipped_headers int`` appended
#: when asked for).
OUTBOX_DDL = (
    "data binary, attributes map<string,string>, ordering_key string, topic string, partition int, "
    "offset long, key binary, value binary, error_class string, error_message string"
)

#: Converters whose output :func:`to_outbox` maps with Spark column expressions alone.
_COLUMN_KEY_CONVERTERS = (BYTE_ARRAY_CONVERTER, STRING_CONVERTER)
_COLUMN_VALUE_CONVERTERS = (
    BYTE_ARRAY_CONVERTER,
    STRING_CONVERTER,
    BOOLEAN_CONVERTER,
    *NUMBER_CONVERTER_TYPES,
)


class UnsupportedValueError(DataError):
    """A Connect value the Pub/Sub data model cannot express (nested struct/map, null in an array…)."""

    error_class = "UnsupportedValueError"


class PubsubLimitError(DataError):
    """The message would break a Pub/Sub limit (size, attribute count/size, ordering key size)."""

    error_class = "PubsubLimitError"


@dataclass(frozen=True)
class CpsSinkSettings:
    """The sink keys that shape messages, already typed (``config`` builds this from properties)."""

    message_body_name: str = DEFAULT_MESSAGE_BODY_NAME
    metadata_publish: bool = False
    headers_publish: bool = False
    ordering_key_source: str = "none"
    key_converter: str = DEFAULT_CONVERTER
    value_converter: str = DEFAULT_CONVERTER
    key_schemas_enable: bool = True
    value_schemas_enable: bool = True

    def __post_init__(self) -> None:
        if self.ordering_key_source not in ORDERING_KEY_SOURCES:
            raise ValueError(
                f"orderingKeySource must be one of {', '.join(ORDERING_KEY_SOURCES)}, got {self.ordering_key_source!r}"
            )
        for name in (self.key_converter, self.value_converter):
            if name not in KNOWN_CONVERTERS:
                raise ValueError(f"unsupported converter {name!r}; supported: {', '.join(KNOWN_CONVERTERS)}")


@dataclass(frozen=True)
class KafkaRecord:
    """One Kafka record as the sink sees it (a bronze row)."""

    key: bytes | None
    value: bytes | None
    topic: str = ""
    partition: int = 0
    offset: int = 0
    timestamp_ms: int | None = None
    headers: Sequence[tuple[str, bytes | None]] = field(default_factory=tuple)


@dataclass(frozen=True)
class PubsubMessage:
    """What gets published: ``ordering_key`` is ``""`` when none is set."""

    data: bytes
    attributes: dict[str, str]
    ordering_key: str = ""


@dataclass(frozen=True)
class SinkResult:
    """A mapped record: ``message`` is None when there is nothing to publish."""

    message: PubsubMessage | None
    skipped_headers: int = 0


# --------------------------------------------------------------------------------------------
# Reference implementation
# --------------------------------------------------------------------------------------------


def _quote(name: str) -> str:
    """An attribute name for a one-line error message (JSON-quoted, shortened)."""
    return json.dumps(name if len(name) <= 64 else name[:64] + "...", ensure_ascii=False)


def encode_body(schema: Schema | None, value: Any, body_name: str, attributes: dict[str, str] | None) -> bytes | None:
    """``handleValue``: the message body of a Connect value; STRUCT/MAP entries go to ``attributes``.

    Returns None for a null value (nothing to put in the body).
    """
    if value is None:
        return None
    if schema is None:
        if isinstance(value, Struct):
            schema = value.schema
        elif isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        elif isinstance(value, (dict, list, tuple)):
            # Deliberately compact JSON, not Java's ``{a=1}`` Map.toString (reported as a bug).
            return utf8(dump_json(None, value))
        else:
            return utf8(java_text(None, value))
    t = schema.type
    if t.is_integer:
        return _int_bytes(t, value)
    if t is Type.FLOAT32:
        return struct.pack(">f", to_float32(float(value)))
    if t is Type.FLOAT64:
        return struct.pack(">d", float(value))
    if t is Type.BOOLEAN:
        return b"\x01" if value else b"\x00"
    if t is Type.STRING:
        return utf8(value if isinstance(value, str) else java_text(schema, value))
    if t is Type.BYTES:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise UnsupportedValueError(f"unexpected {type(value).__name__} value for a BYTES schema")
        return bytes(value)
    if t is Type.STRUCT:
        return _struct_body(schema, value, body_name, attributes)
    if t is Type.MAP:
        return _map_body(schema, value, body_name, attributes)
    return _array_body(schema, value, body_name)


def _int_bytes(t: Type, value: Any) -> bytes:
    width = {Type.INT8: 1, Type.INT16: 2, Type.INT32: 4, Type.INT64: 8}[t]
    try:
        return int(value).to_bytes(width, "big", signed=True)
    except OverflowError:
        raise UnsupportedValueError(f"{value} is out of range for {t.value}") from None


def _struct_body(schema: Schema, value: Any, body_name: str, attributes: dict[str, str] | None) -> bytes:
    if not isinstance(value, Struct):
        raise UnsupportedValueError(f"unexpected {type(value).__name__} value for a STRUCT schema")
    body: bytes | None = None
    for f in schema.fields:
        # Checked before the null test, like Java: a nested STRUCT/MAP field is an error even when null.
        if f.schema.type in (Type.MAP, Type.STRUCT):
            raise UnsupportedValueError(
                f"struct field {_quote(f.name)} is a nested {f.schema.type.value.upper()}; "
                "Pub/Sub attributes cannot hold it"
            )
        field_value = value.get(f.name)
        if field_value is None:
            if not f.schema.optional:
                raise UnsupportedValueError(f"struct is missing required field {_quote(f.name)}")
            continue
        if f.name == body_name:
            body = encode_body(f.schema, field_value, body_name, None)
        elif attributes is not None:
            attributes[f.name] = java_text(f.schema, field_value)
    return b"" if body is None else body


def _map_body(schema: Schema, value: Any, body_name: str, attributes: dict[str, str] | None) -> bytes:
    items: Iterable[tuple[Any, Any]]
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = value
    else:
        raise UnsupportedValueError(f"unexpected {type(value).__name__} value for a MAP schema")
    body: bytes | None = None
    for k, v in items:
        if k is None:
            raise UnsupportedValueError("map has a null key")
        if v is None:
            continue
        if isinstance(k, str) and k == body_name:
            body = utf8(java_text(schema.value_schema, v))
        elif attributes is not None:
            attributes[java_text(schema.key_schema, k)] = java_text(schema.value_schema, v)
    return b"" if body is None else body


def _array_body(schema: Schema, value: Any, body_name: str) -> bytes:
    element = schema.value_schema
    if element is None or element.type in (Type.MAP, Type.STRUCT):
        kind = "untyped" if element is None else element.type.value.upper()
        raise UnsupportedValueError(f"arrays of {kind} are not supported; only arrays of primitives")
    if not isinstance(value, (list, tuple)):
        raise UnsupportedValueError(f"unexpected {type(value).__name__} value for an ARRAY schema")
    parts = []
    for item in value:
        if item is None:
            raise UnsupportedValueError("array has a null element")
        parts.append(encode_body(element, item, body_name, None) or b"")
    return b"".join(parts)


def header_text(data: bytes) -> str:
    """A header value as attribute text: its UTF-8 decoding, each malformed sequence replaced by
    U+FFFD, as Connect's header converters decode header bytes (the text itself is not re-parsed:
    see the module docstring)."""
    return data.decode("utf-8", errors="replace")


class CpsSinkMapper:
    """The reference mapping with its converters built once (they cache parsed JSON schemas)."""

    def __init__(self, settings: CpsSinkSettings) -> None:
        self.settings = settings
        self.key_converter: Converter = make_converter(settings.key_converter, settings.key_schemas_enable)
        self.value_converter: Converter = make_converter(settings.value_converter, settings.value_schemas_enable)

    def map(self, record: KafkaRecord) -> SinkResult:
        """Map one record; raises :class:`DataError` (a subclass) when it cannot be published."""
        return self.map_values(
            record.key,
            record.value,
            record.topic,
            record.partition,
            record.offset,
            record.timestamp_ms,
            record.headers,
        )

    def map_values(
        self,
        key: bytes | None,
        value: bytes | None,
        topic: str,
        partition: int,
        offset: int,
        timestamp_ms: int | None,
        headers: Iterable[tuple[str, bytes | None]] | None,
    ) -> SinkResult:
        s = self.settings
        # Connect converts the key first, then the value: the key's error wins when both are bad.
        try:
            key_sv = self.key_converter.to_connect(key)
        except DataError as e:
            raise type(e)(f"key: {e}") from None
        try:
            value_sv = self.value_converter.to_connect(value)
        except DataError as e:
            raise type(e)(f"value: {e}") from None

        attributes: dict[str, str] = {}
        try:
            data = encode_body(value_sv.schema, value_sv.value, s.message_body_name, attributes)
        except DataError as e:
            raise type(e)(f"value: {e}") from None

        key_text: str | None = None
        if key_sv.value is not None:
            key_text = java_text(key_sv.schema, key_sv.value)
            attributes[KEY_ATTRIBUTE] = key_text
        if s.metadata_publish:
            attributes[TOPIC_ATTRIBUTE] = topic
            attributes[PARTITION_ATTRIBUTE] = str(partition)
            attributes[OFFSET_ATTRIBUTE] = str(offset)
            if timestamp_ms is not None and timestamp_ms >= 0:
                attributes[TIMESTAMP_ATTRIBUTE] = str(timestamp_ms)
        skipped = 0
        if s.headers_publish and headers:
            for name, raw in headers:
                text = header_text(raw) if raw is not None else None
                if (
                    name is None
                    or text is None
                    or len(utf8(name)) > MAX_ATTRIBUTE_KEY_BYTES
                    or len(utf8(text)) > MAX_ATTRIBUTE_VALUE_BYTES
                    or (name not in attributes and len(attributes) >= MAX_ATTRIBUTES)
                ):
                    skipped += 1
                    continue
                attributes[name] = text

        if not data and not attributes:
            return SinkResult(None, skipped)

        if s.ordering_key_source == "key":
            ordering_key = key_text or ""
        elif s.ordering_key_source == "partition":
            ordering_key = str(partition)
        else:
            ordering_key = ""
        return SinkResult(_checked_message(data or b"", attributes, ordering_key), skipped)


def _checked_message(data: bytes, attributes: dict[str, str], ordering_key: str) -> PubsubMessage:
    """Apply Pub/Sub's limits; also make every string valid UTF-8 (lone surrogates -> ``?``)."""
    if len(attributes) > MAX_ATTRIBUTES:
        raise PubsubLimitError(f"message has {len(attributes)} attributes; Pub/Sub allows at most {MAX_ATTRIBUTES}")
    size = len(data)
    clean: dict[str, str] = {}
    for k, v in attributes.items():
        kb, vb = utf8(k), utf8(v)
        if len(kb) > MAX_ATTRIBUTE_KEY_BYTES:
            raise PubsubLimitError(
                f"attribute key {_quote(k)} is {len(kb)} bytes; Pub/Sub allows at most {MAX_ATTRIBUTE_KEY_BYTES}"
            )
        if len(vb) > MAX_ATTRIBUTE_VALUE_BYTES:
            raise PubsubLimitError(
                f"attribute {_quote(k)} value is {len(vb)} bytes; Pub/Sub allows at most {MAX_ATTRIBUTE_VALUE_BYTES}"
            )
        size += len(kb) + len(vb)
        clean[kb.decode()] = vb.decode()
    ob = utf8(ordering_key)
    if len(ob) > MAX_ORDERING_KEY_BYTES:
        raise PubsubLimitError(f"ordering key is {len(ob)} bytes; Pub/Sub allows at most {MAX_ORDERING_KEY_BYTES}")
    size += len(ob)
    if size > MAX_MESSAGE_BYTES:
        raise PubsubLimitError(
            f"message is {size} bytes (data, attribute keys and values, ordering key); "
            f"Pub/Sub accepts at most {MAX_MESSAGE_BYTES}"
        )
    return PubsubMessage(data, clean, ob.decode())


@lru_cache(maxsize=32)
def _mapper(settings: CpsSinkSettings) -> CpsSinkMapper:
    return CpsSinkMapper(settings)


def map_record(record: KafkaRecord, settings: CpsSinkSettings) -> SinkResult:
    """Map one record to its message (or None) and the number of headers left out."""
    return _mapper(settings).map(record)


def record_to_message(record: KafkaRecord, settings: CpsSinkSettings) -> PubsubMessage | None:
    """The per-record reference: the Pub/Sub message for ``record``, or None when there is
    nothing to publish. Raises :class:`DataError` (a subclass) for a dead-letter record."""
    return map_record(record, settings).message


# --------------------------------------------------------------------------------------------
# Batch implementation
# --------------------------------------------------------------------------------------------


def uses_column_path(settings: CpsSinkSettings) -> bool:
    """True when :func:`to_outbox` needs no Python at all (byte/string keys, non-JSON values)."""
    return settings.key_converter in _COLUMN_KEY_CONVERTERS and settings.value_converter in _COLUMN_VALUE_CONVERTERS


def outbox_ddl(with_skipped_headers: bool = False) -> str:
    return OUTBOX_DDL + (", skipped_headers int" if with_skipped_headers else "")


def converted_schema(with_skipped_headers: bool = False) -> StructType:
    """:data:`OUTBOX_DDL` as a ``StructType``: the outbox table's columns, then the raw key and
    value and why a row failed. Given to ``mapInArrow`` as a type, not DDL text, since a Spark
    Connect client (a declarative pipeline's) must ask the server to parse DDL, which a pipeline's
    query function may not do."""
    from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType

    from pubsub_connect.model.schemas import PUBSUB_OUTBOX

    fields = [*PUBSUB_OUTBOX.fields, StructField("key", BinaryType()), StructField("value", BinaryType()),
              StructField("error_class", StringType()), StructField("error_message", StringType())]
    if with_skipped_headers:
        fields.append(StructField("skipped_headers", IntegerType()))
    return StructType(fields)


def to_outbox(bronze_df: DataFrame, settings: CpsSinkSettings, *, with_skipped_headers: bool = False) -> DataFrame:
    """Bronze rows (Spark's Kafka source columns) -> outbox rows (:data:`OUTBOX_DDL`).

    Good rows: ``data``/``attributes``/``ordering_key`` set, ``key``/``value``/``error_*`` null.
    Bad rows: ``error_class``/``error_message`` set, ``key``/``value`` carry the raw bytes, the
    message columns null. Nothing to publish: message and error columns all null. ``topic``,
    ``partition``, ``offset`` are always the source coordinates.
    """
    if uses_column_path(settings):
        return _column_outbox(bronze_df, settings, with_skipped_headers)
    columns = ["key", "value", "topic", "partition", "offset", "timestamp"]
    if settings.headers_publish:
        columns.append("headers")
    from pubsub_connect.model.frames import map_in_arrow, schema_of
    from pubsub_connect.model.schemas import KAFKA_BRONZE

    return map_in_arrow(bronze_df.select(*columns), _ArrowMapper(settings, with_skipped_headers),
                        converted_schema(with_skipped_headers), schema_of(KAFKA_BRONZE, columns))


def _column_outbox(df: DataFrame, s: CpsSinkSettings, with_skipped_headers: bool) -> DataFrame:
    """The mapping as column expressions, in stages: each stage's columns are computed once and
    referenced by name later (one big expression would repeat sub-trees such as the attribute map
    many times, and Spark does not share work across lambda functions)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, BinaryType, StringType, StructField, StructType

    col = F.col
    key, value = col("key"), col("value")

    # Stage 1: key text, body, value-converter errors, attributes before headers.
    key_text = F.make_valid_utf8(key.cast("string"))
    value_error: Column = F.lit(None).cast("string")
    # Number converters produce the same big-endian bytes they read: their body is the input
    # once its length is right.
    body = (
        F.encode(F.make_valid_utf8(value.cast("string")), "UTF-8") if s.value_converter == STRING_CONVERTER else value
    )
    if s.value_converter in NUMBER_CONVERTER_TYPES:
        width = {Type.INT16: 2, Type.INT32: 4, Type.INT64: 8, Type.FLOAT32: 4, Type.FLOAT64: 8}[
            NUMBER_CONVERTER_TYPES[s.value_converter]
        ]
        short = s.value_converter.rsplit(".", 1)[-1]
        value_error = F.when(
            value.isNotNull() & (F.octet_length(value) != width),
            F.format_string(f"value: {short}: expected {width} bytes, got %d", F.octet_length(value)),
        )
    elif s.value_converter == BOOLEAN_CONVERTER:
        value_error = F.when(
            value.isNotNull() & (F.octet_length(value) != 1),
            F.format_string("value: BooleanConverter: expected 1 byte, got %d", F.octet_length(value)),
        ).when(
            value.isNotNull() & ~F.hex(value).isin("00", "01"),
            F.format_string("value: BooleanConverter: expected byte 00 or 01, got %s", F.lower(F.hex(value))),
        )

    def entry(name: str, text: Column) -> Column:
        return F.struct(F.lit(name).alias("key"), text.alias("value"))

    entries = [F.when(key.isNotNull(), entry(KEY_ATTRIBUTE, key_text))]
    if s.metadata_publish:
        ts_ms = F.unix_millis(col("timestamp"))
        entries += [
            entry(TOPIC_ATTRIBUTE, col("topic")),
            entry(PARTITION_ATTRIBUTE, col("partition").cast("string")),
            entry(OFFSET_ATTRIBUTE, col("offset").cast("string")),
            F.when(ts_ms.isNotNull() & (ts_ms >= 0), entry(TIMESTAMP_ATTRIBUTE, ts_ms.cast("string"))),
        ]
    stage1 = [
        col("topic"),
        col("partition").cast("int").alias("partition"),
        col("offset").cast("long").alias("offset"),
        key,
        value,
        key_text.alias("_key_text"),
        F.coalesce(body, F.expr("X''")).alias("_data"),
        value_error.alias("_value_error"),
        # key, then metadata: none of these repeats an earlier name, so no overwrite to handle
        F.map_from_entries(F.filter(F.array(*entries), lambda e: e.isNotNull())).alias("_base"),
    ]
    if s.headers_publish:
        header_type = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
        headers = F.coalesce(col("headers"), F.array().cast(header_type))
        stage1.append(F.size(headers).alias("_header_count"))
        # A header value's text is its UTF-8 decoding, each malformed byte sequence replaced by
        # U+FFFD (as Connect's header converters decode it); the size limit applies to that text.
        texts = F.transform(
            F.filter(headers, lambda h: h["key"].isNotNull() & h["value"].isNotNull()),
            lambda h: F.struct(h["key"].alias("key"), F.make_valid_utf8(h["value"].cast("string")).alias("value")),
        )
        stage1.append(
            F.filter(
                texts,
                lambda h: (
                    (F.octet_length(h["key"]) <= MAX_ATTRIBUTE_KEY_BYTES)
                    & (F.octet_length(h["value"]) <= MAX_ATTRIBUTE_VALUE_BYTES)
                ),
            ).alias("_valid")
        )
    staged = df.select(*stage1)

    # Stage 2: headers. The sequential rule (apply a header when its name is already an attribute
    # or while there are fewer than 100; later headers overwrite) as set logic: the applied names
    # are the attribute names that also appear in headers plus the first new header names that
    # fit under the cap, each taking the value of its last valid occurrence. Records without
    # valid headers (the common case) skip all of it: their ``_admitted`` is null.
    if s.headers_publish:
        base_keys = F.map_keys(col("_base"))
        header_keys = F.transform(col("_valid"), lambda h: h["key"])
        room = F.greatest(F.lit(MAX_ATTRIBUTES) - F.size(col("_base")), F.lit(0))
        staged = staged.withColumn(
            "_admitted",
            F.when(
                F.size(col("_valid")) > 0,
                F.concat(
                    F.filter(base_keys, lambda k: F.array_contains(header_keys, k)),
                    F.slice(F.array_except(header_keys, base_keys), F.lit(1), room),
                ),
            ),
        )
        admitted = col("_admitted")
        header_map = F.map_from_entries(
            F.transform(
                admitted,
                lambda k: F.struct(
                    k.alias("key"),
                    F.element_at(F.filter(col("_valid"), lambda h: h["key"] == k), -1)["value"].alias("value"),
                ),
            )
        )
        attributes = F.when(admitted.isNull(), col("_base")).otherwise(
            F.map_concat(F.map_filter(col("_base"), lambda k, v: ~F.array_contains(admitted, k)), header_map)
        )
        applied = F.size(F.filter(col("_valid"), lambda h: F.array_contains(admitted, h["key"])))
        skipped = col("_header_count") - F.when(admitted.isNull(), F.lit(0)).otherwise(applied)
    else:
        attributes = col("_base")
        skipped = F.lit(0)

    if s.ordering_key_source == "key":
        ordering = F.when(key.isNotNull() & (col("_key_text") != ""), col("_key_text")).otherwise(F.lit(""))
    elif s.ordering_key_source == "partition":
        ordering = col("partition").cast("string")
    else:
        ordering = F.lit("")
    staged = staged.select(
        "topic",
        "partition",
        "offset",
        "key",
        "value",
        "_data",
        "_value_error",
        attributes.alias("_attributes"),
        ordering.alias("_ordering"),
        skipped.cast("int").alias("_skipped"),
    )

    # Stage 3: nothing to publish, and Pub/Sub's limits. Only the "key" attribute can break one
    # here: metadata values are short, header names and values are filtered, and there are at
    # most 5 attributes besides the capped headers.
    data, attrs, ordering_col = col("_data"), col("_attributes"), col("_ordering")
    publishable = (F.octet_length(data) > 0) | (F.size(attrs) > 0)
    key_value_bytes = F.octet_length(F.element_at(attrs, F.lit(KEY_ATTRIBUTE)))
    size = (
        F.octet_length(data)
        + F.aggregate(
            F.map_entries(attrs),
            F.lit(0).cast("long"),
            lambda acc, e: acc + F.octet_length(e["key"]) + F.octet_length(e["value"]),
        )
        + F.octet_length(ordering_col)
    )
    limit_error = (
        F.when(
            key_value_bytes > MAX_ATTRIBUTE_VALUE_BYTES,
            F.format_string(
                f"attribute {_quote(KEY_ATTRIBUTE)} value is %d bytes; "
                f"Pub/Sub allows at most {MAX_ATTRIBUTE_VALUE_BYTES}",
                key_value_bytes,
            ),
        )
        .when(
            F.octet_length(ordering_col) > MAX_ORDERING_KEY_BYTES,
            F.format_string(
                f"ordering key is %d bytes; Pub/Sub allows at most {MAX_ORDERING_KEY_BYTES}",
                F.octet_length(ordering_col),
            ),
        )
        .when(
            size > MAX_MESSAGE_BYTES,
            F.format_string(
                "message is %d bytes (data, attribute keys and values, ordering key); "
                f"Pub/Sub accepts at most {MAX_MESSAGE_BYTES}",
                size,
            ),
        )
    )
    staged = staged.withColumn("_publishable", publishable).withColumn(
        "_limit_error", F.when(col("_value_error").isNull() & col("_publishable"), limit_error)
    )

    error_message = F.coalesce(col("_value_error"), col("_limit_error"))
    error_class = F.when(col("_value_error").isNotNull(), F.lit("ConverterError")).when(
        col("_limit_error").isNotNull(), F.lit(PubsubLimitError.error_class)
    )
    ok = error_message.isNull() & col("_publishable")
    failed = error_message.isNotNull()
    out = [
        F.when(ok, data).alias("data"),
        F.when(ok, attrs).alias("attributes"),
        F.when(ok, ordering_col).alias("ordering_key"),
        col("topic"),
        col("partition"),
        col("offset"),
        F.when(failed, key).alias("key"),
        F.when(failed, value).alias("value"),
        error_class.alias("error_class"),
        error_message.alias("error_message"),
    ]
    if with_skipped_headers:
        out.append(col("_skipped").alias("skipped_headers"))
    return staged.select(*out)


class _ArrowMapper:
    """``mapInArrow`` function: each Arrow batch mapped with the reference implementation.

    A module-level class (not a closure) so Spark pickles it by reference; workers import this
    module, hence the editable/wheel install requirement.
    """

    def __init__(self, settings: CpsSinkSettings, with_skipped_headers: bool) -> None:
        self.settings = settings
        self.with_skipped_headers = with_skipped_headers

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        mapper = CpsSinkMapper(self.settings)
        for batch in batches:
            yield map_arrow_batch(mapper, batch, self.with_skipped_headers)


@lru_cache(maxsize=2)
def _arrow_schema(with_skipped_headers: bool) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(converted_schema(with_skipped_headers), timezone="UTC")


def map_arrow_batch(mapper: CpsSinkMapper, batch: pa.RecordBatch, with_skipped_headers: bool = False) -> pa.RecordBatch:
    """Map one Arrow batch of bronze columns to an outbox batch (columns converted once per batch)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = batch.num_rows
    names = batch.schema.names
    keys = batch.column("key").to_pylist()
    values = batch.column("value").to_pylist()
    topic_col = batch.column("topic")
    partition_col = batch.column("partition")
    offset_col = batch.column("offset")
    topics = topic_col.to_pylist()
    partitions = partition_col.to_pylist()
    offsets = offset_col.to_pylist()
    ts_col = batch.column("timestamp")
    if pa.types.is_timestamp(ts_col.type):
        micros = pc.cast(pc.cast(ts_col, pa.timestamp("us", tz=ts_col.type.tz)), pa.int64()).to_pylist()
        timestamps = [None if t is None else t // 1000 for t in micros]
    else:  # already epoch milliseconds
        timestamps = ts_col.to_pylist()
    header_lists = batch.column("headers").to_pylist() if "headers" in names else [None] * n

    data: list[bytes | None] = [None] * n
    attributes: list[list[tuple[str, str]] | None] = [None] * n
    ordering: list[str | None] = [None] * n
    out_keys: list[bytes | None] = [None] * n
    out_values: list[bytes | None] = [None] * n
    error_class: list[str | None] = [None] * n
    error_message: list[str | None] = [None] * n
    skipped: list[int] = [0] * n
    for i in range(n):
        hdrs = header_lists[i]
        try:
            result = mapper.map_values(
                keys[i],
                values[i],
                topics[i],
                partitions[i],
                offsets[i],
                timestamps[i],
                [(h["key"], h["value"]) for h in hdrs] if hdrs else None,
            )
        except DataError as e:
            error_class[i] = e.error_class
            error_message[i] = str(e)
            out_keys[i] = keys[i]
            out_values[i] = values[i]
            continue
        skipped[i] = result.skipped_headers
        message = result.message
        if message is not None:
            data[i] = message.data
            attributes[i] = list(message.attributes.items())
            ordering[i] = message.ordering_key
    arrays = [
        pa.array(data, pa.binary()),
        pa.array(attributes, pa.map_(pa.string(), pa.string())),
        pa.array(ordering, pa.string()),
        topic_col.cast(pa.string()),
        partition_col.cast(pa.int32()),
        offset_col.cast(pa.int64()),
        pa.array(out_keys, pa.binary()),
        pa.array(out_values, pa.binary()),
        pa.array(error_class, pa.string()),
        pa.array(error_message, pa.string()),
    ]
    if with_skipped_headers:
        arrays.append(pa.array(skipped, pa.int32()))
    return pa.RecordBatch.from_arrays(arrays, schema=_arrow_schema(with_skipped_headers))


__all__ = [
    "DEFAULT_MESSAGE_BODY_NAME",
    "MAX_ATTRIBUTES",
    "MAX_ATTRIBUTE_KEY_BYTES",
    "MAX_ATTRIBUTE_VALUE_BYTES",
    "MAX_MESSAGE_BYTES",
    "MAX_ORDERING_KEY_BYTES",
    "ORDERING_KEY_SOURCES",
    "OUTBOX_DDL",
    "CpsSinkMapper",
    "CpsSinkSettings",
    "KafkaRecord",
    "PubsubLimitError",
    "PubsubMessage",
    "SinkResult",
    "UnsupportedValueError",
    "encode_body",
    "map_arrow_batch",
    "map_record",
    "outbox_ddl",
    "record_to_message",
    "to_outbox",
    "uses_column_path",
]
