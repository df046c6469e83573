"""Cloud Pub/Sub message → Kafka record: the source connector's data model.

Two implementations of one mapping, kept side by side so they can be checked against each other:

* a **per-record reference** (:func:`message_to_record`, :func:`reference_outbox`) written to read
  like the behaviour of Google's ``CloudPubSubSourceTask``;
* a **batch implementation** (:func:`to_kafka_outbox`) in Spark column expressions, used by the
  convert stage (bronze → outbox). Unit tests assert both give identical rows.

Behaviour, as Google's connector unless marked *divergence*:

* **Key**: the value of attribute ``kafka.key.attribute``, or the ordering key when that option is
  ``orderingKey`` (Pub/Sub reports a missing ordering key as ``""``, so the key is then ``""``, not
  null, as in the original), else null. The original hands the worker an ``OPTIONAL_STRING`` key,
  serialized by ``key.converter`` (:func:`serialize_key`): ``StringConverter`` writes UTF-8,
  ``JsonConverter`` a JSON string (``null`` for no key; with schemas inside the envelope
  ``{"schema":{"type":"string","optional":true},"payload":…}``). *Divergences*:
  ``ByteArrayConverter`` (Connect's default) rejects every STRING key, null included, which fails
  the original's task on its first record; here it writes UTF-8 like ``StringConverter``. The
  number and boolean converters cannot write a string either (the original's task fails on the
  first keyed record; ``BooleanConverter`` on every record): here a null key stays null and a
  message with a key becomes a dead-letter row (:class:`KeyConverterError`).
* **Timestamp**: attribute ``kafka.timestamp.attribute`` parsed like Java ``Long.valueOf`` (any
  Unicode decimal digit counts: ``"١٢٣"`` is 123); when it is missing or not a long, the publish
  time in ms. ``-1`` is Kafka's "no timestamp": Connect then lets the producer stamp the record
  with its clock, and so does this (a null outbox timestamp). *Divergence*: any other value outside
  ``0 ≤ ts ≤ 253402300799999`` (9999-12-31T23:59:59.999Z) makes the message a dead-letter row
  (:class:`InvalidTimestampError`): Connect rejects negative timestamps, which crashes the original
  task, and later years cannot be represented by Spark/Python readers of the outbox. *Limitation*:
  a timestamp of exactly 0 reaches Kafka as the produce time, because the transactional producer
  (librdkafka) reads 0 as "now"; the original writes 0.
* **Custom attributes** exist when an attribute other than the key and timestamp attributes is
  present, or the ordering key is non-empty and ``cps.makeOrderingKeyAttribute=true``.
  Without them the value is the data bytes. With them and ``kafka.record.headers=true`` the value is
  the data bytes and every attribute except the key attribute becomes a string header (UTF-8), plus
  ``orderingKey``. Otherwise the value is a Connect STRUCT: ``message`` (BYTES) then one STRING
  field per attribute except the key attribute, then ``orderingKey``, serialized by the configured
  ``value.converter``. As in the original, the timestamp attribute is not excluded.
* **Ordering of attributes** (*divergence*, deterministic by design): the original follows the
  protobuf map's iteration order, which is not specified. Here headers and struct fields are sorted
  by attribute name (code point order, equal to Spark's UTF-8 byte order), ``orderingKey`` last.
* **Field name collisions** (*divergence*): an attribute named ``message`` (or ``orderingKey`` when
  the ordering key is added too) cannot become a second struct field of that name. The original
  throws inside ``poll()``, logs "treating as an empty poll" and never acks, so the message is
  redelivered forever; here it becomes a dead-letter row (:class:`DuplicateFieldError`). Headers
  may repeat, so headers mode has no such error.
* **BYTES values go through the value converter** like every value the original's worker writes
  (:func:`serialize_bytes_value`): ``ByteArrayConverter`` writes the data as is, ``JsonConverter``
  a base64 JSON string (with schemas inside ``{"schema":{"type":"bytes","optional":false},
  "payload":…}``). *Divergence*: ``StringConverter`` writes Java's ``byte[].toString()`` there
  (``[B@`` and an identity hash: the data is lost); here the data bytes are written as is. The
  number and boolean converters cannot write BYTES or STRUCT values (the original's task fails on
  the first record): rejected at start-up (:func:`check_value_converter`).
* **JSON text** (JsonConverter keys and struct values) is byte for byte Kafka's: Jackson's string
  escaping, and a character outside the BMP (an emoji) as its two escaped UTF-16 halves
  (``\\uD83D\\uDE00``), not as 4 UTF-8 bytes.
* **Headers** are what Connect's default ``header.converter`` (``SimpleHeaderConverter``) writes
  for the original's STRING headers: the UTF-8 bytes of the value.
* **Partitions** (``kafka.partition.scheme``): see :func:`select_partition` and
  :func:`partition_for_hash`; ``hash_value`` hashes the data bytes (*divergence*: the original
  hashes a JVM identity, i.e. is random).

Batch specifics: a batch is first de-duplicated on ``message_id`` (Pub/Sub redelivers; the earliest
``ingest_time`` wins; across batches is the caller's job) and round-robin partitions are handed
out in (publish time in ms, message_id) order starting at ``start_counter``, so a replayed batch
yields identical partitions. Dead-letter rows do not consume the round-robin counter.
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pubsub_connect.model.connect import BYTES, OPTIONAL_STRING, STRING, DataError, Field, Schema, Struct, Type
from pubsub_connect.model.converters import (
    BOOLEAN_CONVERTER,
    BYTE_ARRAY_CONVERTER,
    JSON_CONVERTER,
    NUMBER_CONVERTER_TYPES,
    escape_supplementary_as_jackson,
    schema_to_json,
    shared_converter,
)

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

# ---------------------------------------------------------------------------------------------
# Names and constants
# ---------------------------------------------------------------------------------------------

#: ``kafka.key.attribute`` value that selects the ordering key; also the header/field name used
#: when ``cps.makeOrderingKeyAttribute=true``.
ORDERING_KEY_ATTRIBUTE = "orderingKey"
#: Struct field carrying the message data.
MESSAGE_FIELD = "message"

ROUND_ROBIN = "round_robin"
HASH_KEY = "hash_key"
HASH_VALUE = "hash_value"
KAFKA_PARTITIONER = "kafka_partitioner"
ORDERING_KEY = "ordering_key"
PARTITION_SCHEMES = (ROUND_ROBIN, HASH_KEY, HASH_VALUE, KAFKA_PARTITIONER, ORDERING_KEY)

#: Kafka's "no timestamp" (``RecordBatch.NO_TIMESTAMP``): Connect turns it into a null timestamp.
NO_TIMESTAMP = -1
#: Largest accepted timestamp: 9999-12-31T23:59:59.999Z in epoch ms.
MAX_TIMESTAMP_MS = 253_402_300_799_999

#: Schema of the attribute fields of the STRUCT value. Required STRING like the original
#: (``Schema.STRING_SCHEMA``): attribute values are never null, and the JsonConverter envelope
#: schema then matches the original's (``"optional":false``).
ATTRIBUTE_FIELD_SCHEMA = STRING

_INT_MIN = -(1 << 31)
_MASK32 = 0xFFFFFFFF
_LONG_MIN = -(1 << 63)
_LONG_MAX = (1 << 63) - 1
#: Java ``Long.valueOf`` syntax, checked after other decimal digits became ASCII (see
#: :func:`_unicode_digits`). ``\Z`` (Python) / ``\z`` (Java, used in Spark) anchor at the very end:
#: ``$`` would accept a trailing newline that Java rejects.
_LONG_RE = re.compile(r"[+-]?[0-9]+\Z")
_LONG_SQL_RE = r"^[+-]?[0-9]+\z"


@functools.cache
def _unicode_digits() -> tuple[str, str, dict[int, int]]:
    """Every non-ASCII Unicode decimal digit (category Nd), its ASCII digit, and the table.

    Java's ``Long.valueOf`` reads any of them through ``Character.digit`` (``"١٢٣"`` is 123), so
    both paths map them to ASCII before the syntax check. Follows this Python's Unicode version
    (Java 17's is older: a digit added since is a digit here only). Built on first use (a scan of
    every code point, ~0.3 s).
    """
    digits = "".join(chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) == "Nd" and not 0x30 <= c <= 0x39)
    ascii_digits = "".join(str(unicodedata.decimal(d)) for d in digits)
    return digits, ascii_digits, str.maketrans(digits, ascii_digits)


#: Output schema of :func:`to_kafka_outbox` (the Kafka outbox table contract).
OUTBOX_COLUMNS = (
    "key",
    "value",
    "headers",
    "partition",
    "timestamp",
    "message_id",
    "error_class",
    "error_message",
)
HEADERS_TYPE = "array<struct<key:string,value:binary>>"
_ATTRIBUTES_TYPE = "map<string,string>"


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


class UnsupportedConverterError(ValueError):
    """``value.converter`` cannot serialize the values this connector produces (config error)."""


class InvalidTimestampError(DataError):
    """The timestamp attribute is a long outside the range Kafka and the outbox accept."""

    error_class = "InvalidTimestampError"


class KeyConverterError(DataError):
    """``key.converter`` is a number or boolean converter and the message has a (string) key."""

    error_class = "KeyConverterError"


class DuplicateFieldError(DataError):
    """An attribute would become a second struct field named ``message`` or ``orderingKey``."""

    error_class = "DuplicateFieldError"


def _timestamp_error_message(attribute: str, value: int | str) -> str:
    return (
        f"kafka.timestamp.attribute '{attribute}' = {value} is outside the Kafka timestamp range "
        f"0..{MAX_TIMESTAMP_MS} ms"
    )


def _key_converter_message(converter: str) -> str:
    short = converter.rsplit(".", 1)[-1]
    return (
        f"key.converter={short} cannot write the message's key, a string; "
        "use StringConverter or JsonConverter, or unset kafka.key.attribute"
    )


def _duplicate_field_message(name: str) -> str:
    return (
        f"attribute '{name}' collides with the value struct field '{name}'; "
        "rename the attribute or set kafka.record.headers=true"
    )


# ---------------------------------------------------------------------------------------------
# Settings and records
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CpsSourceSettings:
    """The options of the source connector that the data model depends on.

    Deliberately independent of the config module, so the model stays a pure function of these
    values (and picklable for Spark workers).
    """

    kafka_key_attribute: str | None = None
    kafka_timestamp_attribute: str | None = None
    make_ordering_key_attribute: bool = False
    kafka_record_headers: bool = False
    partition_scheme: str = ROUND_ROBIN
    partition_count: int = 1
    value_converter: str = JSON_CONVERTER
    value_schemas_enable: bool = True
    #: ``ByteArrayConverter`` (Connect's default) writes the key as UTF-8 here: see the module
    #: docstring for why that differs from the original.
    key_converter: str = BYTE_ARRAY_CONVERTER
    key_schemas_enable: bool = True

    def __post_init__(self) -> None:
        if self.partition_scheme not in PARTITION_SCHEMES:
            raise ValueError(
                f"kafka.partition.scheme={self.partition_scheme!r} is not one of {', '.join(PARTITION_SCHEMES)}"
            )
        if isinstance(self.partition_count, bool) or not isinstance(self.partition_count, int):
            raise ValueError(f"kafka.partition.count={self.partition_count!r} is not an integer")
        if self.partition_count < 1:
            raise ValueError(f"kafka.partition.count={self.partition_count} must be at least 1")

    @property
    def standard_attributes(self) -> frozenset[str]:
        """Attributes that are not "custom": the key and timestamp attributes (when set)."""
        return frozenset(a for a in (self.kafka_key_attribute, self.kafka_timestamp_attribute) if a is not None)


@dataclass(frozen=True)
class PubsubReceived:
    """One received Pub/Sub message (what the bronze table holds per row)."""

    message_id: str
    data: bytes = b""
    attributes: dict[str, str] = field(default_factory=dict)
    ordering_key: str = ""
    publish_time_ms: int | None = 0


@dataclass(frozen=True)
class KafkaOutRecord:
    """A record ready for the Kafka producer. ``partition`` None = the producer decides."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    partition: int | None
    timestamp_ms: int | None


