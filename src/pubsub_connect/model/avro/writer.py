"""Connect values → Schema Registry Avro, as a source connector's worker writes them with
Confluent's ``AvroConverter``: the Avro schema ``AvroData`` derives from the Connect schema (the
text registered), the subject it is registered under, and the binary datum — one record at a
time, the reference the Spark expressions (:mod:`.written_columns`) are held against.

Why only the schemas sources write: the Cloud Pub/Sub source hands its worker an optional string
key, the message bytes, or a struct of the bytes and string attributes; nothing else needs a
schema here.

The rules (Confluent's ``AvroData.fromConnectSchema``, default converter settings):

- primitives as Avro's primitives (``STRING`` → ``"string"``, ``BYTES`` → ``"bytes"``, …);
- an optional schema without a default → the union ``["null", T]`` (null first);
- an unnamed STRUCT → a record ``ConnectDefault`` in namespace ``io.confluent.connect.avro``,
  its fields in order, each field's schema as above;
- a field name Avro does not allow (first character a letter or ``_``, then letters, digits or
  ``_``, in the UTF-16 units Java checks) fails the schema (:class:`InvalidAvroNameError`), as
  Avro's ``Schema.Field`` constructor does under the converter.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pubsub_connect.model.avro.wire import frame
from pubsub_connect.model.connect import DataError, Schema, Struct, Type

#: What ``AvroData`` names an unnamed STRUCT's record.
DEFAULT_RECORD_NAME = "ConnectDefault"
DEFAULT_NAMESPACE = "io.confluent.connect.avro"

_PRIMITIVE_NAMES = {Type.BOOLEAN: "boolean", Type.INT32: "int", Type.INT64: "long", Type.FLOAT32: "float",
                    Type.FLOAT64: "double", Type.BYTES: "bytes", Type.STRING: "string"}

#: ``*.subject.name.strategy`` classes (Confluent's), by their simple names.
TOPIC_NAME_STRATEGY = "io.confluent.kafka.serializers.subject.TopicNameStrategy"
RECORD_NAME_STRATEGY = "io.confluent.kafka.serializers.subject.RecordNameStrategy"
TOPIC_RECORD_NAME_STRATEGY = "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy"
SUBJECT_NAME_STRATEGIES = (TOPIC_NAME_STRATEGY, RECORD_NAME_STRATEGY, TOPIC_RECORD_NAME_STRATEGY)


#: How a connector gets the id its converter writes: ``(side, subject, schema text) → id``, side
#: ``key`` or ``value`` (whose converter settings apply). Raises :class:`SchemaRegistrationError`
#: when the registry refuses, ``ConnectionError`` when it cannot be reached.
SchemaIds = Callable[[str, str, str], int]


class InvalidAvroNameError(DataError):
    """A Connect field name that Avro refuses (Avro's ``SchemaParseException``)."""

    error_class = "SchemaParseException"


class SchemaRegistrationError(DataError):
    """The registry refused the written schema, or (without auto-registration) does not have it
    under its subject: the records written with it are dead letters with the registry's line."""

    error_class = "SerializationException"


def avro_name_problem(name: str) -> str | None:
    """Avro's line for a name it refuses (``Schema.validateName``), or None for a valid one.

    Java checks UTF-16 units with ``Character.isLetter``/``isLetterOrDigit``: a character outside
    the BMP is two surrogate units, neither a letter."""
    if not name:
        return "Empty name"
    first = name[0]
    if not (_java_letter(first) or first == "_"):
        return f"Illegal initial character: {name}"
    if any(not (_java_letter(c) or _java_digit(c) or c == "_") for c in name[1:]):
        return f"Illegal character in: {name}"
    return None


def _java_letter(c: str) -> bool:
    return ord(c) <= 0xFFFF and unicodedata.category(c).startswith("L")


def _java_digit(c: str) -> bool:
    return ord(c) <= 0xFFFF and unicodedata.category(c) == "Nd"


def avro_schema(schema: Schema) -> Any:
    """The Avro schema (as JSON values) ``AvroData`` derives from ``schema``."""
    if schema.type is Type.STRUCT:
        fields = []
        for f in schema.fields:
            problem = avro_name_problem(f.name)
            if problem is not None:
                raise InvalidAvroNameError(problem)
            fields.append({"name": f.name, "type": avro_schema(f.schema)})
        namespace, _, name = (schema.name or f"{DEFAULT_NAMESPACE}.{DEFAULT_RECORD_NAME}").rpartition(".")
        base: Any = {"type": "record", "name": name, **({"namespace": namespace} if namespace else {}),
                     "fields": fields}
    elif schema.type in _PRIMITIVE_NAMES and schema.name is None and not schema.parameters:
        base = _PRIMITIVE_NAMES[schema.type]
    else:
        raise DataError(f"a {schema.type.name} schema is not one the sources write in Avro")
    return ["null", base] if schema.optional else base


def avro_schema_text(schema: Schema) -> str:
    """:func:`avro_schema` as Avro's ``Schema.toString()`` prints it (compact JSON): the text
    registered."""
    return json.dumps(avro_schema(schema), separators=(",", ":"), ensure_ascii=False)


def subject_name(strategy: str, topic: str, is_key: bool, schema_text: str) -> str:
    """The subject ``strategy`` registers ``schema_text`` under for ``topic``: ``<topic>-key`` /
    ``<topic>-value`` (TopicNameStrategy), the record's full name (RecordNameStrategy), or both
    joined by ``-`` (TopicRecordNameStrategy). The record strategies take records only: anything
    else fails its records with Confluent's line (:class:`SchemaRegistrationError`)."""
    side = "key" if is_key else "value"
    if strategy == TOPIC_NAME_STRATEGY:
        return f"{topic}-{side}"
    if strategy not in SUBJECT_NAME_STRATEGIES:
        raise ValueError(f"subject.name.strategy={strategy} is not one of {', '.join(SUBJECT_NAME_STRATEGIES)}")
    node = json.loads(schema_text)
    if not isinstance(node, dict) or node.get("type") != "record":
        raise SchemaRegistrationError(f"In configuration {side}.subject.name.strategy = {strategy}, the message "
                                      f"{side} must only be a record schema")
    namespace = node.get("namespace")
    name = f"{namespace}.{node['name']}" if namespace else str(node["name"])
    return name if strategy == RECORD_NAME_STRATEGY else f"{topic}-{name}"


# ----------------------------------------------------------------------------------------------
# The binary encoding
# ----------------------------------------------------------------------------------------------


def zigzag_varint(n: int) -> bytes:
    """Avro's ``int``/``long`` encoding: zig-zag, then 7 bits per byte, low groups first."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        group = z & 0x7F
        z >>= 7
        if z:
            out.append(group | 0x80)
        else:
            out.append(group)
            return bytes(out)


def encode_datum(schema: Schema, value: Any) -> bytes:
    """``value`` in Avro's binary encoding under :func:`avro_schema` of ``schema``."""
    if schema.optional:
        return b"\x00" if value is None else b"\x02" + encode_datum(_required(schema), value)
    if value is None:
        raise DataError(f"a null value for a required {schema.type.name} schema")
    if schema.type is Type.STRUCT:
        assert isinstance(value, Struct)
        return b"".join(encode_datum(f.schema, value.get(f.name)) for f in schema.fields)
    if schema.type is Type.BYTES:
        data = bytes(value)
        return zigzag_varint(len(data)) + data
    if schema.type is Type.STRING:
        text = value.encode("utf-8")
        return zigzag_varint(len(text)) + text
    raise DataError(f"a {schema.type.name} value is not one the sources write in Avro")


def _required(schema: Schema) -> Schema:
    return replace(schema, optional=False)


def written(schema_ids: SchemaIds, side: str, strategy: str, topic: str, schema: Schema, value: Any) -> bytes | None:
    """What the converter writes for a key (``side="key"``) or value: null for a null value
    (nothing registered, nothing framed), else the datum framed with the id ``schema_ids`` gives
    its schema under its subject."""
    if value is None:
        return None
    return schema_frame(schema_ids, side, strategy, topic, avro_schema_text(schema)) + top_level_datum(schema, value)


def schema_frame(schema_ids: SchemaIds, side: str, strategy: str, topic: str, text: str) -> bytes:
    """The 5 bytes that frame a ``side`` (``key``/``value``) written with the schema ``text``: its
    id under the subject ``strategy`` names for ``topic``."""
    return frame(schema_ids(side, subject_name(strategy, topic, side == "key", text), text), b"")


def top_level_datum(schema: Schema, value: Any) -> bytes:
    """The datum after the header: Confluent's serializer writes a top-level ``"bytes"`` value's
    bytes as they are, without Avro's length (its readers expect that, as ours do); everything
    else in Avro's encoding."""
    if schema.type is Type.BYTES and not schema.optional:
        return bytes(value)
    return encode_datum(schema, value)
