"""The source connector's options, record types, errors and constants: what the per-record
reference and the batch implementation share.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pubsub_connect.model.avro.writer import TOPIC_NAME_STRATEGY
from pubsub_connect.model.connect import BYTES, STRING, DataError, Field, Schema, Type
from pubsub_connect.model.converters import (
    BYTE_ARRAY_CONVERTER,
    JSON_CONVERTER,
    REGISTRY_AVRO_CONVERTERS,
    REGISTRY_CONVERTERS,
    REGISTRY_JSON_SCHEMA_CONVERTERS,
)

if TYPE_CHECKING:
    pass


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



#: ``messageBodyFormat``: Google's mapping (``connect``: the data as BYTES or in a struct with the
#: attributes), or (``avro``, an extension) the data as the Avro datum Pub/Sub validated it as, for
#: a subscription of a topic with an Avro schema: written with that schema, registered.
CONNECT_BODY = "connect"
AVRO_BODY = "avro"
MESSAGE_BODY_FORMATS = (CONNECT_BODY, AVRO_BODY)
#: The attributes Pub/Sub adds to a message it validated against its topic's schema.
SCHEMA_NAME_ATTRIBUTE = "googclient_schemaname"
SCHEMA_REVISION_ATTRIBUTE = "googclient_schemarevisionid"
SCHEMA_ENCODING_ATTRIBUTE = "googclient_schemaencoding"


def struct_schema(names: list[str] | tuple[str, ...]) -> Schema:
    """The STRUCT value's schema for the names of its attribute fields (``orderingKey`` included
    when it is one): ``message`` first."""
    return Schema(Type.STRUCT, fields=(Field(MESSAGE_FIELD, BYTES),
                                       *(Field(name, ATTRIBUTE_FIELD_SCHEMA) for name in names)))


INT_MIN = -(1 << 31)
MASK32 = 0xFFFFFFFF
LONG_MIN = -(1 << 63)
LONG_MAX = (1 << 63) - 1
#: Java ``Long.valueOf`` syntax, checked after other decimal digits became ASCII (see
#: :func:`unicode_digits`). ``\Z`` (Python) / ``\z`` (Java, used in Spark) anchor at the very end:
#: ``$`` would accept a trailing newline that Java rejects.
LONG_RE = re.compile(r"[+-]?[0-9]+\Z")
LONG_SQL_RE = r"^[+-]?[0-9]+\z"


@functools.cache
def unicode_digits() -> tuple[str, str, dict[int, int]]:
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
ATTRIBUTES_TYPE = "map<string,string>"


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


class StructConverterError(DataError):
    """``kafka.record.headers=false``, a message with custom attributes (a STRUCT value) and a
    ``value.converter`` that writes no STRUCT: Google's task fails on it (``ByteArrayConverter``)
    or writes Java's ``Struct.toString()``, which loses the data (``StringConverter``)."""

    error_class = "StructConverterError"


class MessageSchemaError(DataError):
    """``messageBodyFormat=avro``: a message that is not a binary Avro datum of a schema Pub/Sub
    names (no schema attributes, JSON encoding, a schema that is not Avro)."""

    error_class = "MessageSchemaError"


def message_schema_problem(name: str | None, revision: str | None, encoding: str | None) -> str | None:
    """Why a message with these schema attributes has no Avro datum to write (None: it has one)."""
    if not name or not revision:
        return (f"the message has no {SCHEMA_NAME_ATTRIBUTE}/{SCHEMA_REVISION_ATTRIBUTE} attributes: it was not "
                "validated against a topic's schema (messageBodyFormat=avro)")
    if encoding != "BINARY":
        return (f"the message is {encoding or 'un'}-encoded under schema {name}@{revision}; messageBodyFormat=avro "
                "writes Avro's binary encoding (set the topic's schema encoding to BINARY)")
    return None


#: How a connector reads the schema revisions its messages name: ``(schema name, revision id) →
#: (type, definition)``, as Pub/Sub's schema service holds them.
MessageSchemas = Callable[[str, str], tuple[str, str]]


