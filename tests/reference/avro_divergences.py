"""The deliberate differences between Google's sink and ours on Schema Registry Avro, each a rule
that recognises exactly that difference: the README's divergence table rows that concern Avro,
in executable form.

A rule gets the scenario, the record (its Avro datums), the field that differs (``data``,
``ordering_key``, ``messages``, or one attribute: then ``name`` is the attribute's key) and both
sides' values, and says whether the difference is that divergence. Every expectation is
recomputed from the record's datum and writer schema: Google's as the Java text of the Connect
value Apicurio's converter makes of it (``Struct{a=1}``, ``[a, b]``, ``{k=v}`` in ``HashMap``
order, ``java.util.Date`` in a JVM on UTC, Julian before 1582-10-15, ``BigDecimal``), ours as the
README promises it (compact JSON as Kafka's JsonConverter writes it, the proleptic Gregorian
calendar, the bytes' UTF-8), never with the product's own code.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from pubsub_connect.model.javatext import java_double_to_string, java_float_to_string, to_float32
from reference.avro_corpus import GREGORIAN_CUTOVER_MS, MILLIS_PER_DAY, AvroRecord, AvroScenario
from reference.sink_divergences import _compact_json_string, _java_string_hash

# ----------------------------------------------------------------------------------------------
# Avro schemas: named types, logical types
# ----------------------------------------------------------------------------------------------

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
#: The logical types Connect has: their values are BigDecimal and java.util.Date, not numbers.
_DATE_LIKE = frozenset({"date", "time-millis", "timestamp-millis"})


def named_types(schema: Any, namespace: str = "", out: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every record, enum and fixed of ``schema`` by full name, for references to them."""
    out = {} if out is None else out
    if isinstance(schema, list):
        for branch in schema:
            named_types(branch, namespace, out)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "enum", "fixed"):
            name = schema["name"]
            space = schema.get("namespace", namespace)
            full = name if "." in name or not space else f"{space}.{name}"
            out[full] = schema
            namespace = full.rpartition(".")[0]
            for field in schema.get("fields", []):
                named_types(field["type"], namespace, out)
        elif kind == "array":
            named_types(schema["items"], namespace, out)
        elif kind == "map":
            named_types(schema["values"], namespace, out)
        elif isinstance(kind, (dict, list)):
            named_types(kind, namespace, out)
    return out


class Avro:
    """One writer schema's nodes, with references resolved."""

    def __init__(self, schema: Any):
        self.schema = schema
        self.names = named_types(schema)

    def node(self, schema: Any) -> Any:
        """``schema`` with a reference replaced by its definition and ``{"type": {...}}`` unwrapped."""
        if isinstance(schema, str):
            return schema if schema in _PRIMITIVES else self.names[schema]
        if isinstance(schema, dict) and isinstance(schema.get("type"), (dict, list)):
            return self.node(schema["type"])
        return schema

    def kind(self, schema: Any) -> tuple[str, str | None, Any]:
        """``(type, Connect logical type or None, node)``; a nullable union is its other branch."""
        node = self.node(schema)
        if isinstance(node, list):
            others = [b for b in node if b != "null"]
            if len(others) != 1 or len(node) != 2:
                raise ValueError(f"the rules model no union but a nullable one: {node}")
            return self.kind(others[0])
        if isinstance(node, str):
            return node, None, node
        logical = node.get("logicalType")
        kind = node["type"]
        if logical == "decimal" and kind in ("bytes", "fixed"):
            return kind, "decimal", node
        return kind, logical if logical in _DATE_LIKE else None, node

    def field(self, name: str) -> Any:
        """The type of the record's field ``name``, or None (no such field, or not a record)."""
        node = self.node(self.schema)
        if not isinstance(node, dict) or node.get("type") != "record":
            return None
        return next((f["type"] for f in node["fields"] if f["name"] == name), None)


def _unscaled(value: Decimal, scale: int) -> int:
    """A decimal's unscaled value at ``scale`` (what Avro writes), without a context's rounding."""
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int) and exponent + scale >= 0
    unscaled = int("".join(map(str, digits)) or "0") * 10 ** (exponent + scale)
    return -unscaled if sign else unscaled


