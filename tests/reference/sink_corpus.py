"""The Kafka records of the sink's differential test, grouped into scenarios.

A scenario is one connector configuration (converters, ``messageBodyName``, ``metadata.publish``,
``headers.publish``, ``orderingKeySource``) and the records written to its own Kafka topic. The
records are deterministic: the same bytes on every run, so every difference found is the
connectors', not the corpus'.

``SCENARIOS`` hold records both connectors publish. ``FAILING`` holds records on which Google's
sink task stops for good (an exception in ``put`` or in the worker's converter); each runs in a
connector of its own, since after the first such record the original publishes nothing more.
"""

from __future__ import annotations

import base64
import json
import math
import struct
from dataclasses import dataclass, field
from typing import Any

from integration.kafka_helpers import Rec

BYTES = "org.apache.kafka.connect.converters.ByteArrayConverter"
STRING = "org.apache.kafka.connect.storage.StringConverter"
JSON = "org.apache.kafka.connect.json.JsonConverter"
SHORT = "org.apache.kafka.connect.converters.ShortConverter"
INTEGER = "org.apache.kafka.connect.converters.IntegerConverter"
LONG = "org.apache.kafka.connect.converters.LongConverter"
FLOAT = "org.apache.kafka.connect.converters.FloatConverter"
DOUBLE = "org.apache.kafka.connect.converters.DoubleConverter"
BOOLEAN = "org.apache.kafka.connect.converters.BooleanConverter"

#: Kafka topic settings for scenarios with values near Pub/Sub's 10 MB limit.
LARGE_TOPIC = {"max.message.bytes": "20000000"}
LARGE_PRODUCER = {"message.max.bytes": 20_000_000}


@dataclass
class Scenario:
    name: str
    settings: dict[str, str]
    records: list[Rec]
    topic_config: dict[str, str] = field(default_factory=dict)
    producer_config: dict[str, Any] = field(default_factory=dict)


def envelope(schema: dict[str, Any] | str, payload: Any) -> bytes:
    """A JsonConverter value with schemas on; a bare type name stands for a required schema."""
    if isinstance(schema, str):
        schema = {"type": schema, "optional": False}
    return json.dumps({"schema": schema, "payload": payload}, ensure_ascii=False).encode()


def opt(type_name: str) -> dict[str, Any]:
    return {"type": type_name, "optional": True}


def req(type_name: str) -> dict[str, Any]:
    return {"type": type_name, "optional": False}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def struct_schema(*fields: tuple[str, dict[str, Any]], optional: bool = False) -> dict[str, Any]:
    return {"type": "struct", "optional": optional,
            "fields": [{"field": name, **schema} for name, schema in fields]}


# ----------------------------------------------------------------------------------------------
# Records both connectors publish
# ----------------------------------------------------------------------------------------------


def _header_values() -> list[tuple[str, bytes | None]]:
    """Header values as Connect's default header converter sees them: plain text, numbers,
    booleans, JSON-looking text, empty, spaces, Unicode."""
    return [("plain", b"text"), ("int", b"42"), ("neg", b"-7"), ("big", b"12345678901234567890"),
            ("decimal", b"1.50"), ("float", b"2.5"), ("exp", b"1e3"), ("bool", b"true"), ("BOOL", b"FALSE"),
            ("empty", b""), ("spaces", b"  padded  "), ("list", b"[1, 2, 3]"), ("json", b'{"a": 1}'),
            ("quoted", b'"quoted"'), ("date", b"2024-02-29"), ("unicode", "ünï ✓".encode()),
            ("leading-zero", b"007")]


def bytes_records() -> list[Rec]:
    """ByteArray values under a String key: binary, empty, tombstones, Unicode, headers of every
    kind (none, many, duplicate names, binary, over Pub/Sub's limits), values near 10 MB."""
    records = [
        Rec(b"alpha", key=b"k1"),
        Rec(bytes(range(256)), key=b"binary-value"),
        Rec(b"", key=b"empty-value"),
        Rec(None, key=b"tombstone"),
        Rec(b"no key"),
        Rec(None),  # tombstone without key: the attributes are the metadata only
        Rec("ключ значение ✓ 🎉".encode(), key="ключ".encode()),
        Rec(b"\xff\xfe not utf-8", key=b"k2"),
        Rec(b"empty key", key=b""),
        Rec(b"headers", key=b"h", headers=_header_values()),
        Rec(b"duplicate headers", key=b"h", headers=[("dup", b"first"), ("dup", b"second"), ("dup", b"last")]),
        Rec(b"header shadows key", key=b"real-key", headers=[("key", b"from-header")]),
        Rec(b"header shadows metadata", key=b"k", headers=[("kafka.offset", b"from-header")]),
        Rec(b"binary header", key=b"k", headers=[("bin", b"\x00\x01\x02"), ("bad-utf8", b"\xff\xfe\xfd")]),
        Rec(b"long header name", key=b"k", headers=[("n" * 256, b"kept"), ("n" * 257, b"too long name")]),
        Rec(b"long header value", key=b"k", headers=[("v1024", b"v" * 1024), ("v1025", b"v" * 1025)]),
        Rec(b"unicode header", key=b"k", headers=[("ü" * 128, b"name of 256 bytes"), ("é" * 129, b"257 bytes")]),
        Rec(b"many headers", key=b"k", headers=[(f"h{i:03d}", str(i).encode()) for i in range(90)]),
        Rec(b"too many headers", key=b"k", headers=[(f"h{i:03d}", str(i).encode()) for i in range(120)]),
    ]
    for i in range(40):  # plain traffic: keys repeat, so ordering keys group
        records.append(Rec(f"record {i}".encode() * (i % 5 + 1), key=f"key-{i % 7}".encode(),
                           headers=[("seq", str(i).encode())] if i % 3 == 0 else None))
    return records