@dataclass(frozen=True)
class OutboxRow:
    """One row of the Kafka outbox as the reference computes it (mirrors :data:`OUTBOX_COLUMNS`).

    Dead-letter rows carry ``error_class``/``error_message``, the key, the raw data as ``value``,
    no headers and null ``partition``/``timestamp_ms``.
    """

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    partition: int | None
    timestamp_ms: int | None
    message_id: str
    error_class: str | None = None
    error_message: str | None = None


# ---------------------------------------------------------------------------------------------
# Java hash compatibility
# ---------------------------------------------------------------------------------------------


def _to_signed32(h: int) -> int:
    h &= _MASK32
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
        h = (31 * h + unit) & _MASK32
    return _to_signed32(h)


def java_bytes_hash(b: bytes) -> int:
    """Java ``Arrays.hashCode(byte[])``: ``h = 1``, then ``h = 31*h + byte`` with bytes signed."""
    h = 1
    for byte in b:
        h = (31 * h + (byte - 256 if byte > 127 else byte)) & _MASK32
    return _to_signed32(h)


def partition_for_hash(h: int, count: int) -> int:
    """Partition of a 32-bit Java hash: ``Math.abs(h) % count`` exactly as Java computes it.

    Deliberate divergence for ``h == -2147483648``: Java's ``Math.abs`` returns it unchanged and
    the original connector produces a negative, invalid partition (-2 of 3 for the key
    ``polygenelubricants``, whose ``hashCode`` is -2147483648), so the record can never be sent.
    Here that hash maps to ``(h & 0x7fffffff) % count`` = 0. Every other hash keeps the original
    partition.
    """
    if not _INT_MIN <= h <= (1 << 31) - 1:
        raise ValueError(f"hash {h} is not a 32-bit signed integer")
    if count < 1:
        raise ValueError(f"partition count {count} must be at least 1")
    if h == _INT_MIN:
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
    value = value.translate(_unicode_digits()[2])
    if not _LONG_RE.match(value):
        return None
    parsed = int(value)
    return parsed if _LONG_MIN <= parsed <= _LONG_MAX else None


