"""Kafka Connect converters: Kafka bytes <-> Connect :class:`SchemaAndValue`, plus Java text forms.

Why this exists: a ``.properties`` file written for Google's connector names its converters by
Java class (``key.converter`` / ``value.converter``), and the Pub/Sub data model is defined on the
*typed* values those converters produce (an INT32 body is four big-endian bytes, a STRUCT becomes
attributes, ...). To publish the same messages we must decode Kafka bytes exactly the way the
Connect converters do, and render values as text the way Java's ``toString`` does.

Behaviour follows Apache Kafka's converters, with one deliberate difference: Kafka's
``JsonConverter`` silently coerces mistyped payloads (``"abc"`` for an ``int32`` becomes ``0``,
``300`` for an ``int8`` wraps to ``44``); here any payload that does not fit its schema raises
:class:`ConverterError`, so the record goes to the dead-letter table instead of publishing garbage.

Null handling: ``None`` bytes always give ``SchemaAndValue(None, None)`` (Kafka's byte/string/number
converters would attach an optional schema to the null; no caller can tell the difference).

Also here, because both converters and the sink data model need them: :func:`java_text`
(``toString`` of a Connect value; numbers via :mod:`pubsub_connect.model.javatext`, re-exported)
and :func:`dump_json` (compact JSON the way Kafka's JsonConverter/Jackson writes it).

Why one module of this length: it holds one contract, Kafka Connect's converter semantics, and
:data:`CONVERTER_FACTORIES` is the one table of what exists. Most of the length is
``JsonConverter``'s two halves (writing Jackson's JSON, reading the schema envelope), which share
the value checks and :class:`ConverterError` messages with the other converters; split apart,
the rules a record is judged by would sit in several files that must change together.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import math
import re
import struct
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Protocol

from pubsub_connect.model.connect import (
    DATE,
    MILLIS_PER_DAY,
    WIDTH,
    DataError,
    Field,
    JavaDate,
    Schema,
    SchemaAndValue,
    Struct,
    Type,
)
from pubsub_connect.model.error_text import collapse
from pubsub_connect.model.javatext import java_double_to_string, java_float_to_string, to_float32

BYTE_ARRAY_CONVERTER = "org.apache.kafka.connect.converters.ByteArrayConverter"
STRING_CONVERTER = "org.apache.kafka.connect.storage.StringConverter"
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
SHORT_CONVERTER = "org.apache.kafka.connect.converters.ShortConverter"
INTEGER_CONVERTER = "org.apache.kafka.connect.converters.IntegerConverter"
LONG_CONVERTER = "org.apache.kafka.connect.converters.LongConverter"
FLOAT_CONVERTER = "org.apache.kafka.connect.converters.FloatConverter"
DOUBLE_CONVERTER = "org.apache.kafka.connect.converters.DoubleConverter"
BOOLEAN_CONVERTER = "org.apache.kafka.connect.converters.BooleanConverter"

#: Connect's default ``header.converter``: header text re-parsed (sinks) and BYTES headers written
#: as Base64 text (sources).
SIMPLE_HEADER_CONVERTER = "org.apache.kafka.connect.storage.SimpleHeaderConverter"
#: Every accepted ``header.converter`` (what each means per connector: the config key's doc).
KNOWN_HEADER_CONVERTERS: tuple[str, ...] = (SIMPLE_HEADER_CONVERTER, STRING_CONVERTER, BYTE_ARRAY_CONVERTER)

#: Google's connector default for both ``key.converter`` and ``value.converter``.
DEFAULT_CONVERTER = BYTE_ARRAY_CONVERTER

#: Fixed-width number converters and the Connect type each produces (big-endian encodings).
NUMBER_CONVERTER_TYPES: dict[str, Type] = {
    SHORT_CONVERTER: Type.INT16,
    INTEGER_CONVERTER: Type.INT32,
    LONG_CONVERTER: Type.INT64,
    FLOAT_CONVERTER: Type.FLOAT32,
    DOUBLE_CONVERTER: Type.FLOAT64,
}

_INT_RANGES = {
    Type.INT8: (-(1 << 7), (1 << 7) - 1),
    Type.INT16: (-(1 << 15), (1 << 15) - 1),
    Type.INT32: (-(1 << 31), (1 << 31) - 1),
    Type.INT64: (-(1 << 63), (1 << 63) - 1),
}
_FLOAT_FORMATS = {Type.FLOAT32: ">f", Type.FLOAT64: ">d"}
_BYTES_TYPES = (bytes, bytearray, memoryview)


class ConverterError(DataError):
    """Kafka bytes (or a Connect value) that the configured converter cannot convert."""

    error_class = "ConverterError"


# --------------------------------------------------------------------------------------------
# Java number and value text
# --------------------------------------------------------------------------------------------


def utf8(text: str) -> bytes:
    """UTF-8 bytes of ``text`` the way Java's ``getBytes(UTF_8)`` does: lone surrogates become ``?``."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")


