"""Cloud Pub/Sub message → Kafka record, one record at a time: the reference the batch
implementation is tested against (behaviour: see the package docstring). Also the Java hashes
and converter serialization both implementations use.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from pubsub_connect.model.avro.writer import SchemaIds, schema_frame, written
from pubsub_connect.model.connect import BYTES, OPTIONAL_STRING, DataError, Schema, Struct
from pubsub_connect.model.converters import (
    BOOLEAN_CONVERTER,
    BYTE_ARRAY_CONVERTER,
    JSON_CONVERTER,
    NUMBER_CONVERTER_TYPES,
    REGISTRY_CONVERTERS,
    escape_supplementary_as_jackson,
    shared_converter,
)
from pubsub_connect.model.cps_source.settings import (
    AVRO_BODY,
    HASH_KEY,
    HASH_VALUE,
    INT_MIN,
    KAFKA_PARTITIONER,
    LONG_MAX,
    LONG_MIN,
    LONG_RE,
    MASK32,
    MAX_TIMESTAMP_MS,
    MESSAGE_FIELD,
    NO_TIMESTAMP,
    ORDERING_KEY,
    ORDERING_KEY_ATTRIBUTE,
    ROUND_ROBIN,
    SCHEMA_ENCODING_ATTRIBUTE,
    SCHEMA_NAME_ATTRIBUTE,
    SCHEMA_REVISION_ATTRIBUTE,
    CpsSourceSettings,
    DuplicateFieldError,
    InvalidTimestampError,
    KafkaOutRecord,
    KeyConverterError,
    MessageSchemaError,
    MessageSchemas,
    OutboxRow,
    PubsubReceived,
    StructConverterError,
    UnsupportedConverterError,
    duplicate_field_message,
    key_converter_message,
    message_schema_problem,
    struct_converter_message,
    struct_schema,
    timestamp_error_message,
    unicode_digits,
    written_definition,
)
from pubsub_connect.model.jsonschema.writer import json_schema_text

if TYPE_CHECKING:
    pass

# ---------------------------------------------------------------------------------------------
# Java hash compatibility
# ---------------------------------------------------------------------------------------------


def _to_signed32(h: int) -> int:
    h &= MASK32
    return h - (1 << 32) if h >= (1 << 31) else h


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode``: over UTF-16 code units (a character outside the BMP counts as
    its two surrogates), ``h = 31*h + unit`` with 32-bit signed wrap-around.

    Matching Java exactly is what lets a user move from the original connector without keys
    changing partitions. Lone surrogates (possible in Python and Java strings) hash as themselves.
    """
    units = array("H", s.encode("utf-16-le", "surrogatepass"))
    if sys.byteorder == "big":
        units.byteswap()
    h = 0
    for unit in units:
        h = (31 * h + unit) & MASK32
    return _to_signed32(h)


def java_bytes_hash(b: bytes) -> int:
    """Java ``Arrays.hashCode(byte[])``: ``h = 1``, then ``h = 31*h + byte`` with bytes signed."""
    h = 1
    for byte in b:
        h = (31 * h + (byte - 256 if byte > 127 else byte)) & MASK32
    return _to_signed32(h)


def partition_for_hash(h: int, count: int) -> int:
    """Partition of a 32-bit Java hash: ``Math.abs(h) % count`` exactly as Java computes it.

    Deliberate divergence for ``h == -2147483648``: Java's ``Math.abs`` returns it unchanged and
    the original connector produces a negative, invalid partition (-2 of 3 for the key
    ``polygenelubricants``, whose ``hashCode`` is -2147483648), so the record can never be sent.
    Here that hash maps to ``(h & 0x7fffffff) % count`` = 0. Every other hash keeps the original
    partition.
    """
    if not INT_MIN <= h <= (1 << 31) - 1:
        raise ValueError(f"hash {h} is not a 32-bit signed integer")
    if count < 1:
        raise ValueError(f"partition count {count} must be at least 1")
    if h == INT_MIN:
        return (h & 0x7FFFFFFF) % count
    return abs(h) % count