def large_records() -> list[Rec]:
    """Values near Pub/Sub's 10 MB limit (that the original's publisher still accepts)."""
    return [Rec(bytes([i]) * 9_000_000, key=f"large-{i}".encode()) for i in range(2)] + [Rec(b"after large")]


def string_records() -> list[Rec]:
    values = ["", "ascii", "ünïcödé", "日本語テキスト", "emoji 🎉🚀", "line\nbreaks\r\n", "tab\tand\0nul",
              " leading and trailing ", "{\"looks\": \"like json\"}", "[1, 2]", "null", "true", "42"]
    records = [Rec(v.encode(), key=k) for v in values for k in (b"string-key", "ключ".encode(), None)]
    records.append(Rec(b"\xff\xfe invalid utf-8 value", key=b"k"))
    records.append(Rec(b"bytes key", key=b"\x00\x01\xff"))
    return records


def json_schema_records() -> list[Rec]:
    """JsonConverter with schemas, as value (every schema type, optional and not, structs, maps
    with string and non-string keys, nulls) and as key."""
    key = envelope("string", "json-key")
    values: list[bytes] = [
        envelope("int8", -128), envelope("int8", 127), envelope("int16", -32768), envelope("int16", 513),
        envelope("int32", -2147483648), envelope("int32", 65537), envelope("int64", -9223372036854775808),
        envelope("int64", 1234567890123), envelope("float", 1.5), envelope("float", -0.0),
        envelope("float", 3.4028234663852886e38), envelope("double", math.pi), envelope("double", 1e300),
        envelope("double", -2.5e-300), envelope("boolean", True), envelope("boolean", False),
        envelope("string", "text ✓"), envelope("string", ""), envelope("bytes", b64(b"\x00\x01\xfe\xff")),
        envelope("bytes", b64(b"")),
    ]
    for type_name in ("int8", "int16", "int32", "int64", "float", "double", "boolean", "string", "bytes"):
        values.append(envelope(opt(type_name), None))
    values.append(envelope(opt("string"), "optional present"))
    values.append(envelope(opt("int32"), 7))
    primitives = struct_schema(
        ("i8", req("int8")), ("i16", req("int16")), ("i32", req("int32")), ("i64", req("int64")),
        ("f32", req("float")), ("f64", req("double")), ("b", req("boolean")), ("s", req("string")),
        ("o", opt("string")), ("on", opt("int64")))
    values.append(envelope(primitives, {"i8": 1, "i16": -2, "i32": 3, "i64": 40000000000, "f32": 0.1,
                                        "f64": 1e-5, "b": True, "s": "ü", "o": "present", "on": None}))
    values.append(envelope(primitives, {"i8": 0, "i16": 0, "i32": 0, "i64": 0, "f32": 1e10, "f64": 1e7,
                                        "b": False, "s": "", "o": None, "on": 5}))
    body = struct_schema(("cps_message_body", req("string")), ("attr", req("string")))
    values.append(envelope(body, {"cps_message_body": "the body", "attr": "an attribute"}))
    bytes_body = struct_schema(("cps_message_body", req("bytes")), ("n", req("int32")))
    values.append(envelope(bytes_body, {"cps_message_body": b64(b"\x00raw\xff"), "n": 9}))
    int_body = struct_schema(("cps_message_body", req("int32")))
    values.append(envelope(int_body, {"cps_message_body": 258}))
    optional_body = struct_schema(("cps_message_body", opt("string")), ("a", req("string")))
    values.append(envelope(optional_body, {"cps_message_body": None, "a": "no body"}))
    values.append(envelope(struct_schema(("only", opt("string"))), {"only": None}))
    values.append(envelope(struct_schema(("x", req("string")), optional=True), None))
    string_map = {"type": "map", "optional": False, "keys": req("string"), "values": req("string")}
    values.append(envelope(string_map, {"a": "1", "b": "ü", "cps_message_body": "map body"}))
    values.append(envelope(string_map, {}))
    int_values = {"type": "map", "optional": False, "keys": req("string"), "values": req("int64")}
    values.append(envelope(int_values, {"n": 12, "m": -1}))
    float_values = {"type": "map", "optional": False, "keys": req("string"), "values": req("double")}
    values.append(envelope(float_values, {"x": 0.5, "y": 1e21, "z": 100.0}))
    bool_map = {"type": "map", "optional": False, "keys": req("string"), "values": req("boolean")}
    values.append(envelope(bool_map, {"yes": True, "no": False}))
    int_keys = {"type": "map", "optional": False, "keys": req("int32"), "values": req("string")}
    values.append(envelope(int_keys, [[1, "one"], [-2, "minus two"]]))
    records = [Rec(v, key=key) for v in values]
    keys = [envelope("int32", 5), envelope("int64", -1), envelope("boolean", True), envelope("double", 0.25),
            envelope(opt("string"), None), envelope("string", "ключ"), envelope("string", "")]
    records.extend(Rec(envelope("string", f"keyed {i}"), key=k) for i, k in enumerate(keys))
    return records