def big_decimal_text(value: Decimal, scale: int) -> str:
    """``BigDecimal.toString`` of the decimal Avro carries (its unscaled value at the schema's
    scale): Python prints a ``Decimal`` by the same rules (``1E-10``, ``0E-10``, ``1.23E-7``)."""
    unscaled = _unscaled(value, scale)
    return str(Decimal((int(unscaled < 0), tuple(int(d) for d in str(abs(unscaled))), -scale)))


def _millis(logical: str, number: int) -> int:
    return number * MILLIS_PER_DAY if logical == "date" else number


_WEEKDAYS = ("Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def gregorian_date_text(ms: int) -> str:
    """Ours: ``java.util.Date.toString``'s layout in UTC, the proleptic Gregorian calendar."""
    moment = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=ms)
    return moment.strftime("%a %b %d %H:%M:%S UTC ") + str(moment.year)


def java_date_text(ms: int) -> str:
    """Google's: ``java.util.Date.toString()`` in a JVM on UTC; before Java's Gregorian cutover
    (1582-10-15) its calendar is the Julian one (from the Julian day number)."""
    if ms >= GREGORIAN_CUTOVER_MS:
        return gregorian_date_text(ms)
    days, rest = divmod(ms, MILLIS_PER_DAY)
    jdn = days + 2440588
    c = jdn + 32082
    d = (4 * c + 3) // 1461
    e = c - 1461 * d // 4
    m = (5 * e + 2) // 153
    day, month, year = e - (153 * m + 2) // 5 + 1, m + 3 - 12 * (m // 10), d - 4800 + m // 10
    hours, minutes, seconds = rest // 3_600_000, rest // 60_000 % 60, rest // 1000 % 60
    return (f"{_WEEKDAYS[(jdn + 1) % 7]} {_MONTHS[month - 1]} {day:02d} {hours:02d}:{minutes:02d}:{seconds:02d} UTC "
            f"{year}")


def heap_buffer_text(data: bytes) -> str:
    """``ByteBuffer.toString()`` of the buffer Connect's converter wraps the bytes in."""
    return f"java.nio.HeapByteBuffer[pos=0 lim={len(data)} cap={len(data)}]"


def avro_map_order(keys: list[str]) -> list[str]:
    """The order in which Google's task sees an Avro map's keys: the Avro decoder's ``HashMap``
    and then the converter's are both created for the map's size (``new HashMap<>(n)``: a table of
    the next power of two at least ``n``, doubled while more than three quarters full), so both
    iterate by hash bucket of that table, keys of one bucket in the datum's order."""
    capacity = 1
    while capacity < len(keys):
        capacity *= 2
    while len(keys) > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: str) -> int:
        h = _java_string_hash(key) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(keys, key=bucket)


def java_text(avro: Avro, schema: Any, datum: Any) -> str:
    """Google's text of a datum: ``toString`` of the Connect value the converter makes of it."""
    if datum is None:
        return "null"
    kind, logical, node = avro.kind(schema)
    if logical == "decimal":
        return big_decimal_text(datum, int(node.get("scale", 0)))
    if logical is not None:
        return java_date_text(_millis(logical, datum))
    if kind == "boolean":
        return "true" if datum else "false"
    if kind in ("int", "long"):
        return str(datum)
    if kind == "float":
        return java_float_to_string(datum)
    if kind == "double":
        return java_double_to_string(datum)
    if kind in ("bytes", "fixed"):
        return heap_buffer_text(datum)
    if kind == "array":
        return "[" + ", ".join(java_text(avro, node["items"], item) for item in datum) + "]"
    if kind == "map":
        return "{" + ", ".join(f"{k}={java_text(avro, node['values'], datum[k])}"
                               for k in avro_map_order(list(datum))) + "}"
    if kind == "record":
        return "Struct{" + ",".join(f"{f['name']}={java_text(avro, f['type'], datum[f['name']])}"
                                    for f in node["fields"] if datum.get(f["name"]) is not None) + "}"
    return str(datum)  # string, enum, uuid


def _json_number(text: str) -> str:
    """Jackson quotes the numbers JSON has no literal for."""
    return f'"{text}"' if text in ("NaN", "Infinity", "-Infinity") else text