# ---------------------------------------------------------------------------------------------
# Per-record reference
# ---------------------------------------------------------------------------------------------


def parse_java_long(value: str | None) -> int | None:
    """``Long.valueOf(value)`` or None where Java throws (not a number, overflow, whitespace).
    Any Unicode decimal digit counts, as in Java."""
    if value is None:
        return None
    value = value.translate(unicode_digits()[2])
    if not LONG_RE.match(value):
        return None
    parsed = int(value)
    return parsed if LONG_MIN <= parsed <= LONG_MAX else None


def record_key(msg: PubsubReceived, settings: CpsSourceSettings) -> str | None:
    """The Kafka key as a string (see the package docstring)."""
    if settings.kafka_key_attribute == ORDERING_KEY_ATTRIBUTE:
        return msg.ordering_key or ""
    if settings.kafka_key_attribute is None:
        return None
    return msg.attributes.get(settings.kafka_key_attribute)


def record_timestamp_ms(msg: PubsubReceived, settings: CpsSourceSettings) -> int | None:
    """Timestamp attribute as a long, else the publish time; None for ``-1`` (Kafka's "no
    timestamp": the producer's clock). Raises :class:`InvalidTimestampError`."""
    attribute = settings.kafka_timestamp_attribute
    if attribute is not None:
        parsed = parse_java_long(msg.attributes.get(attribute))
        if parsed == NO_TIMESTAMP:
            return None
        if parsed is not None:
            if not 0 <= parsed <= MAX_TIMESTAMP_MS:
                raise InvalidTimestampError(timestamp_error_message(attribute, parsed))
            return parsed
    return msg.publish_time_ms


def _ordering_key_made_attribute(msg: PubsubReceived, settings: CpsSourceSettings) -> bool:
    return settings.make_ordering_key_attribute and bool(msg.ordering_key)


def has_custom_attributes(msg: PubsubReceived, settings: CpsSourceSettings) -> bool:
    """True when the value must carry attributes (as headers or as a struct)."""
    standard = settings.standard_attributes
    return any(name not in standard for name in msg.attributes) or _ordering_key_made_attribute(msg, settings)


def _carried_attributes(msg: PubsubReceived, settings: CpsSourceSettings) -> list[tuple[str, str]]:
    """Attributes that become headers/fields: all but the key attribute, sorted by name."""
    return sorted((k, v) for k, v in msg.attributes.items() if k != settings.kafka_key_attribute)


def record_headers(msg: PubsubReceived, settings: CpsSourceSettings) -> list[tuple[str, bytes]]:
    """Headers mode: every carried attribute as a UTF-8 string header, then ``orderingKey``."""
    headers = [(k, v.encode("utf-8")) for k, v in _carried_attributes(msg, settings)]
    if _ordering_key_made_attribute(msg, settings):
        headers.append((ORDERING_KEY_ATTRIBUTE, msg.ordering_key.encode("utf-8")))
    return headers


def value_struct(msg: PubsubReceived, settings: CpsSourceSettings) -> Struct:
    """Struct mode: ``message`` then the carried attributes then ``orderingKey``.

    Raises :class:`DuplicateFieldError` when an attribute name repeats a fixed field name.
    """
    carried = _carried_attributes(msg, settings)
    names = {name for name, _ in carried}
    made = _ordering_key_made_attribute(msg, settings)
    if MESSAGE_FIELD in names:
        raise DuplicateFieldError(duplicate_field_message(MESSAGE_FIELD))
    if made and ORDERING_KEY_ATTRIBUTE in names:
        raise DuplicateFieldError(duplicate_field_message(ORDERING_KEY_ATTRIBUTE))
    names = [name for name, _ in carried]
    values: dict[str, Any] = {MESSAGE_FIELD: msg.data, **dict(carried)}
    if made:
        names.append(ORDERING_KEY_ATTRIBUTE)
        values[ORDERING_KEY_ATTRIBUTE] = msg.ordering_key
    return Struct(struct_schema(names), values)