def record_key(msg: PubsubReceived, settings: CpsSourceSettings) -> str | None:
    """The Kafka key as a string (see module docstring)."""
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
                raise InvalidTimestampError(_timestamp_error_message(attribute, parsed))
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
        raise DuplicateFieldError(_duplicate_field_message(MESSAGE_FIELD))
    if made and ORDERING_KEY_ATTRIBUTE in names:
        raise DuplicateFieldError(_duplicate_field_message(ORDERING_KEY_ATTRIBUTE))
    fields = [Field(MESSAGE_FIELD, BYTES)] + [Field(name, ATTRIBUTE_FIELD_SCHEMA) for name, _ in carried]
    values: dict[str, Any] = {MESSAGE_FIELD: msg.data, **dict(carried)}
    if made:
        fields.append(Field(ORDERING_KEY_ATTRIBUTE, ATTRIBUTE_FIELD_SCHEMA))
        values[ORDERING_KEY_ATTRIBUTE] = msg.ordering_key
    return Struct(Schema(Type.STRUCT, fields=tuple(fields)), values)


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


def message_to_record(msg: PubsubReceived, settings: CpsSourceSettings, round_robin_counter: int = 0) -> KafkaOutRecord:
    """Map one message to one Kafka record (the reference implementation).

    ``round_robin_counter`` is used only when :func:`uses_round_robin` is true; the caller advances
    it. Raises a :class:`~pubsub_connect.model.connect.DataError` subclass for a message that must
    go to the dead-letter table.
    """
    key = record_key(msg, settings)
    timestamp_ms = record_timestamp_ms(msg, settings)
    headers: list[tuple[str, bytes]] = []
    value: bytes | None
    if has_custom_attributes(msg, settings) and not settings.kafka_record_headers:
        value = serialize_struct(value_struct(msg, settings), settings)
    else:
        value = serialize_bytes_value(msg.data, settings)
        if has_custom_attributes(msg, settings):
            headers = record_headers(msg, settings)
    return KafkaOutRecord(
        key=serialize_key(key, settings),
        value=value,
        headers=headers,
        partition=select_partition(msg, key, settings, round_robin_counter),
        timestamp_ms=timestamp_ms,
    )