def json_schemaless_records() -> list[Rec]:
    """JsonConverter without schemas: every JSON kind as value and as key."""
    values = ['"a string"', '""', "0", "-17", "9223372036854775807", "1.5", "1e10", "0.1", "-0.0", "true",
              "false", '{"a": 1, "b": "x"}', '{"cps_message_body": "body", "attr": 2}', "{}", "[1, 2, 3]",
              '["a", "b"]', "[]", '{"nested": {"x": [1, {"y": null}]}}', '"ünïcödé ✓"', "12345678901234567890",
              "3.141592653589793238462643383279", '{"a":1,"b":"x","c":[true,null,1.5,1e10,-0.0]}',
              '[{"k":"v"},"\\u00e9\\n",-9223372036854775808]', '{"a":1,"a":2}', '{"e":"😀"}']
    keys = [b'"text-key"', b"17", b"2.5", b"true", b'{"k": 1}', b"[1, 2]", None]
    return [Rec(v.encode(), key=keys[i % len(keys)]) for i, v in enumerate(values)]


def number_records(value_converter: str, key_converter: str) -> list[Rec]:
    """Fixed-width big-endian numbers as Connect's number converters read them."""
    samples = {
        SHORT: [struct.pack(">h", v) for v in (0, 1, -1, 32767, -32768, 258)],
        INTEGER: [struct.pack(">i", v) for v in (0, 1, -1, 2147483647, -2147483648, 16909060)],
        LONG: [struct.pack(">q", v) for v in (0, 1, -1, 9223372036854775807, -9223372036854775808, 1 << 40)],
        FLOAT: [struct.pack(">f", v) for v in (0.0, -0.0, 1.5, 0.1, 1e10, 3.4e38, math.inf, -math.inf, 1e-40,
                                                  1e7, 123456.79)],
        DOUBLE: [struct.pack(">d", v) for v in (0.0, -0.0, 1.5, 0.1, 1e21, 1e-7, math.pi, math.inf, 5e-324,
                                                    1e7, 0.001, 1234567.0)],
        BOOLEAN: [b"\x00", b"\x01"],
    }
    values, keys = samples[value_converter], samples[key_converter]
    records = [Rec(v, key=keys[i % len(keys)]) for i, v in enumerate(values)]
    records.extend(Rec(v, key=None) for v in values[:2])
    records.extend(Rec(None, key=k) for k in keys[:2])
    return records