def uses_round_robin(msg: PubsubReceived, settings: CpsSourceSettings) -> bool:
    """Whether this message takes (and advances) the round-robin counter."""
    scheme = settings.partition_scheme
    return scheme == ROUND_ROBIN or (scheme == ORDERING_KEY and not msg.ordering_key)


def select_partition(
    msg: PubsubReceived, key: str | None, settings: CpsSourceSettings, round_robin_counter: int
) -> int | None:
    """``kafka.partition.scheme``:

    * ``round_robin``: ``counter % count``, the counter being the number of earlier round-robin
      records of the task (so 0, 1, 2, 0, … from a fresh start, as the original);
    * ``hash_key``: P(``String.hashCode``(key)), no key → 0;
    * ``hash_value``: P(``Arrays.hashCode``(data));
    * ``ordering_key``: P(``String.hashCode``(ordering key)), empty ordering key → round robin;
    * ``kafka_partitioner``: None, the producer's partitioner decides.
    """
    scheme, count = settings.partition_scheme, settings.partition_count
    if scheme == HASH_KEY:
        return 0 if key is None else partition_for_hash(java_string_hash(key), count)
    if scheme == HASH_VALUE:
        return partition_for_hash(java_bytes_hash(msg.data), count)
    if scheme == KAFKA_PARTITIONER:
        return None
    if scheme == ORDERING_KEY and msg.ordering_key:
        return partition_for_hash(java_string_hash(msg.ordering_key), count)
    return round_robin_counter % count


def message_to_record(msg: PubsubReceived, settings: CpsSourceSettings, round_robin_counter: int = 0,
                      schema_ids: SchemaIds | None = None,
                      message_schemas: MessageSchemas | None = None) -> KafkaOutRecord:
    """Map one message to one Kafka record (the reference implementation).

    ``round_robin_counter`` is used only when :func:`uses_round_robin` is true; the caller advances
    it. ``schema_ids`` gives the Schema Registry converters their ids, ``message_schemas`` the
    schema revisions messages name (``messageBodyFormat=avro``). Raises a
    :class:`~pubsub_connect.model.connect.DataError` subclass for a message that must go to the
    dead-letter table.
    """
    key = record_key(msg, settings)
    timestamp_ms = record_timestamp_ms(msg, settings)
    headers: list[tuple[str, bytes]] = []
    value: bytes | None
    # Errors in the batch implementation's order: timestamp, duplicate field, key, struct converter.
    if has_custom_attributes(msg, settings) and not settings.kafka_record_headers:
        struct = value_struct(msg, settings)
        key_bytes = serialize_key(key, settings, schema_ids)
        if settings.value_converter != JSON_CONVERTER and not settings.registry_value:
            raise StructConverterError(struct_converter_message(settings.value_converter))
        value = serialize_struct(struct, settings, schema_ids)
    else:
        key_bytes = serialize_key(key, settings, schema_ids)
        if settings.message_body_format == AVRO_BODY:
            value = _message_datum(msg, settings, schema_ids, message_schemas)
        else:
            value = serialize_bytes_value(msg.data, settings, schema_ids)
        if has_custom_attributes(msg, settings):
            headers = record_headers(msg, settings)
    return KafkaOutRecord(
        key=key_bytes,
        value=value,
        headers=headers,
        partition=select_partition(msg, key, settings, round_robin_counter),
        timestamp_ms=timestamp_ms,
    )


