"""Kafka record → Cloud Pub/Sub message, one record at a time: the reference the batch
implementation is tested against, and the mapper its Arrow path runs per row (behaviour: see
the package docstring).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from decimal import Decimal
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from pubsub_connect.model.connect import DATE, MILLIS_PER_DAY, DataError, JavaDate, Schema, Struct, Type
from pubsub_connect.model.converters import (
    ReadsConnect,
    dump_json,
    escape_supplementary_as_jackson,
    java_text,
    make_converter,
    to_float32,
    unscaled_bytes,
    utf8,
)
from pubsub_connect.model.cps_sink.settings import (
    AVRO_BODY,
    JSON_BODY,
    KEY_ATTRIBUTE,
    MAX_ATTRIBUTE_KEY_BYTES,
    MAX_ATTRIBUTE_VALUE_BYTES,
    MAX_ATTRIBUTES,
    MAX_MESSAGE_BYTES,
    MAX_ORDERING_KEY_BYTES,
    OFFSET_ATTRIBUTE,
    PARTITION_ATTRIBUTE,
    TIMESTAMP_ATTRIBUTE,
    TOPIC_ATTRIBUTE,
    BodySchemaCheck,
    CpsSinkSettings,
    KafkaRecord,
    PubsubLimitError,
    PubsubMessage,
    SinkResult,
    TopicSchemaError,
    UnsupportedValueError,
)

if TYPE_CHECKING:
    pass

# --------------------------------------------------------------------------------------------
# Reference implementation
# --------------------------------------------------------------------------------------------


def quote_name(name: str) -> str:
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
    # Logical values (Google's task fails on them) as their base type's bytes, as JSON's are:
    # a Date as its INT32 days, Time and Timestamp as milliseconds, a Decimal as its unscaled bytes.
    if isinstance(value, JavaDate):
        return _int_bytes(t, value.millis // MILLIS_PER_DAY if schema.name == DATE else value.millis)
    if isinstance(value, Decimal):
        return unscaled_bytes(value)
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
                f"struct field {quote_name(f.name)} is a nested {f.schema.type.value.upper()}; "
                "Pub/Sub attributes cannot hold it"
            )
        field_value = value.get(f.name)
        if field_value is None:
            if not f.schema.optional:
                raise UnsupportedValueError(f"struct is missing required field {quote_name(f.name)}")
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
    see the package docstring)."""
    return data.decode("utf-8", errors="replace")


class CpsSinkMapper:
    """The reference mapping with its converters built once (they cache parsed JSON schemas)."""

    def __init__(self, settings: CpsSinkSettings, key_converter: ReadsConnect | None = None,
                 value_converter: ReadsConnect | None = None, body_schemas: BodySchemaCheck | None = None) -> None:
        """``key_converter``/``value_converter``: converters that need more than a class name
        (the Schema Registry's, given their registry); by default the settings' converters.
        ``body_schemas``: with ``messageBodyFormat=avro``, which writer schemas the topic takes."""
        self.settings = settings
        self.body_schemas = body_schemas
        self.key_converter: ReadsConnect = key_converter or make_converter(settings.key_converter,
                                                                           settings.key_schemas_enable)
        self.value_converter: ReadsConnect = value_converter or make_converter(settings.value_converter,
                                                                               settings.value_schemas_enable)

    def _check_body_schema(self, value: bytes) -> None:
        """Raise :class:`TopicSchemaError` when the topic's schema refuses the value's writer schema."""
        assert self.body_schemas is not None
        schema_id, writer = self.value_converter.writer_schema(value)  # type: ignore[attr-defined]
        refused = self.body_schemas(writer)
        if refused:
            raise TopicSchemaError(f"writer schema {schema_id}: {refused}")

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
            if s.message_body_format == AVRO_BODY and self.body_schemas is not None and value is not None:
                self._check_body_schema(value)
            value_sv = self.value_converter.to_connect(value)
        except DataError as e:
            raise type(e)(f"value: {e}") from None

        attributes: dict[str, str] = {}
        try:
            if s.message_body_format == AVRO_BODY:  # the datum itself: no attribute per field
                data = b"" if value is None else self.value_converter.datum(value)  # type: ignore[attr-defined]
            elif s.message_body_format == JSON_BODY:  # the whole value's JSON: no attribute per field
                data = b"" if value_sv.value is None else utf8(escape_supplementary_as_jackson(
                    dump_json(value_sv.schema, value_sv.value)))
            else:
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
                f"attribute key {quote_name(k)} is {len(kb)} bytes; Pub/Sub allows at most {MAX_ATTRIBUTE_KEY_BYTES}"
            )
        if len(vb) > MAX_ATTRIBUTE_VALUE_BYTES:
            raise PubsubLimitError(
                f"attribute {quote_name(k)} value is {len(vb)} bytes; "
                f"Pub/Sub allows at most {MAX_ATTRIBUTE_VALUE_BYTES}"
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