def reference_outbox(
    messages: Iterable[tuple[PubsubReceived, int | None]],
    settings: CpsSourceSettings,
    start_counter: int = 0,
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
            record = message_to_record(msg, settings, counter)
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
    its first record); of the others only JsonConverter can write a STRUCT (ByteArrayConverter
    fails the original's task, StringConverter writes Java's ``Struct.toString()``, which has
    ``[B@…`` in place of the data). Failing at start-up with one clear line beats failing or
    dead-lettering messages later. Also checks that ``key.converter`` is known.
    """
    for option, name, schemas in (
        ("key.converter", settings.key_converter, settings.key_schemas_enable),
        ("value.converter", settings.value_converter, settings.value_schemas_enable),
    ):
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
    if settings.kafka_record_headers:
        return
    if settings.value_converter != JSON_CONVERTER:
        raise UnsupportedConverterError(
            f"value.converter={settings.value_converter} cannot write the STRUCT values produced for "
            f"messages with attributes; use {JSON_CONVERTER} or set kafka.record.headers=true"
        )


def serialize_key(key: str | None, settings: CpsSourceSettings) -> bytes | None:
    """The key as the original's worker writes it with ``key.converter`` (an ``OPTIONAL_STRING``).

    ``ByteArrayConverter`` writes UTF-8 (*divergence*, see the module docstring); the number and
    boolean converters raise :class:`KeyConverterError` for a key (a null key stays null, as
    their serializers write it).
    """
    converter = settings.key_converter
    if converter == JSON_CONVERTER:
        out = shared_converter(converter, settings.key_schemas_enable).from_connect(OPTIONAL_STRING, key)
        assert out is not None  # an OPTIONAL_STRING null is written as JSON null
        return _as_kafka_json(out)
    if key is None:
        return None
    if converter in NUMBER_CONVERTER_TYPES or converter == BOOLEAN_CONVERTER:
        raise KeyConverterError(_key_converter_message(converter))
    return key.encode("utf-8")


def serialize_bytes_value(data: bytes, settings: CpsSourceSettings) -> bytes:
    """A BYTES value (the data of a message without custom attributes, or with them in headers
    mode) as the configured ``value.converter`` writes it; ``StringConverter`` writes the data as
    is (*divergence*, see the module docstring)."""
    if settings.value_converter == JSON_CONVERTER:
        out = shared_converter(JSON_CONVERTER, settings.value_schemas_enable).from_connect(BYTES, data)
        assert out is not None  # a non-null value always serializes to bytes
        return out
    return data


def serialize_struct(struct: Struct, settings: CpsSourceSettings) -> bytes:
    """The STRUCT value as the configured ``value.converter`` (``model/converters.py``) writes it."""
    check_value_converter(settings)
    out = shared_converter(settings.value_converter, settings.value_schemas_enable).from_connect(struct.schema, struct)
    if out is None:  # pragma: no cover - a struct value is never null
        raise DataError("value converter returned null for a struct")
    return _as_kafka_json(bytes(out))


def _as_kafka_json(json_bytes: bytes) -> bytes:
    """JsonConverter output with characters outside the BMP escaped as Kafka's serializer does."""
    return escape_supplementary_as_jackson(json_bytes.decode("utf-8")).encode("utf-8")


# ---------------------------------------------------------------------------------------------
# Vectorised Java hashes (numpy over Arrow buffers; used on Spark workers for hash_value)
# ---------------------------------------------------------------------------------------------

#: Units hashed per numpy pass: bounds temporary memory (~6 uint64 arrays of this length).
_CHUNK_UNITS = 1 << 22
_INV31 = pow(31, -1, 1 << 32)


def _powers(base: int, n: int) -> np.ndarray:
    """``base**k mod 2**32`` for k in 0..n-1 (uint64; cumprod wraps mod 2**64, a multiple)."""
    import numpy as np

    factors = np.full(n, base, dtype=np.uint64)
    factors[0] = 1
    return np.cumprod(factors, dtype=np.uint64) & np.uint64(_MASK32)


def _poly_hash_chunk(units: np.ndarray, starts: np.ndarray, ends: np.ndarray, initial: int) -> np.ndarray:
    """Java-style polynomial hash of each segment ``units[starts[i]:ends[i]]`` (mod 2**32).

    ``h = initial; for u in segment: h = 31*h + u``, i.e. ``initial*31**n + Σ u_i 31**(n-1-i)``.
    Computed without a Python loop: weight every unit by ``31**(T-1-i)`` for the whole chunk,
    take prefix sums, and rescale each segment by the inverse power (31 is odd, so invertible
    mod 2**32).
    """
    import numpy as np

    mask = np.uint64(_MASK32)
    total = len(units)
    pw = _powers(31, total + 1)
    inv = _powers(_INV31, total + 1)
    weighted = (units * pw[:total][::-1]) & mask
    prefix = np.zeros(total + 1, dtype=np.uint64)
    np.cumsum(weighted, dtype=np.uint64, out=prefix[1:])
    seg = ((prefix[ends] - prefix[starts]) & mask) * inv[total - ends] & mask
    if initial:
        seg = (seg + np.uint64(initial) * pw[ends - starts]) & mask
    return seg


def _segment_hashes(units: np.ndarray, offsets: np.ndarray, initial: int) -> np.ndarray:
    """Hashes of consecutive segments delimited by ``offsets`` (len n+1, from 0), as int32."""
    import numpy as np

    n = len(offsets) - 1
    out = np.zeros(n, dtype=np.uint64)
    i = 0
    while i < n:
        j = int(np.searchsorted(offsets, offsets[i] + _CHUNK_UNITS, side="right")) - 1
        j = min(max(j, i + 1), n)
        base = int(offsets[i])
        if offsets[j] - base > _CHUNK_UNITS:  # one segment larger than a chunk: Horner over blocks
            h = initial
            for lo in range(base, int(offsets[j]), _CHUNK_UNITS):
                block = units[lo : min(lo + _CHUNK_UNITS, int(offsets[j]))]
                part = int(_poly_hash_chunk(block, np.array([0]), np.array([len(block)]), 0)[0])
                h = (h * pow(31, len(block), 1 << 32) + part) & _MASK32
            out[i] = h
        else:
            chunk = units[base : int(offsets[j])]
            rel = offsets[i : j + 1] - base
            out[i:j] = _poly_hash_chunk(chunk, rel[:-1], rel[1:], initial)
        i = j
    return out.astype(np.uint32).view(np.int32)


def java_bytes_hash_array(values: pa.Array) -> np.ndarray:
    """``Arrays.hashCode(byte[])`` of every element of an Arrow binary array (null → as empty)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if values.null_count:
        values = pc.fill_null(values, pa.scalar(b"", values.type))
    n = len(values)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    offset_type = np.int64 if pa.types.is_large_binary(values.type) else np.int32
    buffers = values.buffers()
    offsets = np.frombuffer(buffers[1], dtype=offset_type)[values.offset : values.offset + n + 1].astype(np.int64)
    data = (
        np.frombuffer(buffers[2], dtype=np.int8)[offsets[0] : offsets[-1]]
        if buffers[2] is not None
        else np.zeros(0, dtype=np.int8)
    )
    units = data.astype(np.int64).astype(np.uint64) & np.uint64(_MASK32)
    return _segment_hashes(units, offsets - offsets[0], 1)


# ---------------------------------------------------------------------------------------------
# Batch implementation (Spark column expressions)
# ---------------------------------------------------------------------------------------------


def java_string_hash_col(s: Column) -> Column:
    """Spark expression equal to Java ``String.hashCode`` (as bigint in the int32 range).

    Exact and JVM-only: the string is encoded to UTF-16BE (surrogate pairs become two units, as
    in Java), hex-encoded, split into 4-hex-digit code units and folded with ``31*h + unit``
    modulo 2**32. Keys are short, so the per-character arrays are cheap. Null → null.
    """
    from pyspark.sql import functions as F

    units = F.regexp_extract_all(F.hex(F.encode(s, "UTF-16BE")), F.lit("(.{4})"), 1)
    folded = F.aggregate(
        units,
        F.lit(0).cast("bigint"),
        lambda acc, unit: F.pmod(acc * 31 + F.conv(unit, 16, 10).cast("bigint"), F.lit(1 << 32)),
    )
    signed = F.when(folded >= F.lit(1 << 31), folded - F.lit(1 << 32)).otherwise(folded)
    return F.when(s.isNotNull(), signed)


def partition_for_hash_col(h: Column, count: int) -> Column:
    """:func:`partition_for_hash` as a Spark expression over a bigint hash column (same divergence)."""
    from pyspark.sql import functions as F

    return F.when(h == F.lit(_INT_MIN), F.lit(0)).otherwise(F.abs(h) % F.lit(count)).cast("int")


def deduplicate_messages(bronze_df: DataFrame) -> DataFrame:
    """One row per ``message_id``: the earliest ``ingest_time`` (then lowest delivery attempt).

    Pub/Sub delivers at least once; two deliveries of one message carry the same content, so
    which copy wins only matters for determinism.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    window = Window.partitionBy("message_id").orderBy(
        F.col("ingest_time").asc_nulls_last(), F.col("delivery_attempt").asc_nulls_last()
    )
    return (
        bronze_df.withColumn("_dedupe_rank", F.row_number().over(window))
        .where(F.col("_dedupe_rank") == 1)
        .drop("_dedupe_rank")
    )


def _append_data_hash(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: append ``_data_hash`` = ``Arrays.hashCode(_data)`` to every batch."""
    import pyarrow as pa

    for batch in batches:
        hashes = java_bytes_hash_array(batch.column(batch.schema.get_field_index("_data")))
        yield pa.RecordBatch.from_arrays(
            [*batch.columns, pa.array(hashes, type=pa.int32())],
            names=[*batch.schema.names, "_data_hash"],
        )


#: A JSON string token as Jackson writes it (escapes are a backslash plus one character, or \uXXXX
#: whose hex digits are ordinary characters). Unrolled and possessive: no backtracking.
_JSON_STRING_RE = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"'


def _json_inner(js: Column) -> Column:
    """``{…}`` or ``[…]`` → ``…`` (the JSON without its outer brackets)."""
    from pyspark.sql import functions as F

    return F.substring(js, F.lit(2), F.length(js) - 2)


def _base64_col(data: Column) -> Column:
    """Base64 of a binary column as Jackson writes it in JSON (one line)."""
    from pyspark.sql import functions as F

    # Spark may chunk base64 with CRLF (spark.sql.chunkBase64String.enabled); Jackson never does.
    # CR/LF are not in the base64 alphabet, so removing them is exact.
    return F.replace(F.base64(data), F.lit("\r\n"), F.lit(""))


#: Java regex of one character outside the BMP (Spark's ``rlike`` is java.util.regex).
_SUPPLEMENTARY_SQL_RE = "[\\x{10000}-\\x{10FFFF}]"


def _jackson_escapes_col(json_text: Column) -> Column:
    """:func:`~pubsub_connect.model.converters.escape_supplementary_as_jackson` as a Spark
    expression: characters outside the BMP become ``\\uXXXX\\uXXXX`` (upper-case hex).

    Spark's ``to_json`` writes them as UTF-8, Kafka's JsonConverter as escapes. Rows without such a
    character (almost all) only pay the ``rlike``; the others are split into characters (Java's
    ``.`` matches a whole surrogate pair) and each 4-byte one is replaced by the hex of its UTF-16
    halves. Apply to attribute/key JSON only, never to the base64 of the data (ASCII anyway).
    """
    from pyspark.sql import functions as F

    def escape(c: Column) -> Column:
        units = F.hex(F.encode(c, "UTF-16BE"))
        pair = F.concat(F.lit("\\u"), F.substring(units, 1, 4), F.lit("\\u"), F.substring(units, 5, 4))
        return F.when(F.octet_length(c) == F.lit(4), pair).otherwise(c)

    characters = F.regexp_extract_all(json_text, F.lit("(?s)(.)"), 1)
    escaped = F.array_join(F.transform(characters, escape), "")
    return F.when(json_text.rlike(_SUPPLEMENTARY_SQL_RE), escaped).otherwise(json_text)


def _json_envelope_col(schema: Schema, payload: Column, schemas: bool) -> Column:
    """JsonConverter bytes of a value with a fixed ``schema`` from its JSON ``payload`` text."""
    from pyspark.sql import functions as F

    if not schemas:
        return F.encode(payload, "UTF-8")
    return F.encode(F.concat(F.lit(f'{{"schema":{schema_to_json(schema)},"payload":'), payload, F.lit("}")), "UTF-8")


def key_col(key: Column, settings: CpsSourceSettings) -> Column:
    """:func:`serialize_key` as a Spark expression over the string key (without its error case:
    a number/boolean converter's key is checked separately)."""
    from pyspark.sql import functions as F

    if settings.key_converter == JSON_CONVERTER:
        # to_json of a one-element array is Jackson's text of the string (or ``null``) in brackets.
        payload = _jackson_escapes_col(_json_inner(F.to_json(F.array(key))))
        return _json_envelope_col(OPTIONAL_STRING, payload, settings.key_schemas_enable)
    return F.encode(key, "UTF-8")


def bytes_value_col(data: Column, settings: CpsSourceSettings) -> Column:
    """:func:`serialize_bytes_value` as a Spark expression over the binary data."""
    from pyspark.sql import functions as F

    if settings.value_converter == JSON_CONVERTER:
        payload = F.concat(F.lit('"'), _base64_col(data), F.lit('"'))
        return _json_envelope_col(BYTES, payload, settings.value_schemas_enable)
    return data


def _struct_json_col(entries: Column, made: Column, ordering_key: Column, data: Column, schemas: bool) -> Column:
    """JsonConverter bytes of the STRUCT value, from the sorted carried attribute ``entries``.

    Spark's ``to_json`` is Jackson, like Kafka's JsonConverter, so every JSON string here (names
    and values) is escaped exactly as Kafka would. The per-row schema varies with the attribute
    names, so the envelope is concatenated from fixed text and ``to_json`` pieces rather than
    built as one Spark struct: measured ~2x faster than higher-order functions, which Spark runs
    interpreted. Assembling text also means a dead-letter row's clashing names (``message``,
    ``orderingKey``) can never raise a duplicate-map-key error for the whole batch.
    """
    from pyspark.sql import functions as F

    def attribute_field(json_name: str) -> str:
        type_, optional = ATTRIBUTE_FIELD_SCHEMA.type.value, str(ATTRIBUTE_FIELD_SCHEMA.optional).lower()
        return f'{{"type":"{type_}","optional":{optional},"field":{json_name}}}'

    b64 = _base64_col(data)
    has_attributes = F.size(entries) > 0
    attributes = F.when(
        has_attributes,
        F.concat(F.lit(","), _jackson_escapes_col(_json_inner(F.to_json(F.map_from_entries(entries))))),
    ).otherwise(F.lit(""))
    ordering = F.when(
        made,
        F.concat(
            F.lit(f',"{ORDERING_KEY_ATTRIBUTE}":'),
            _jackson_escapes_col(_json_inner(F.to_json(F.array(ordering_key)))),
        ),
    ).otherwise(F.lit(""))
    payload = F.concat(F.lit(f'{{"{MESSAGE_FIELD}":"'), b64, F.lit('"'), attributes, ordering, F.lit("}"))
    if not schemas:
        return F.encode(payload, "UTF-8")
    # to_json(names) is ["n1","n2",…]; wrap every string token into its field schema object.
    fields = F.when(
        has_attributes,
        F.concat(
            F.lit(","),
            _json_inner(
                F.regexp_replace(
                    _jackson_escapes_col(F.to_json(entries["key"])), _JSON_STRING_RE, attribute_field("$0")
                )
            ),
        ),
    ).otherwise(F.lit(""))
    ordering_field = F.when(made, F.lit("," + attribute_field(f'"{ORDERING_KEY_ATTRIBUTE}"'))).otherwise(F.lit(""))
    message_field = f'{{"type":"bytes","optional":false,"field":"{MESSAGE_FIELD}"}}'
    envelope = F.concat(
        F.lit('{"schema":{"type":"struct","fields":[' + message_field),
        fields,
        ordering_field,
        F.lit('],"optional":false},"payload":'),
        payload,
        F.lit("}"),
    )
    return F.encode(envelope, "UTF-8")


def _staged_input() -> StructType:
    """The columns `_staged` selects first (the Arrow hash step is told them, see `frames`)."""
    from pyspark.sql.types import BinaryType, LongType, MapType, StringType, StructField, StructType, TimestampType

    attributes = MapType(StringType(), StringType())
    return StructType([
        StructField("message_id", StringType()), StructField("_publish_time", TimestampType()),
        StructField("_attributes", attributes), StructField("_subscription", StringType()),
        StructField("_data", BinaryType()), StructField("_attrs", attributes), StructField("_ok", StringType()),
        StructField("_publish_ms", LongType()),
    ])


def _staged(messages: DataFrame, settings: CpsSourceSettings) -> DataFrame:
    """Rows of unique messages with every output column computed except the round-robin partition.

    Helper columns: ``_rr`` (row takes the round-robin counter), ``_publish_ms`` and
    ``message_id`` (its order), ``_partition_fixed`` (partition of the other schemes), and
    ``_publish_time``, ``_attributes``, ``_subscription`` carried through for the outbox and the
    dead letters of a streaming conversion.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, StructField, StructType

    s = settings
    struct_mode = not s.kafka_record_headers
    df = messages.select(
        F.col("message_id"),
        F.col("publish_time").alias("_publish_time"),
        F.col("attributes").alias("_attributes"),
        F.col("subscription").alias("_subscription"),
        F.coalesce(F.col("data"), F.lit(b"")).alias("_data"),
        F.coalesce(F.col("attributes"), F.create_map().cast(_ATTRIBUTES_TYPE)).alias("_attrs"),
        F.coalesce(F.col("ordering_key"), F.lit("")).alias("_ok"),
        F.unix_millis(F.col("publish_time")).alias("_publish_ms"),
    )
    if s.partition_scheme == HASH_VALUE:
        from pubsub_connect.model.frames import map_in_arrow

        input_schema = _staged_input()
        with_hash = StructType([*input_schema.fields, StructField("_data_hash", IntegerType(), nullable=False)])
        df = map_in_arrow(df, _append_data_hash, with_hash, input_schema)
    data, attrs, ok = F.col("_data"), F.col("_attrs"), F.col("_ok")

    # Computed in stages so that the expensive array expressions are materialised once per row
    # (Spark does not collapse a projection whose non-trivial column is referenced repeatedly).
    if s.kafka_key_attribute == ORDERING_KEY_ATTRIBUTE:
        key = ok
    elif s.kafka_key_attribute is None:
        key = F.lit(None).cast("string")
    else:
        key = F.try_element_at(attrs, F.lit(s.kafka_key_attribute))
    if s.kafka_timestamp_attribute is not None:
        digits, ascii_digits, _ = _unicode_digits()
        raw_ts = F.translate(F.try_element_at(attrs, F.lit(s.kafka_timestamp_attribute)), digits, ascii_digits)
        parsed_ts = F.when(raw_ts.rlike(_LONG_SQL_RE), raw_ts.try_cast("bigint"))
    else:
        parsed_ts = F.lit(None).cast("bigint")
    # sort_array, not array_sort: Spark 4 gives array_sort an interpreted comparator lambda.
    entries = F.sort_array(F.map_entries(attrs))
    if s.kafka_key_attribute is not None:
        key_attribute = s.kafka_key_attribute
        entries = F.filter(entries, lambda e: e["key"] != F.lit(key_attribute))
    df = df.select(
        "*",
        key.alias("_key"),
        parsed_ts.alias("_parsed_ts"),
        (F.lit(s.make_ordering_key_attribute) & (ok != F.lit(""))).alias("_made"),
        entries.alias("_entries"),
    )

    parsed, made, entries = F.col("_parsed_ts"), F.col("_made"), F.col("_entries")
    standard = sorted(s.standard_attributes)
    custom = (F.exists(F.map_keys(attrs), lambda k: ~k.isin(*standard)) if standard else F.size(attrs) > 0) | made
    clash = F.when(F.exists(entries, lambda e: e["key"] == F.lit(MESSAGE_FIELD)), F.lit(MESSAGE_FIELD)).when(
        made & F.exists(entries, lambda e: e["key"] == F.lit(ORDERING_KEY_ATTRIBUTE)),
        F.lit(ORDERING_KEY_ATTRIBUTE),
    )
    df = df.select(
        "*",
        custom.alias("_custom"),
        (parsed.isNotNull() & ((parsed < NO_TIMESTAMP) | (parsed > F.lit(MAX_TIMESTAMP_MS)))).alias("_bad_ts"),
        (clash if struct_mode else F.lit(None).cast("string")).alias("_clash"),
    )

    bad_ts, duplicate, clash = (
        F.col("_bad_ts"),
        F.col("_custom") & F.col("_clash").isNotNull(),
        F.col("_clash"),
    )
    ts_prefix, ts_suffix = _timestamp_error_message(s.kafka_timestamp_attribute or "", "\0").split("\0")
    dup_parts = _duplicate_field_message("\0").split("\0")
    key_unwritable = s.key_converter in NUMBER_CONVERTER_TYPES or s.key_converter == BOOLEAN_CONVERTER
    bad_key = F.col("_key").isNotNull() & F.lit(key_unwritable)
    error_class = (
        F.when(bad_ts, F.lit(InvalidTimestampError.error_class))
        .when(duplicate, F.lit(DuplicateFieldError.error_class))
        .when(bad_key, F.lit(KeyConverterError.error_class))
    )
    error_message = (
        F.when(bad_ts, F.concat(F.lit(ts_prefix), parsed.cast("string"), F.lit(ts_suffix)))
        .when(duplicate, F.concat(F.lit(dup_parts[0]), clash, F.lit(dup_parts[1]), clash, F.lit(dup_parts[2])))
        .when(bad_key, F.lit(_key_converter_message(s.key_converter)))
    )
    df = df.select(
        "*",
        F.when(parsed != F.lit(NO_TIMESTAMP), parsed).when(parsed.isNull(), F.col("_publish_ms")).alias("_ts_ms"),
        error_class.alias("error_class"),
        error_message.alias("error_message"),
    )
    ok_error = F.col("error_class").isNull()


    empty_headers = F.array().cast(HEADERS_TYPE)
    if struct_mode:
        headers = empty_headers
        needs_struct = F.col("_custom") & ok_error
        struct_value = _struct_json_col(F.col("_entries"), F.col("_made"), ok, data, s.value_schemas_enable)
        value = F.when(needs_struct, struct_value).otherwise(bytes_value_col(data, s))
    else:
        value = bytes_value_col(data, s)
        carried = F.transform(
            F.col("_entries"),
            lambda e: F.struct(e["key"].alias("key"), F.encode(e["value"], "UTF-8").alias("value")),
        )
        ordering_header = F.array(
            F.struct(F.lit(ORDERING_KEY_ATTRIBUTE).alias("key"), F.encode(ok, "UTF-8").alias("value"))
        )
        with_ok = F.when(F.col("_made"), F.concat(carried, ordering_header)).otherwise(carried)
        headers = F.when(F.col("_custom") & ok_error, with_ok.cast(HEADERS_TYPE)).otherwise(empty_headers)

    scheme, count = s.partition_scheme, s.partition_count
    if scheme == HASH_KEY:
        fixed = F.when(F.col("_key").isNull(), F.lit(0)).otherwise(
            partition_for_hash_col(java_string_hash_col(F.col("_key")), count)
        )
    elif scheme == HASH_VALUE:
        fixed = partition_for_hash_col(F.col("_data_hash").cast("bigint"), count)
    elif scheme == ORDERING_KEY:
        fixed = F.when(ok != F.lit(""), partition_for_hash_col(java_string_hash_col(ok), count))
    else:
        fixed = F.lit(None)
    if scheme == ROUND_ROBIN:
        rr = ok_error
    elif scheme == ORDERING_KEY:
        rr = ok_error & (ok == F.lit(""))
    else:
        rr = F.lit(False)

    return df.select(
        # Dead-letter rows keep the key's UTF-8 and the raw data, whatever the converters.
        F.when(ok_error, key_col(F.col("_key"), s)).otherwise(F.encode(F.col("_key"), "UTF-8")).alias("key"),
        F.when(ok_error, value).otherwise(data).alias("value"),
        headers.alias("headers"),
        F.when(ok_error, fixed).cast("int").alias("_partition_fixed"),
        F.timestamp_millis(F.when(ok_error, F.col("_ts_ms"))).alias("timestamp"),
        F.col("message_id"),
        F.col("error_class"),
        F.col("error_message"),
        rr.alias("_rr"),
        F.col("_publish_ms"),
        F.col("_publish_time"),
        F.col("_attributes"),
        F.col("_subscription"),
    )


def to_kafka_outbox(bronze_df: DataFrame, settings: CpsSourceSettings, start_counter: int = 0) -> DataFrame:
    """Pub/Sub bronze rows → Kafka outbox rows (:data:`OUTBOX_COLUMNS`), one per ``message_id``.

    Pure Spark expressions (JsonConverter envelopes included: Spark's ``to_json`` escapes strings
    like Kafka's Jackson), except ``hash_value``, which appends ``Arrays.hashCode`` of the data in
    one vectorised Arrow/numpy pass per batch (``mapInArrow``; the package must be importable on
    workers).

    ``bronze_df`` must be a static DataFrame (window functions): in a streaming query call this on
    the micro-batch inside ``foreachBatch``. De-duplication is within the batch only; a message
    redelivered in a later batch (crash between the bronze commit and the ack) must be filtered
    by the caller, e.g. with an anti-join on the outbox's ``message_id``.

    Round robin: the i-th counter-taking row in (publish time ms, message_id) order gets partition
    ``(start_counter + i) % count``; use :func:`next_round_robin_counter` to carry the counter to
    the next batch. Raises :class:`UnsupportedConverterError` for a converter that cannot write
    the struct values (see :func:`check_value_converter`).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    check_value_converter(settings)
    staged = _staged(deduplicate_messages(bronze_df), settings)
    partition = F.col("_partition_fixed")
    if settings.partition_scheme in (ROUND_ROBIN, ORDERING_KEY):
        # A global order needs one partition: every row passes through one task here. Joining back
        # slots computed on (message_id, publish ms) alone was measured slower (second scan and
        # de-duplication of the input, plus the join) for 1 KB messages.
        count = settings.partition_count
        order = Window.partitionBy("_rr").orderBy(
            F.col("_publish_ms").asc_nulls_first(), F.col("message_id").asc_nulls_first()
        )
        slot = F.pmod(F.lit(start_counter % count) + F.row_number().over(order) - 1, F.lit(count))
        partition = F.when(F.col("_rr"), slot).otherwise(partition)
    return staged.select(*_outbox_columns(partition))


def _outbox_columns(partition: Column) -> list[Any]:
    """:data:`OUTBOX_COLUMNS` of a staged frame, the partition given."""
    from pyspark.sql import functions as F

    return ["key", "value", "headers", partition.cast("int").alias("partition"), "timestamp", "message_id",
            F.col("error_class").cast("string"), F.col("error_message").cast("string")]


def to_kafka_outbox_stream(messages: DataFrame, settings: CpsSourceSettings) -> DataFrame:
    """Pub/Sub bronze rows → Kafka outbox rows for a *streaming* conversion (a declarative
    pipeline's streaming table), where neither a window over the batch nor a counter carried
    from one micro-batch to the next exists.

    ``messages`` must already hold one row per ``message_id`` (e.g. through
    ``dropDuplicatesWithinWatermark``). Every column is computed as in :func:`to_kafka_outbox`,
    except the partition of a row that takes the round-robin path (``round_robin``, and
    ``ordering_key`` without an ordering key): ``pmod(xxhash64(message_id), kafka.partition.count)``,
    an even spread on average that depends on nothing outside the row.

    Columns: :data:`OUTBOX_COLUMNS` plus ``publish_time`` (for the outbox), and ``data``,
    ``attributes``, ``subscription`` (for the dead letters: the message as received).
    """
    from pyspark.sql import functions as F

    check_value_converter(settings)
    staged = _staged(messages, settings)
    spread = F.pmod(F.xxhash64(F.col("message_id")), F.lit(settings.partition_count))
    partition = F.when(F.col("_rr"), spread).otherwise(F.col("_partition_fixed"))
    return staged.select(
        *_outbox_columns(partition),
        F.col("_publish_time").alias("publish_time"),
        F.col("value").alias("data"),
        F.col("_attributes").alias("attributes"),
        F.col("_subscription").alias("subscription"),
    )


def next_round_robin_counter(bronze_df: DataFrame, settings: CpsSourceSettings, start_counter: int) -> int:
    """The counter after this batch (mod ``kafka.partition.count``): ``start_counter`` plus the
    rows that took the round-robin path. Runs a Spark count; not needed for other schemes."""
    if settings.partition_scheme not in (ROUND_ROBIN, ORDERING_KEY):
        return start_counter % settings.partition_count
    from pyspark.sql import functions as F

    taken = _staged(deduplicate_messages(bronze_df), settings).where(F.col("_rr")).count()
    return (start_counter + taken) % settings.partition_count