def _b64(data: bytes) -> str:
    return '"' + base64.b64encode(data).decode() + '"'


def compact_json(avro: Avro, schema: Any, datum: Any) -> str:
    """Ours: the compact JSON Kafka's JsonConverter writes for the Connect value (the README's
    "compact JSON, as for JSON"): fields in schema order with nulls, map entries by name (Avro's
    decoder gives Connect a HashMap, in no order to keep), bytes in base64, a Decimal as its
    unscaled two's-complement bytes in base64 (the converter's default ``decimal.format``), Date as
    days, Time and Timestamp as milliseconds."""
    if datum is None:
        return "null"
    kind, logical, node = avro.kind(schema)
    if logical == "decimal":
        unscaled = _unscaled(datum, int(node.get("scale", 0)))
        magnitude = ~unscaled if unscaled < 0 else unscaled  # BigInteger.toByteArray: minimal
        return _b64(unscaled.to_bytes(magnitude.bit_length() // 8 + 1, "big", signed=True))
    if logical is not None or kind in ("int", "long"):
        return str(datum)
    if kind == "boolean":
        return "true" if datum else "false"
    if kind == "float":
        return _json_number(java_float_to_string(datum))
    if kind == "double":
        return _json_number(java_double_to_string(datum))
    if kind in ("bytes", "fixed"):
        return _b64(datum)
    if kind == "array":
        return "[" + ",".join(compact_json(avro, node["items"], item) for item in datum) + "]"
    if kind == "map":
        return "{" + ",".join(f"{_compact_json_string(k)}:{compact_json(avro, node['values'], v)}"
                              for k, v in sorted(datum.items())) + "}"
    if kind == "record":
        return "{" + ",".join(f"{_compact_json_string(f['name'])}:{compact_json(avro, f['type'], datum[f['name']])}"
                              for f in node["fields"]) + "}"
    return _compact_json_string(datum)


# ----------------------------------------------------------------------------------------------
# The rules
# ----------------------------------------------------------------------------------------------

#: A rule: (scenario, record, field, attribute name or None, Google's value, ours) → is it that divergence?
Rule = Callable[[AvroScenario, AvroRecord, str, "str | None", Any, Any], bool]


def _value_field(record: AvroRecord, name: str | None) -> tuple[Avro, Any, Any] | None:
    """The value record's field ``name``: its writer schema, its type and its datum."""
    if name is None or record.value_schema is None or not isinstance(record.value, dict):
        return None
    avro = Avro(record.value_schema)
    schema = avro.field(name)
    return None if schema is None else (avro, schema, record.value.get(name))


def _key(scenario: AvroScenario, record: AvroRecord, field: str, name: str | None) -> tuple[Avro, Any, Any] | None:
    """The Avro key, when the difference is in the ``key`` attribute or (with
    ``orderingKeySource=key``) the ordering key."""
    if not scenario.avro_key or record.key_schema is None or record.key is None:
        return None
    ordering = field == "ordering_key" and scenario.settings.get("orderingKeySource") == "key"
    if not (ordering or (field == "attributes" and name == "key")):
        return None
    return Avro(record.key_schema), record.key_schema, record.key


def number_body_lost(scenario: AvroScenario, record: AvroRecord, field: str, name: str | None, google: Any,
                     ours: Any) -> bool:
    """README "value of type INT16/INT32/INT64/FLOAT32/FLOAT64": a ``messageBodyName`` field of
    Avro ``int``, ``long`` (and the logical types on it Connect has no type for), ``float`` or
    ``double``: Google publishes empty data, ours the big-endian bytes."""
    found = _value_field(record, scenario.settings.get("messageBodyName", "cps_message_body"))
    if field != "data" or google != b"" or found is None or found[2] is None:
        return False
    avro, schema, datum = found
    kind, logical, _ = avro.kind(schema)
    formats = {"int": ">i", "long": ">q", "float": ">f", "double": ">d"}
    if logical is not None or kind not in formats:
        return False
    return ours == struct.pack(formats[kind], to_float32(datum) if kind == "float" else datum)


def bytes_as_heap_buffer_text(scenario: AvroScenario, record: AvroRecord, field: str, name: str | None, google: Any,
                              ours: Any) -> bool:
    """README "AvroConverter: a bytes or fixed field or key": Google's text is the
    ``HeapByteBuffer``'s ``toString``, ours the bytes' UTF-8 (malformed as U+FFFD)."""
    found = _key(scenario, record, field, name) or (_value_field(record, name) if field == "attributes" else None)
    if found is None or found[2] is None:
        return False
    avro, schema, datum = found
    kind, logical, _ = avro.kind(schema)
    return (kind in ("bytes", "fixed") and logical is None and google == heap_buffer_text(datum)
            and ours == datum.decode("utf-8", errors="replace"))


def collection_text_as_json(scenario: AvroScenario, record: AvroRecord, field: str, name: str | None, google: Any,
                            ours: Any) -> bool:
    """README "AvroConverter: an Avro record key, or array, map and record values inside fields":
    Google's Java text (``Struct{a=1,b=x}``, ``[a, b]``, ``{k=v}``), ours compact JSON."""
    found = _key(scenario, record, field, name) or (_value_field(record, name) if field == "attributes" else None)
    if found is None or found[2] is None:
        return False
    avro, schema, datum = found
    if avro.kind(schema)[0] not in ("array", "map", "record"):
        return False
    return google == java_text(avro, schema, datum) and ours == compact_json(avro, schema, datum)


def julian_dates(scenario: AvroScenario, record: AvroRecord, field: str, name: str | None, google: Any,
                 ours: Any) -> bool:
    """README "AvroConverter: date, time-millis, timestamp-millis text": before 1582-10-15 Google
    prints the Julian calendar's date, ours the proleptic Gregorian one (both in UTC here: the
    reference worker runs with ``user.timezone=UTC``)."""
    found = _value_field(record, name) if field == "attributes" else None
    if found is None or found[2] is None:
        return False
    avro, schema, datum = found
    logical = avro.kind(schema)[1]
    if logical not in _DATE_LIKE:
        return False
    ms = _millis(logical, datum)
    return ms < GREGORIAN_CUTOVER_MS and google == java_date_text(ms) and ours == gregorian_date_text(ms)


def _precisions(avro: Avro, schema: Any, seen: set[int]) -> list[int]:
    """The precision of every decimal in ``schema``."""
    node = avro.node(schema)
    if id(node) in seen:
        return []
    seen.add(id(node))
    if isinstance(node, list):
        return [p for branch in node for p in _precisions(avro, branch, seen)]
    if not isinstance(node, dict):
        return []
    found = [int(node["precision"])] if node.get("logicalType") == "decimal" else []
    children = ([f["type"] for f in node.get("fields", [])] + [node[k] for k in ("items", "values") if k in node])
    return found + [p for child in children for p in _precisions(avro, child, seen)]


def wide_decimal_dead_lettered(scenario: AvroScenario, record: AvroRecord, field: str, name: str | None, google: Any,
                               ours: Any) -> bool:
    """README "AvroConverter: a decimal of precision above 38": Google publishes the record,
    ours dead-letters it (``EXPECTED_DEAD_LETTERS`` holds the reason)."""
    if field != "messages" or len(google) != 1 or ours != [] or record.value_schema is None:
        return False
    avro = Avro(record.value_schema)
    return any(p > 38 for p in _precisions(avro, record.value_schema, set()))


RULES: dict[str, Rule] = {
    "number body: empty data": number_body_lost,
    "bytes/fixed field or key: HeapByteBuffer text": bytes_as_heap_buffer_text,
    "record key, arrays and maps in fields: Java text": collection_text_as_json,
    "dates before 1582-10-15: Julian calendar": julian_dates,
    "decimal precision above 38: dead-lettered": wide_decimal_dead_lettered,
}

#: Records ours dead-letters in the scenarios (``errors.tolerance=all``), by scenario and offset:
#: the two ``HUGE`` records, after the 120 readings.
EXPECTED_DEAD_LETTERS: dict[str, list[tuple[int, str, str]]] = {
    "records": [(offset, "AvroSchemaError", "value: decimal precision 40 is above Spark's 38")
                for offset in (120, 121)],
}