def java_text(schema: Schema | None, value: Any) -> str:
    """The text Google's connector gets from ``value.toString()`` for an attribute or a key.

    Integers print in decimal, booleans as ``true``/``false``, floats as Java does (FLOAT32 with
    ``Float.toString``, everything else with ``Double.toString``). Where Java's ``toString`` is
    useless this module chooses a lossless readable form instead: BYTES decode as UTF-8 with U+FFFD
    for invalid sequences (what StringConverter would have produced; Java prints ``[B@1b6d3586``),
    and arrays, maps and structs render as compact JSON (Java prints ``[a, b]`` / ``{k=v}``).
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and not (schema is not None and schema.type.is_float):
        return str(value)
    if isinstance(value, (int, float)):
        if schema is not None and schema.type is Type.FLOAT32:
            return java_float_to_string(value)
        return java_double_to_string(value)
    if isinstance(value, str):
        return value
    if isinstance(value, _BYTES_TYPES):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, Decimal):
        return str(value)  # BigDecimal.toString: the same scientific notation rules
    if isinstance(value, JavaDate):
        return java_date_text(value)
    return dump_json(schema, value)


def java_date_text(value: JavaDate) -> str:
    """``java.util.Date.toString()`` in a JVM whose time zone is UTC (a Connect worker's usual
    one): ``Thu Jan 01 00:00:00 UTC 1970``, the year not zero-padded. *Divergence*: Java prints
    dates before 1582-10-15 in the Julian calendar, this in the proleptic Gregorian one (Spark's)."""
    try:
        moment = datetime.fromtimestamp(value.millis / 1000, timezone.utc)
    except (OverflowError, OSError, ValueError):
        raise ConverterError(f"date {value.millis} ms is outside the years 1-9999") from None
    return moment.strftime("%a %b %d %H:%M:%S UTC ") + str(moment.year)


def unscaled_bytes(value: Decimal) -> bytes:
    """A Decimal's unscaled value as ``BigInteger.toByteArray()``: minimal two's complement."""
    sign, digits, _ = value.as_tuple()
    unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
    magnitude = ~unscaled if unscaled < 0 else unscaled  # the bits besides the sign's
    return unscaled.to_bytes(magnitude.bit_length() // 8 + 1, "big", signed=True)


# --------------------------------------------------------------------------------------------
# Compact JSON the way Kafka's JsonConverter (Jackson) writes it
# --------------------------------------------------------------------------------------------


def _json_float(text: str) -> str:
    # Jackson quotes non-finite numbers by default (QUOTE_NON_NUMERIC_NUMBERS).
    return f'"{text}"' if text in ("NaN", "Infinity", "-Infinity") else text


_LOWER_HEX_ESCAPE = re.compile(r"\\u00([0-9a-f]{2})")


def _json_string(text: str) -> str:
    """A JSON string literal as Kafka's JsonConverter (Jackson) writes it: UTF-8 kept as is,
    control characters escaped with upper-case hex (``\\u001F``; Python writes ``\\u001f``)."""
    return _LOWER_HEX_ESCAPE.sub(lambda m: "\\u00" + m.group(1).upper(), json.dumps(text, ensure_ascii=False))


def _map_items(value: Any) -> Iterable[tuple[Any, Any]]:
    if isinstance(value, dict):
        return value.items()
    if isinstance(value, (list, tuple)):
        return value
    raise ConverterError(f"expected a map, got {type(value).__name__}")


def _infer_schema(value: Any) -> Schema | None:
    """Connect's type inference for schemaless values (``ConnectSchema.schemaType``)."""
    if isinstance(value, Struct):
        return value.schema
    return None


def _write_json(schema: Schema | None, value: Any, out: list[str], path: str) -> None:
    if value is None:
        if schema is not None and not schema.optional:
            raise ConverterError(f"null value for required {schema.type.value} {path or 'value'}")
        out.append("null")
        return
    if schema is None:
        schema = _infer_schema(value)
    if schema is None:
        _write_schemaless_json(value, out, path)
        return
    t = schema.type
    if t is Type.BOOLEAN:
        if not isinstance(value, bool):
            raise ConverterError(f"{path or 'value'}: expected boolean, got {type(value).__name__}")
        out.append("true" if value else "false")
    elif t.is_integer and isinstance(value, JavaDate):  # Date as days, Time and Timestamp as ms
        out.append(str(value.millis // MILLIS_PER_DAY if schema.name == DATE else value.millis))
    elif t.is_integer:
        out.append(str(_check_int(t, value, path)))
    elif t is Type.FLOAT32:
        out.append(_json_float(java_float_to_string(_check_float(value, path))))
    elif t is Type.FLOAT64:
        out.append(_json_float(java_double_to_string(_check_float(value, path))))
    elif t is Type.STRING:
        if not isinstance(value, str):
            raise ConverterError(f"{path or 'value'}: expected string, got {type(value).__name__}")
        out.append(_json_string(value))
    elif t is Type.BYTES and isinstance(value, Decimal):  # JsonConverter's decimal.format=BASE64
        out.append('"' + base64.b64encode(unscaled_bytes(value)).decode("ascii") + '"')
    elif t is Type.BYTES:
        if not isinstance(value, _BYTES_TYPES):
            raise ConverterError(f"{path or 'value'}: expected bytes, got {type(value).__name__}")
        out.append('"' + base64.b64encode(bytes(value)).decode("ascii") + '"')
    elif t is Type.ARRAY:
        if not isinstance(value, (list, tuple)):
            raise ConverterError(f"{path or 'value'}: expected array, got {type(value).__name__}")
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write_json(schema.value_schema, item, out, f"{path}[{i}]")
        out.append("]")
    elif t is Type.MAP:
        items = list(_map_items(value))
        key_schema = schema.key_schema
        if key_schema is not None and key_schema.type is Type.STRING:
            out.append("{")
            for i, (k, v) in enumerate(items):
                if i:
                    out.append(",")
                out.append(_json_string(_check_str(k, path)) + ":")
                _write_json(schema.value_schema, v, out, f"{path}.{k}")
            out.append("}")
        else:  # Kafka writes maps with non-string keys as an array of [key, value] pairs
            out.append("[")
            for i, (k, v) in enumerate(items):
                out.append(",[" if i else "[")
                _write_json(key_schema, k, out, f"{path}<key>")
                out.append(",")
                _write_json(schema.value_schema, v, out, f"{path}<value>")
                out.append("]")
            out.append("]")
    else:  # STRUCT
        if not isinstance(value, Struct):
            raise ConverterError(f"{path or 'value'}: expected struct, got {type(value).__name__}")
        out.append("{")
        for i, f in enumerate(schema.fields):
            if i:
                out.append(",")
            out.append(_json_string(f.name) + ":")
            _write_json(f.schema, value.get(f.name), out, f"{path}.{f.name}" if path else f.name)
        out.append("}")


def _write_schemaless_json(value: Any, out: list[str], path: str) -> None:
    if isinstance(value, bool):
        out.append("true" if value else "false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(_json_float(java_double_to_string(value)))
    elif isinstance(value, str):
        out.append(_json_string(value))
    elif isinstance(value, _BYTES_TYPES):
        out.append('"' + base64.b64encode(bytes(value)).decode("ascii") + '"')
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write_json(None, item, out, f"{path}[{i}]")
        out.append("]")
    elif isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            out.append("{")
            for i, (k, v) in enumerate(value.items()):
                if i:
                    out.append(",")
                out.append(_json_string(k) + ":")
                _write_json(None, v, out, f"{path}.{k}")
            out.append("}")
        else:
            out.append("[")
            for i, (k, v) in enumerate(value.items()):
                out.append(",[" if i else "[")
                _write_json(None, k, out, f"{path}<key>")
                out.append(",")
                _write_json(None, v, out, f"{path}<value>")
                out.append("]")
            out.append("]")
    else:
        raise ConverterError(f"{path or 'value'}: {type(value).__name__} has no Connect schema type")


_SUPPLEMENTARY = re.compile("[\U00010000-\U0010ffff]")


def _surrogate_escapes(match: re.Match[str]) -> str:
    code = ord(match.group(0)) - 0x10000
    return f"\\u{0xD800 + (code >> 10):04X}\\u{0xDC00 + (code & 0x3FF):04X}"


def escape_supplementary_as_jackson(json_text: str) -> str:
    """JSON text with every character outside the BMP as the ``\\uXXXX\\uXXXX`` surrogate-pair
    escape (upper-case hex) that Kafka's JsonConverter serializer writes.

    Why: Kafka's serializer is Jackson's UTF-8 generator, which writes the two UTF-16 halves of
    such a character (an emoji, say) as escapes instead of its 4 UTF-8 bytes. Both are valid JSON
    for the same text, but byte-for-byte output (a source connector's Kafka value or key) needs
    the escapes. Exact on whole JSON documents: outside strings JSON is ASCII.
    """
    return _SUPPLEMENTARY.sub(_surrogate_escapes, json_text)


def dump_json(schema: Schema | None, value: Any) -> str:
    """Compact JSON of a Connect value, as Kafka's JsonConverter writes a payload.

    Numbers use Java's text (``1.0E7``, valid JSON), BYTES are base64, maps with non-string keys
    are arrays of ``[key, value]`` pairs, struct fields keep schema order.
    """
    out: list[str] = []
    _write_json(schema, value, out, "")
    return "".join(out)


def _check_int(t: Type, value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConverterError(f"{path or 'value'}: expected {t.value}, got {type(value).__name__}")
    lo, hi = _INT_RANGES[t]
    if not lo <= value <= hi:
        raise ConverterError(f"{path or 'value'}: {value} is out of range for {t.value}")
    return value


def _check_float(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConverterError(f"{path or 'value'}: expected a number, got {type(value).__name__}")
    return float(value)


def _check_str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise ConverterError(f"{path or 'value'}: expected string map key, got {type(value).__name__}")
    return value


# --------------------------------------------------------------------------------------------
# Converters
# --------------------------------------------------------------------------------------------


class ReadsConnect(Protocol):
    """What a sink needs of a converter: Kafka bytes → Connect schema and value."""

    def to_connect(self, data: bytes | None) -> SchemaAndValue: ...


class Converter:
    """A Kafka Connect converter: ``to_connect`` (Kafka bytes -> typed value) and back."""

    #: The Java class name this converter stands for.
    class_name: str = ""

    @property
    def short_name(self) -> str:
        return self.class_name.rsplit(".", 1)[-1]

    def to_connect(self, data: bytes | None) -> SchemaAndValue:  # pragma: no cover - abstract
        raise NotImplementedError

    def from_connect(self, schema: Schema | None, value: Any) -> bytes | None:  # pragma: no cover
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


_NULL = SchemaAndValue(None, None)


class ByteArrayConverter(Converter):
    """Bytes pass through untouched as an optional BYTES value."""

    class_name = BYTE_ARRAY_CONVERTER
    _schema = Schema(Type.BYTES, optional=True)

    def to_connect(self, data: bytes | None) -> SchemaAndValue:
        if data is None:
            return _NULL
        return SchemaAndValue(self._schema, bytes(data))

    def from_connect(self, schema: Schema | None, value: Any) -> bytes | None:
        if schema is not None and schema.type is not Type.BYTES:
            raise ConverterError(f"ByteArrayConverter: invalid schema type {schema.type.value}")
        if value is None:
            return None
        if not isinstance(value, _BYTES_TYPES):
            raise ConverterError(f"ByteArrayConverter: expected bytes, got {type(value).__name__}")
        return bytes(value)


class StringConverter(Converter):
    """UTF-8 text. Like Java's ``new String(bytes, UTF_8)``, invalid sequences become U+FFFD
    instead of failing (Google's connector would publish them that way too)."""

    class_name = STRING_CONVERTER
    _schema = Schema(Type.STRING, optional=True)

    def to_connect(self, data: bytes | None) -> SchemaAndValue:
        if data is None:
            return _NULL
        return SchemaAndValue(self._schema, bytes(data).decode("utf-8", "replace"))

    def from_connect(self, schema: Schema | None, value: Any) -> bytes | None:
        if value is None:
            return None
        return utf8(java_text(schema, value))


class NumberConverter(Converter):
    """Kafka's fixed-width number converters: big-endian two's complement / IEEE-754.

    A payload of the wrong length is malformed (Kafka: "Size of data received by
    IntegerDeserializer is not 4").
    """

    def __init__(self, class_name: str) -> None:
        self.class_name = class_name
        self.type = NUMBER_CONVERTER_TYPES[class_name]
        self.width = WIDTH[self.type]
        self._schema = Schema(self.type, optional=True)

    def to_connect(self, data: bytes | None) -> SchemaAndValue:
        if data is None:
            return _NULL
        if len(data) != self.width:
            raise ConverterError(f"{self.short_name}: expected {self.width} bytes, got {len(data)}")
        if self.type.is_float:
            value: Any = struct.unpack(_FLOAT_FORMATS[self.type], data)[0]
        else:
            value = int.from_bytes(data, "big", signed=True)
        return SchemaAndValue(self._schema, value)

    def from_connect(self, schema: Schema | None, value: Any) -> bytes | None:
        if value is None:
            return None
        if self.type.is_float:
            number = _check_float(value, self.short_name)
            if self.type is Type.FLOAT32:
                number = to_float32(number)
            return struct.pack(_FLOAT_FORMATS[self.type], number)
        return _check_int(self.type, value, self.short_name).to_bytes(self.width, "big", signed=True)

    def __repr__(self) -> str:
        return f"NumberConverter({self.short_name})"


class BooleanConverter(Converter):
    """Kafka's BooleanConverter (one byte, ``0x01`` true / ``0x00`` false)."""

    class_name = BOOLEAN_CONVERTER
    _schema = Schema(Type.BOOLEAN, optional=True)

    def to_connect(self, data: bytes | None) -> SchemaAndValue:
        if data is None:
            return _NULL
        if len(data) != 1:
            raise ConverterError(f"BooleanConverter: expected 1 byte, got {len(data)}")
        if data[0] not in (0, 1):
            raise ConverterError(f"BooleanConverter: expected byte 00 or 01, got {data[0]:02x}")
        return SchemaAndValue(self._schema, data[0] == 1)

    def from_connect(self, schema: Schema | None, value: Any) -> bytes | None:
        if value is None:
            return None
        if not isinstance(value, bool):
            raise ConverterError(f"BooleanConverter: expected boolean, got {type(value).__name__}")
        return b"\x01" if value else b"\x00"


_NO_DEFAULT = object()

_JSON_TYPE_NAMES: dict[str, Type] = {
    "boolean": Type.BOOLEAN,
    "int8": Type.INT8,
    "int16": Type.INT16,
    "int32": Type.INT32,
    "int64": Type.INT64,
    "float": Type.FLOAT32,
    "double": Type.FLOAT64,
    "string": Type.STRING,
    "bytes": Type.BYTES,
    "array": Type.ARRAY,
    "map": Type.MAP,
    "struct": Type.STRUCT,
}
_TYPE_JSON_NAMES = {v: k for k, v in _JSON_TYPE_NAMES.items()}


class _SchemaNode:
    """A parsed envelope schema: the Connect :class:`Schema` plus what it cannot hold (defaults).

    Kept private so ``connect.Schema`` stays the one shared schema type; the JSON converter walks
    this tree alongside the payload.
    """

    __slots__ = ("default", "fields", "items", "keys", "schema")

    def __init__(
        self,
        schema: Schema,
        default: Any,
        items: _SchemaNode | None,
        keys: _SchemaNode | None,
        fields: tuple[tuple[str, _SchemaNode], ...],
    ) -> None:
        self.schema = schema
        self.default = default
        self.items = items
        self.keys = keys
        self.fields = fields


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class JsonConverter(Converter):
    """Kafka's JsonConverter. With ``schemas_enable`` the data is an envelope
    ``{"schema": ..., "payload": ...}`` whose schema types the payload; without, plain JSON maps to
    schemaless Python values (object -> dict, array -> list, integer -> int, other numbers -> float).
    """

    class_name = JSON_CONVERTER
    _CACHE_SIZE = 1000

    def __init__(self, schemas_enable: bool = True) -> None:
        self.schemas_enable = schemas_enable
        self._schema_cache: dict[str, _SchemaNode] = {}

    def __repr__(self) -> str:
        return f"JsonConverter(schemas_enable={self.schemas_enable})"

    # -- bytes -> Connect ----------------------------------------------------------------------
    def to_connect(self, data: bytes | None) -> SchemaAndValue:
        if data is None:
            return _NULL
        try:
            doc = json.loads(bytes(data), parse_constant=_reject_constant)
        except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
            raise ConverterError(f"JsonConverter: invalid JSON: {collapse(str(e))}") from None
        except RecursionError:
            raise ConverterError("JsonConverter: invalid JSON: nested too deeply") from None
        if not self.schemas_enable:
            return SchemaAndValue(None, _schemaless(doc, ""))
        if not isinstance(doc, dict) or set(doc) != {"schema", "payload"}:
            raise ConverterError(
                'JsonConverter with schemas.enable requires "schema" and "payload" fields and no others '
                "(set schemas.enable=false for plain JSON)"
            )
        schema_doc, payload = doc["schema"], doc["payload"]
        if schema_doc is None:
            return SchemaAndValue(None, _schemaless(payload, ""))
        node = self._schema_node(schema_doc)
        return SchemaAndValue(node.schema, _convert(node, payload, ""))

    def _schema_node(self, schema_doc: Any) -> _SchemaNode:
        key = json.dumps(schema_doc, separators=(",", ":"))
        node = self._schema_cache.get(key)
        if node is None:
            node = _parse_schema(schema_doc, "")
            if len(self._schema_cache) >= self._CACHE_SIZE:
                self._schema_cache.clear()
            self._schema_cache[key] = node
        return node

    # -- Connect -> bytes ----------------------------------------------------------------------
    def from_connect(self, schema: Schema | None, value: Any) -> bytes | None:
        if schema is None and value is None:
            return None
        payload = dump_json(schema, value)
        if not self.schemas_enable:
            return utf8(payload)
        schema_json = "null" if schema is None else schema_to_json(schema)
        return utf8(f'{{"schema":{schema_json},"payload":{payload}}}')


def schema_to_json(schema: Schema) -> str:
    """A Connect schema as JsonConverter's envelope ``schema`` (Kafka's key order)."""
    parts = [f'"type":"{_TYPE_JSON_NAMES[schema.type]}"']
    if schema.type is Type.ARRAY:
        parts.append(f'"items":{schema_to_json(_require(schema.value_schema, "array items"))}')
    elif schema.type is Type.MAP:
        parts.append(f'"keys":{schema_to_json(_require(schema.key_schema, "map keys"))}')
        parts.append(f'"values":{schema_to_json(_require(schema.value_schema, "map values"))}')
    elif schema.type is Type.STRUCT:
        fields = []
        for f in schema.fields:
            inner = schema_to_json(f.schema)
            fields.append(inner[:-1] + f',"field":{_json_string(f.name)}}}')
        parts.append(f'"fields":[{",".join(fields)}]')
    parts.append(f'"optional":{"true" if schema.optional else "false"}')
    if schema.name is not None:
        parts.append(f'"name":{_json_string(schema.name)}')
    return "{" + ",".join(parts) + "}"


def _require(schema: Schema | None, what: str) -> Schema:
    if schema is None:
        raise ConverterError(f"schema has no {what} schema")
    return schema


def _at(path: str) -> str:
    return f" at {path}" if path else ""


def _parse_schema(doc: Any, path: str) -> _SchemaNode:
    """JsonConverter's ``asConnectSchema``: an envelope schema object -> schema tree."""
    if not isinstance(doc, dict):
        raise ConverterError(f"JsonConverter: schema{_at(path)} must be an object")
    type_name = doc.get("type")
    if not isinstance(type_name, str):
        raise ConverterError(f"JsonConverter: schema{_at(path)} must contain a 'type' field")
    t = _JSON_TYPE_NAMES.get(type_name)
    if t is None:
        raise ConverterError(f"JsonConverter: unknown schema type {type_name!r}{_at(path)}")
    optional = doc.get("optional") is True
    name = doc.get("name") if isinstance(doc.get("name"), str) else None
    items = keys = None
    fields: tuple[tuple[str, _SchemaNode], ...] = ()
    if t is Type.ARRAY:
        if doc.get("items") is None:
            raise ConverterError(f"JsonConverter: array schema{_at(path)} did not specify 'items'")
        items = _parse_schema(doc["items"], f"{path}[]")
        schema = Schema(t, optional=optional, value_schema=items.schema, name=name)
    elif t is Type.MAP:
        if doc.get("keys") is None or doc.get("values") is None:
            raise ConverterError(f"JsonConverter: map schema{_at(path)} did not specify 'keys' and 'values'")
        keys = _parse_schema(doc["keys"], f"{path}<key>")
        items = _parse_schema(doc["values"], f"{path}<value>")
        schema = Schema(t, optional=optional, key_schema=keys.schema, value_schema=items.schema, name=name)
    elif t is Type.STRUCT:
        raw_fields = doc.get("fields")
        if not isinstance(raw_fields, list):
            raise ConverterError(f"JsonConverter: struct schema{_at(path)} 'fields' is not an array")
        parsed = []
        for raw in raw_fields:
            fname = raw.get("field") if isinstance(raw, dict) else None
            if not isinstance(fname, str):
                raise ConverterError(f"JsonConverter: struct schema{_at(path)} has a field without a name")
            parsed.append((fname, _parse_schema(raw, f"{path}.{fname}" if path else fname)))
        fields = tuple(parsed)
        schema = Schema(t, optional=optional, fields=tuple(Field(n, s.schema) for n, s in fields), name=name)
    else:
        schema = Schema(t, optional=optional, name=name)
    node = _SchemaNode(schema, _NO_DEFAULT, items, keys, fields)
    if doc.get("default") is not None:
        node.default = _convert(node, doc["default"], f"{path}<default>")
    return node


def _convert(node: _SchemaNode, payload: Any, path: str) -> Any:
    """JsonConverter's ``convertToConnect`` with a schema, strictly typed."""
    schema = node.schema
    t = schema.type
    if payload is None:
        if node.default is not _NO_DEFAULT:
            return node.default
        if schema.optional:
            return None
        raise ConverterError(f"JsonConverter: null value for required {t.value} field{_at(path)}")
    where = path or "payload"
    if t is Type.BOOLEAN:
        if not isinstance(payload, bool):
            raise ConverterError(f"JsonConverter: {where}: expected boolean, got {_json_kind(payload)}")
        return payload
    if t.is_integer:
        if isinstance(payload, float) and payload.is_integer():
            payload = int(payload)
        if isinstance(payload, bool) or not isinstance(payload, int):
            raise ConverterError(f"JsonConverter: {where}: expected {t.value}, got {_json_kind(payload)}")
        lo, hi = _INT_RANGES[t]
        if not lo <= payload <= hi:
            raise ConverterError(f"JsonConverter: {where}: {payload} is out of range for {t.value}")
        return payload
    if t.is_float:
        if isinstance(payload, bool) or not isinstance(payload, (int, float)):
            raise ConverterError(f"JsonConverter: {where}: expected {t.value}, got {_json_kind(payload)}")
        number = _json_number(float(payload))
        if t is Type.FLOAT32:
            number = to_float32(number)
        if math.isinf(number):
            raise ConverterError(f"JsonConverter: {where}: {payload} is out of range for {t.value}")
        return number
    if t is Type.STRING:
        if not isinstance(payload, str):
            raise ConverterError(f"JsonConverter: {where}: expected string, got {_json_kind(payload)}")
        return payload
    if t is Type.BYTES:
        if not isinstance(payload, str):
            raise ConverterError(f"JsonConverter: {where}: expected base64 string, got {_json_kind(payload)}")
        try:
            return base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise ConverterError(f"JsonConverter: {where}: invalid base64") from None
    if t is Type.ARRAY:
        if not isinstance(payload, list):
            raise ConverterError(f"JsonConverter: {where}: expected array, got {_json_kind(payload)}")
        assert node.items is not None
        return [_convert(node.items, item, f"{path}[{i}]") for i, item in enumerate(payload)]
    if t is Type.MAP:
        assert node.keys is not None and node.items is not None
        if node.keys.schema.type is Type.STRING:
            if not isinstance(payload, dict):
                raise ConverterError(f"JsonConverter: {where}: expected object, got {_json_kind(payload)}")
            return {k: _convert(node.items, v, f"{path}.{k}" if path else k) for k, v in payload.items()}
        if not isinstance(payload, list):
            raise ConverterError(f"JsonConverter: {where}: a map with non-string keys must be an array of [key, value]")
        pairs = []
        for i, entry in enumerate(payload):
            if not isinstance(entry, list) or len(entry) != 2:
                raise ConverterError(f"JsonConverter: {where}[{i}]: invalid map entry, expected [key, value]")
            pairs.append(
                (
                    _convert(node.keys, entry[0], f"{path}[{i}]<key>"),
                    _convert(node.items, entry[1], f"{path}[{i}]<value>"),
                )
            )
        try:
            return dict(pairs)
        except TypeError:  # unhashable keys (arrays/maps/structs): keep the pairs
            return pairs
    # STRUCT
    if not isinstance(payload, dict):
        raise ConverterError(f"JsonConverter: {where}: expected object, got {_json_kind(payload)}")
    values = {
        name: _convert(child, payload.get(name), f"{path}.{name}" if path else name) for name, child in node.fields
    }
    return Struct(schema, values)


def _schemaless(doc: Any, path: str) -> Any:
    """Schemaless JSON -> Python; integers must fit int64 and numbers be finite (as in Java)."""
    if isinstance(doc, bool) or doc is None or isinstance(doc, str):
        return doc
    if isinstance(doc, int):
        if not _INT_RANGES[Type.INT64][0] <= doc <= _INT_RANGES[Type.INT64][1]:
            raise ConverterError(f"JsonConverter: {path or 'value'}: {doc} is out of range for int64")
        return doc
    if isinstance(doc, float):
        if math.isinf(doc):
            raise ConverterError(f"JsonConverter: {path or 'value'}: number is out of range for double")
        return _json_number(doc)
    if isinstance(doc, list):
        return [_schemaless(item, f"{path}[{i}]") for i, item in enumerate(doc)]
    return {k: _schemaless(v, f"{path}.{k}" if path else k) for k, v in doc.items()}


def _json_number(number: float) -> float:
    """A JSON number as Connect's JsonConverter reads it: through ``BigDecimal`` (its Jackson
    mapper uses ``USE_BIG_DECIMAL_FOR_FLOATS``), which has no negative zero: ``-0.0`` is ``0.0``."""
    return 0.0 if number == 0.0 else number


def _json_kind(payload: Any) -> str:
    if isinstance(payload, bool):
        return "boolean"
    if isinstance(payload, (int, float)):
        return "number"
    if isinstance(payload, str):
        return "string"
    if isinstance(payload, list):
        return "array"
    if isinstance(payload, dict):
        return "object"
    return type(payload).__name__


#: The one table of ``key.converter`` / ``value.converter`` class names and what implements
#: each (called with ``*.converter.schemas.enable``): config validation, the connectors' settings
#: and :func:`make_converter` all read it, so a converter is accepted exactly when it exists.
CONVERTER_FACTORIES: dict[str, Callable[[bool], Converter]] = {
    BYTE_ARRAY_CONVERTER: lambda _schemas_enable: ByteArrayConverter(),
    STRING_CONVERTER: lambda _schemas_enable: StringConverter(),
    JSON_CONVERTER: JsonConverter,
    SHORT_CONVERTER: lambda _schemas_enable: NumberConverter(SHORT_CONVERTER),
    INTEGER_CONVERTER: lambda _schemas_enable: NumberConverter(INTEGER_CONVERTER),
    LONG_CONVERTER: lambda _schemas_enable: NumberConverter(LONG_CONVERTER),
    FLOAT_CONVERTER: lambda _schemas_enable: NumberConverter(FLOAT_CONVERTER),
    DOUBLE_CONVERTER: lambda _schemas_enable: NumberConverter(DOUBLE_CONVERTER),
    BOOLEAN_CONVERTER: lambda _schemas_enable: BooleanConverter(),
}

#: Every accepted converter class name, in the table's order (for config validation).
KNOWN_CONVERTERS: tuple[str, ...] = tuple(CONVERTER_FACTORIES)
#: The Schema Registry's Avro converters (Confluent's, and Apicurio's in the same wire format): they
#: need a registry, so they are built by the pipelines (:mod:`pubsub_connect.model.avro`).
REGISTRY_AVRO_CONVERTERS: tuple[str, ...] = ("io.confluent.connect.avro.AvroConverter",
                                             "io.apicurio.registry.utils.converter.AvroConverter")
#: Confluent's JSON Schema converter: the sink reads it (:mod:`pubsub_connect.model.jsonschema`).
REGISTRY_JSON_SCHEMA_CONVERTERS: tuple[str, ...] = ("io.confluent.connect.json.JsonSchemaConverter",)
#: Every Schema Registry converter.
REGISTRY_CONVERTERS: tuple[str, ...] = (*REGISTRY_AVRO_CONVERTERS, *REGISTRY_JSON_SCHEMA_CONVERTERS)


def registry_schema_type(class_name: str | None) -> str | None:
    """The registry's schema type a converter reads (``AVRO``, ``JSON``), None for the others."""
    if class_name in REGISTRY_AVRO_CONVERTERS:
        return "AVRO"
    return "JSON" if class_name in REGISTRY_JSON_SCHEMA_CONVERTERS else None


def make_converter(class_name: str, schemas_enable: bool = True) -> Converter:
    """A converter for a ``key.converter`` / ``value.converter`` class name.

    ``schemas_enable`` is ``*.converter.schemas.enable`` and only matters for JsonConverter.
    An unknown class name is a configuration error (``ValueError``), not a data error.
    """
    factory = CONVERTER_FACTORIES.get(class_name)
    if factory is not None:
        return factory(schemas_enable)
    raise ValueError(f"unsupported converter {class_name!r}; supported: {', '.join(KNOWN_CONVERTERS)}")


@functools.lru_cache(maxsize=32)
def shared_converter(class_name: str, schemas_enable: bool = True) -> Converter:
    """One converter per (class, schemas flag) in a process: what per-record code calls, so that
    a converter (and the JSON schemas it caches) is built once, not for every record."""
    return make_converter(class_name, schemas_enable)


__all__ = [
    "BOOLEAN_CONVERTER",
    "BYTE_ARRAY_CONVERTER",
    "CONVERTER_FACTORIES",
    "DEFAULT_CONVERTER",
    "DOUBLE_CONVERTER",
    "FLOAT_CONVERTER",
    "INTEGER_CONVERTER",
    "JSON_CONVERTER",
    "KNOWN_CONVERTERS",
    "KNOWN_HEADER_CONVERTERS",
    "LONG_CONVERTER",
    "NUMBER_CONVERTER_TYPES",
    "REGISTRY_AVRO_CONVERTERS",
    "REGISTRY_CONVERTERS",
    "REGISTRY_JSON_SCHEMA_CONVERTERS",
    "SHORT_CONVERTER",
    "STRING_CONVERTER",
    "BooleanConverter",
    "ByteArrayConverter",
    "Converter",
    "ConverterError",
    "JsonConverter",
    "NumberConverter",
    "StringConverter",
    "dump_json",
    "escape_supplementary_as_jackson",
    "java_double_to_string",
    "java_float_to_string",
    "java_text",
    "make_converter",
    "schema_to_json",
    "shared_converter",
    "to_float32",
    "utf8",
]