def reference_outbox(
    messages: Iterable[tuple[PubsubReceived, int | None]],
    settings: CpsSourceSettings,
    start_counter: int = 0,
    schema_ids: SchemaIds | None = None,
    message_schemas: MessageSchemas | None = None,
) -> list[OutboxRow]:
    """What :func:`to_kafka_outbox` must produce for a batch of (message, ingest_time_ms) pairs.

    De-duplicates on ``message_id`` (earliest ingest time wins; null ingest time last), orders by
    (publish time ms, nulls first; message_id) and hands out round-robin partitions from
    ``start_counter``. Returned in that order.
    """
    chosen: dict[str, tuple[tuple[bool, int], PubsubReceived]] = {}
    for msg, ingest_ms in messages:
        rank = (ingest_ms is None, ingest_ms or 0)
        previous = chosen.get(msg.message_id)
        if previous is None or rank < previous[0]:
            chosen[msg.message_id] = (rank, msg)
    ordered = sorted(
        (msg for _, msg in chosen.values()),
        key=lambda m: (m.publish_time_ms is not None, m.publish_time_ms or 0, m.message_id),
    )
    counter = start_counter
    rows: list[OutboxRow] = []
    for msg in ordered:
        try:
            record = message_to_record(msg, settings, counter, schema_ids, message_schemas)
        except DataError as exc:
            key = record_key(msg, settings)
            rows.append(
                OutboxRow(
                    key=None if key is None else key.encode("utf-8"),
                    value=msg.data,
                    headers=[],
                    partition=None,
                    timestamp_ms=None,
                    message_id=msg.message_id,
                    error_class=getattr(exc, "error_class", type(exc).__name__),
                    error_message=str(exc),
                )
            )
            continue
        if uses_round_robin(msg, settings):
            counter += 1
        rows.append(
            OutboxRow(
                record.key,
                record.value,
                record.headers,
                record.partition,
                record.timestamp_ms,
                msg.message_id,
            )
        )
    return rows


# ---------------------------------------------------------------------------------------------
# Value converter
# ---------------------------------------------------------------------------------------------


def check_value_converter(settings: CpsSourceSettings) -> None:
    """Start-up check, called by the pipeline before the first batch.

    Values are BYTES (the data) or, with ``kafka.record.headers=false`` and custom attributes,
    STRUCTs. The number and boolean converters can write neither (the original's task fails on
    its first record): failing at start-up with one clear line beats dead-lettering every
    message. ``ByteArrayConverter`` and ``StringConverter`` write every message without custom
    attributes, so they are accepted with ``kafka.record.headers=false`` as the original accepts
    them; a message they cannot write is a dead letter (:class:`StructConverterError`). Also
    checks that ``key.converter`` is known.
    """
    for option, name, schemas in (
        ("key.converter", settings.key_converter, settings.key_schemas_enable),
        ("value.converter", settings.value_converter, settings.value_schemas_enable),
    ):
        if name in REGISTRY_CONVERTERS:
            continue
        try:
            shared_converter(name, schemas)
        except ValueError as exc:
            raise UnsupportedConverterError(f"{option}: {exc}") from exc
    converter = settings.value_converter
    if converter in NUMBER_CONVERTER_TYPES or converter == BOOLEAN_CONVERTER:
        raise UnsupportedConverterError(
            f"value.converter={converter} cannot write the values of this connector (the message data, "
            f"or a STRUCT with the attributes); use {BYTE_ARRAY_CONVERTER} or {JSON_CONVERTER}"
        )


def serialize_key(key: str | None, settings: CpsSourceSettings, schema_ids: SchemaIds | None = None) -> bytes | None:
    """The key as the original's worker writes it with ``key.converter`` (an ``OPTIONAL_STRING``).

    ``ByteArrayConverter`` writes UTF-8 (*divergence*, see the package docstring); the number and
    boolean converters raise :class:`KeyConverterError` for a key (a null key stays null, as
    their serializers write it); an Avro converter writes the union ``["null","string"]``, the
    JSON Schema converter a JSON string (a null key stays null with both).
    """
    converter = settings.key_converter
    if settings.registry_key:
        return _registry(schema_ids, "key", settings, OPTIONAL_STRING, key)
    if converter == JSON_CONVERTER:
        out = shared_converter(converter, settings.key_schemas_enable).from_connect(OPTIONAL_STRING, key)
        assert out is not None  # an OPTIONAL_STRING null is written as JSON null
        return _as_kafka_json(out)
    if key is None:
        return None
    if converter in NUMBER_CONVERTER_TYPES or converter == BOOLEAN_CONVERTER:
        raise KeyConverterError(key_converter_message(converter))
    return key.encode("utf-8")