SCENARIOS: list[Scenario] = [
    Scenario("bytes-all-attributes", {"key.converter": STRING, "value.converter": BYTES, "metadata.publish": "true",
                                      "headers.publish": "true", "orderingKeySource": "key"}, bytes_records()),
    Scenario("bytes-plain", {"key.converter": STRING, "value.converter": BYTES}, bytes_records()),
    Scenario("bytes-large", {"key.converter": STRING, "value.converter": BYTES, "metadata.publish": "true"},
             large_records(), LARGE_TOPIC, LARGE_PRODUCER),
    Scenario("string", {"key.converter": STRING, "value.converter": STRING, "metadata.publish": "true",
                        "orderingKeySource": "partition"}, string_records()),
    Scenario("string-bytes-key", {"key.converter": BYTES, "value.converter": STRING, "metadata.publish": "true",
                                  "orderingKeySource": "key"}, string_records()),
    Scenario("json-schemas", {"key.converter": JSON, "value.converter": JSON, "metadata.publish": "true",
                              "orderingKeySource": "key"}, json_schema_records()),
    Scenario("json-schemas-body-name", {"key.converter": JSON, "value.converter": JSON, "metadata.publish": "true",
                                        "messageBodyName": "attr"}, json_schema_records()),
    Scenario("json-schemaless", {"key.converter": JSON, "key.converter.schemas.enable": "false",
                                 "value.converter": JSON, "value.converter.schemas.enable": "false",
                                 "metadata.publish": "true", "orderingKeySource": "key"},
             json_schemaless_records()),
    Scenario("json-schemaless-value", {"key.converter": STRING, "value.converter": JSON,
                                       "value.converter.schemas.enable": "false", "metadata.publish": "true",
                                       "headers.publish": "true"}, json_schemaless_records()),
    Scenario("numbers-short-integer", {"key.converter": SHORT, "value.converter": INTEGER,
                                       "metadata.publish": "true"}, number_records(INTEGER, SHORT)),
    Scenario("numbers-long-float", {"key.converter": LONG, "value.converter": FLOAT, "metadata.publish": "true",
                                    "orderingKeySource": "key"}, number_records(FLOAT, LONG)),
    Scenario("numbers-double-boolean", {"key.converter": DOUBLE, "value.converter": BOOLEAN,
                                        "metadata.publish": "true"}, number_records(BOOLEAN, DOUBLE)),
    Scenario("numbers-boolean-double", {"key.converter": BOOLEAN, "value.converter": DOUBLE,
                                        "metadata.publish": "true"}, number_records(DOUBLE, BOOLEAN)),
    Scenario("numbers-integer-long", {"key.converter": INTEGER, "value.converter": LONG, "metadata.publish": "true"},
             number_records(LONG, INTEGER)),
    Scenario("numbers-float-short", {"key.converter": FLOAT, "value.converter": SHORT, "metadata.publish": "true"},
             number_records(SHORT, FLOAT)),
]


# ----------------------------------------------------------------------------------------------
# Records on which Google's sink task stops
# ----------------------------------------------------------------------------------------------

_JSON = {"key.converter": STRING, "value.converter": JSON, "metadata.publish": "true"}
_BYTES = {"key.converter": STRING, "value.converter": BYTES, "metadata.publish": "true"}
_HEADERS = {**_BYTES, "headers.publish": "true"}
_PLAIN = {"key.converter": STRING, "value.converter": BYTES}

#: name → (settings, the one record); every group of settings has ``metadata.publish`` or a
#: key, so each of our messages names the record it came from.
FAILING: dict[str, tuple[dict[str, str], Rec]] = {
    "array-value": (_JSON, Rec(envelope({"type": "array", "optional": False, "items": req("int32")}, [1, 2, 3]),
                               key=b"k")),
    "nested-struct": (_JSON, Rec(envelope(struct_schema(("inner", struct_schema(("x", req("int32"))))),
                                          {"inner": {"x": 1}}), key=b"k")),
    "map-null-value": (_JSON, Rec(envelope({"type": "map", "optional": False, "keys": req("string"),
                                            "values": opt("string")}, {"a": "1", "b": None}), key=b"k")),
    "struct-missing-field": (_JSON, Rec(envelope(struct_schema(("x", req("int32"))), {"x": None}), key=b"k")),
    "decimal": (_JSON, Rec(envelope({"type": "bytes", "optional": False, "version": 1,
                                     "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "2"}},
                                    b64((12345).to_bytes(2, "big"))), key=b"k")),
    "timestamp": (_JSON, Rec(envelope({"type": "int64", "optional": False,
                                       "name": "org.apache.kafka.connect.data.Timestamp", "version": 1},
                                      1700000000000), key=b"k")),
    "invalid-json": (_JSON, Rec(b"{not json", key=b"k")),
    "envelope-missing": (_JSON, Rec(b'{"a": 1}', key=b"k")),
    "wrong-width-integer": ({**_BYTES, "value.converter": INTEGER}, Rec(b"\x00\x01", key=b"k")),
    "null-header-value": (_HEADERS, Rec(b"v", key=b"k", headers=[("null", None), ("h1", b"v1")])),
    "null-header-text": (_HEADERS, Rec(b"v", key=b"k", headers=[("null-text", b"null"), ("h1", b"v1")])),
    "101-attributes": (_PLAIN | {"headers.publish": "true"},
                       Rec(b"v", key=b"k", headers=[(f"h{i:03d}", b"x") for i in range(101)])),
    "empty-message": (_PLAIN, Rec(b"", key=None)),
    "over-10-mb": (_BYTES, Rec(b"x" * 10_500_000, key=b"k")),
}