def written_definition(name: str, revision: str, kind: str, definition: str) -> str:
    """The Avro schema text a message of this revision is written with (compact JSON), or
    :class:`MessageSchemaError` for one that cannot be: not Avro, or a top-level ``bytes``
    (whose datum Confluent's readers take without Avro's length)."""
    if kind != "AVRO":
        raise MessageSchemaError(f"schema {name}@{revision} is a {kind} schema; messageBodyFormat=avro writes Avro")
    parsed = json.loads(definition)
    if parsed == "bytes" or parsed == {"type": "bytes"}:
        raise MessageSchemaError(f"schema {name}@{revision} is a top-level bytes schema: its datums are the message "
                                 "data itself (use messageBodyFormat=connect)")
    return json.dumps(parsed, separators=(",", ":"), ensure_ascii=False)


class DuplicateFieldError(DataError):
    """An attribute would become a second struct field named ``message`` or ``orderingKey``."""

    error_class = "DuplicateFieldError"


def timestamp_error_message(attribute: str, value: int | str) -> str:
    return (
        f"kafka.timestamp.attribute '{attribute}' = {value} is outside the Kafka timestamp range "
        f"0..{MAX_TIMESTAMP_MS} ms"
    )


def key_converter_message(converter: str) -> str:
    short = converter.rsplit(".", 1)[-1]
    return (
        f"key.converter={short} cannot write the message's key, a string; "
        "use StringConverter or JsonConverter, or unset kafka.key.attribute"
    )


def struct_converter_message(converter: str) -> str:
    short = converter.rsplit(".", 1)[-1]
    return (
        f"value.converter={short} cannot write a message with attributes (a STRUCT value with "
        "kafka.record.headers=false); use JsonConverter or set kafka.record.headers=true"
    )


def duplicate_field_message(name: str) -> str:
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
    #: ``ByteArrayConverter`` (Connect's default) writes the key as UTF-8 here: see the package
    #: docstring for why that differs from the original.
    key_converter: str = BYTE_ARRAY_CONVERTER
    key_schemas_enable: bool = True
    #: The Kafka topic written (``kafka.topic``): the Schema Registry converters' subjects name it.
    kafka_topic: str = ""
    key_subject_strategy: str = TOPIC_NAME_STRATEGY
    value_subject_strategy: str = TOPIC_NAME_STRATEGY
    message_body_format: str = CONNECT_BODY

    def __post_init__(self) -> None:
        if self.message_body_format not in MESSAGE_BODY_FORMATS:
            raise ValueError(f"messageBodyFormat={self.message_body_format!r} is not one of "
                             f"{', '.join(MESSAGE_BODY_FORMATS)}")
        if self.message_body_format == AVRO_BODY and not (
                self.value_converter in REGISTRY_AVRO_CONVERTERS and self.kafka_record_headers):
            raise ValueError("messageBodyFormat=avro writes each message's Avro datum as the record's value: it needs "
                             "value.converter=AvroConverter and kafka.record.headers=true (the attributes as headers)")
        if self.partition_scheme not in PARTITION_SCHEMES:
            raise ValueError(
                f"kafka.partition.scheme={self.partition_scheme!r} is not one of {', '.join(PARTITION_SCHEMES)}"
            )
        if isinstance(self.partition_count, bool) or not isinstance(self.partition_count, int):
            raise ValueError(f"kafka.partition.count={self.partition_count!r} is not an integer")
        if self.partition_count < 1:
            raise ValueError(f"kafka.partition.count={self.partition_count} must be at least 1")

    def subject_strategy(self, side: str) -> str:
        """``<side>.converter.<side>.subject.name.strategy`` (``side``: ``key`` or ``value``)."""
        return self.key_subject_strategy if side == "key" else self.value_subject_strategy

    @property
    def registry_key(self) -> bool:
        """Keys are written by a Schema Registry converter (Avro or JSON Schema)."""
        return self.key_converter in REGISTRY_CONVERTERS

    @property
    def registry_value(self) -> bool:
        """Values are written by a Schema Registry converter (Avro or JSON Schema)."""
        return self.value_converter in REGISTRY_CONVERTERS

    def json_schema(self, side: str) -> bool:
        """``side`` (``key``/``value``) is written by the JSON Schema converter (else Avro)."""
        return (self.key_converter if side == "key" else self.value_converter) in REGISTRY_JSON_SCHEMA_CONVERTERS

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