def serialize_bytes_value(data: bytes, settings: CpsSourceSettings, schema_ids: SchemaIds | None = None) -> bytes:
    """A BYTES value (the data of a message without custom attributes, or with them in headers
    mode) as the configured ``value.converter`` writes it; ``StringConverter`` writes the data as
    is (*divergence*, see the package docstring)."""
    if settings.registry_value:
        return _registry(schema_ids, "value", settings, BYTES, data) or b""
    if settings.value_converter == JSON_CONVERTER:
        out = shared_converter(JSON_CONVERTER, settings.value_schemas_enable).from_connect(BYTES, data)
        assert out is not None  # a non-null value always serializes to bytes
        return out
    return data


def serialize_struct(struct: Struct, settings: CpsSourceSettings, schema_ids: SchemaIds | None = None) -> bytes:
    """The STRUCT value as the configured ``value.converter`` (``model/converters.py``) writes it."""
    check_value_converter(settings)
    if settings.registry_value:
        return _registry(schema_ids, "value", settings, struct.schema, struct) or b""
    out = shared_converter(settings.value_converter, settings.value_schemas_enable).from_connect(struct.schema, struct)
    if out is None:  # pragma: no cover - a struct value is never null
        raise DataError("value converter returned null for a struct")
    return _as_kafka_json(bytes(out))


def _registry(schema_ids: SchemaIds | None, side: str, settings: CpsSourceSettings, schema: Schema,
              value: Any) -> bytes | None:
    """A key or value as the Schema Registry converter writes it: Avro, or JSON Schema (the
    value's JSON as Jackson writes it, framed with the id of Confluent's text of its schema)."""
    if schema_ids is None:
        raise ValueError(f"{side}.converter is a Schema Registry converter: its schema ids are needed")
    strategy = settings.subject_strategy(side)
    if not settings.json_schema(side):
        return written(schema_ids, side, strategy, settings.kafka_topic, schema, value)
    if value is None:  # nothing registered, nothing framed, as Confluent's serializer
        return None
    text = json_schema_text(schema)
    datum = shared_converter(JSON_CONVERTER, False).from_connect(schema, value)
    assert datum is not None  # a non-null value always serializes
    return schema_frame(schema_ids, side, strategy, settings.kafka_topic, text) + _as_kafka_json(datum)


def _message_datum(msg: PubsubReceived, settings: CpsSourceSettings, schema_ids: SchemaIds | None,
                   message_schemas: MessageSchemas | None) -> bytes:
    """``messageBodyFormat=avro``: the data (a binary Avro datum Pub/Sub validated) framed with the
    id of the schema revision it names, registered under the value's subject."""
    attributes = msg.attributes
    name, revision = attributes.get(SCHEMA_NAME_ATTRIBUTE), attributes.get(SCHEMA_REVISION_ATTRIBUTE)
    problem = message_schema_problem(name, revision, attributes.get(SCHEMA_ENCODING_ATTRIBUTE))
    if problem is not None:
        raise MessageSchemaError(problem)
    if schema_ids is None or message_schemas is None:
        raise ValueError("messageBodyFormat=avro needs the registry's ids and the messages' schemas")
    assert name is not None and revision is not None
    text = written_definition(name, revision, *message_schemas(name, revision))
    return schema_frame(schema_ids, "value", settings.value_subject_strategy, settings.kafka_topic, text) + msg.data


def _as_kafka_json(json_bytes: bytes) -> bytes:
    """JsonConverter output with characters outside the BMP escaped as Kafka's serializer does."""
    return escape_supplementary_as_jackson(json_bytes.decode("utf-8")).encode("utf-8")
