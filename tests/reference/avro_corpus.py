"""The Kafka records of the Avro differential test: Schema Registry Avro values and keys, grouped
into scenarios, as Avro datums with their writer schemas.

The records are written by Confluent's own Python serializer (``AvroSerializer``) against the
test registry (:func:`serialize`), the way a producer writes them; the datums stay here, so each
rule of :mod:`reference.avro_divergences` recomputes what each side must publish from the record
itself. Everything is deterministic: the same datums on every run.

Logical values are given as the numbers Avro writes (days, milliseconds, microseconds), decimals
as ``Decimal``: the rules then never depend on how the serializer converts a ``datetime``.

``SCENARIOS`` hold records both connectors publish (or ours dead-letters, by a README row);
``FAILING`` records on which Google's task stops for good; ``PRODUCT_BUGS`` and
``WIDE_NEGATIVE_DECIMAL`` records ours gets wrong; ``APICURIO_ONLY`` records Apicurio's converter
gives Google's task otherwise than Confluent's (whose values ours gives).
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from integration.kafka_helpers import Rec

STRING = "org.apache.kafka.connect.storage.StringConverter"
#: Milliseconds from 1970 to Java's default Gregorian cutover (1582-10-15): Google's connector
#: prints earlier dates in the Julian calendar.
GREGORIAN_CUTOVER_MS = -12219292800000
MILLIS_PER_DAY = 86_400_000


@dataclass(frozen=True)
class AvroRecord:
    """One Kafka record: its value and key as Avro datums with their writer schemas (a schema of
    None: the value is a tombstone when ``value`` is None, the key plain bytes for
    StringConverter), and its headers."""

    value_schema: Any
    value: Any
    key_schema: Any = None
    key: Any = None
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass
class AvroScenario:
    """One connector configuration and its records. ``avro_key``: the key is Schema Registry Avro
    too (else StringConverter). ``settings``: the sink's own keys, the same on both sides."""

    name: str
    settings: dict[str, str]
    avro_key: bool
    records: list[AvroRecord] = field(default_factory=list)


def serialize(registry_url: str, topic: str, records: list[AvroRecord]) -> list[Rec]:
    """The records as Confluent's serializer writes them for ``topic`` (subjects ``<topic>-value``
    and ``<topic>-key``, schemas registered on first use)."""
    registry = SchemaRegistryClient({"url": registry_url})
    serializers: dict[tuple[str, str], Callable[[Any, SerializationContext], bytes | None]] = {}

    def encode(schema: Any, datum: Any, side: MessageField) -> bytes | None:
        text = json.dumps(schema)
        if datum is None:  # Confluent's serializer writes a tombstone for None: the null branch by hand
            schema_id = registry.register_schema(f"{topic}-{side}", Schema(text, "AVRO"))
            return b"\x00" + schema_id.to_bytes(4, "big") + _zigzag(schema.index("null"))
        if (side, text) not in serializers:
            serializers[side, text] = AvroSerializer(registry, text)
        return serializers[side, text](datum, SerializationContext(topic, side))

    out = []
    for record in records:
        value = encode(record.value_schema, record.value, MessageField.VALUE) if record.value_schema else None
        key = (encode(record.key_schema, record.key, MessageField.KEY) if record.key_schema and record.key is not None
               else record.key)
        out.append(Rec(value, key=key, headers=list(record.headers) or None))
    return out


def _zigzag(number: int) -> bytes:
    """A small non-negative Avro ``long`` (a union's branch index)."""
    assert 0 <= number < 64
    return bytes([number << 1])


# ----------------------------------------------------------------------------------------------
# Schemas
# ----------------------------------------------------------------------------------------------

def logical(base: str, name: str, **extra: Any) -> dict[str, Any]:
    return {"type": base, "logicalType": name, **extra}


def decimal_bytes(precision: int, scale: int) -> dict[str, Any]:
    return logical("bytes", "decimal", precision=precision, scale=scale)


COLOR = {"type": "enum", "name": "Color", "namespace": "corpus", "symbols": ["RED", "GREEN", "BLUE"]}
HASH = {"type": "fixed", "name": "Hash", "namespace": "corpus", "size": 4}
POINT = {"type": "record", "name": "Point", "namespace": "corpus",
         "fields": [{"name": "x", "type": "double"}, {"name": "label", "type": ["null", "string"]}]}
DATE = logical("int", "date")
TIME_MILLIS = logical("int", "time-millis")
TIMESTAMP_MILLIS = logical("long", "timestamp-millis")


def reading_fields() -> list[dict[str, Any]]:
    """Every Avro primitive and logical type as a field (Google's sink makes each an attribute),
    nullable and not, enums, fixed, and arrays of each kind; no nested record, map or union
    field (Google's task stops on those: ``FAILING``)."""
    def f(name: str, schema: Any) -> dict[str, Any]:
        return {"name": name, "type": schema}

    return [
        f("i", "int"), f("l", "long"), f("f", "float"), f("d", "double"), f("b", "boolean"), f("s", "string"),
        f("raw", "bytes"), f("hash", HASH), f("color", COLOR),
        f("price", decimal_bytes(12, 2)), f("amount", decimal_bytes(38, 10)),
        f("day", DATE), f("clock", TIME_MILLIS), f("at", TIMESTAMP_MILLIS),
        f("clock_us", logical("long", "time-micros")), f("at_us", logical("long", "timestamp-micros")),
        f("local_ms", logical("long", "local-timestamp-millis")), f("id", logical("string", "uuid")),
        f("tags", {"type": "array", "items": "string"}), f("counts", {"type": "array", "items": "long"}),
        f("ratios", {"type": "array", "items": "float"}),
        f("flags", {"type": "array", "items": "boolean"}), f("points", {"type": "array", "items": POINT}),
        f("blobs", {"type": "array", "items": "bytes"}), f("days", {"type": "array", "items": DATE}),
        f("prices", {"type": "array", "items": decimal_bytes(6, 2)}),
        f("colors", {"type": "array", "items": "corpus.Color"}),
        f("maybe", {"type": "array", "items": ["null", "int"]}),
        f("matrix", {"type": "array", "items": {"type": "array", "items": "int"}}),
        f("dicts", {"type": "array", "items": {"type": "map", "values": "int"}}),
        f("n_i", ["null", "int"]), f("n_s", ["null", "string"]), f("n_day", ["null", DATE]),
        f("n_at", ["null", TIMESTAMP_MILLIS]), f("n_raw", ["null", "bytes"]), f("n_hash", ["null", "corpus.Hash"]),
        f("n_price", ["null", decimal_bytes(9, 3)]), f("n_color", ["null", "corpus.Color"]),
        f("s_n", ["string", "null"]), f("cps_message_body", ["null", "string"]),
    ]


READING = {"type": "record", "name": "Reading", "namespace": "corpus", "fields": reading_fields()}
#: The second writer schema in the same topic: two fields more, as a compatible evolution adds them.
READING_V2 = {**READING, "fields": [*reading_fields(), {"name": "site", "type": "string", "default": "main"},
                                    {"name": "version", "type": "int", "default": 2}]}
#: A decimal Spark cannot hold (precision over 38): ours dead-letters it (README).
HUGE = {"type": "record", "name": "Huge", "namespace": "corpus",
        "fields": [{"name": "amount", "type": decimal_bytes(40, 4)}, {"name": "note", "type": "string"}]}

# ----------------------------------------------------------------------------------------------
# Values
# ----------------------------------------------------------------------------------------------

FLOATS = [0.0, -0.0, 0.1, 1.5, 1e10, 3.4028234663852886e38, 1.401298464324817e-45, 1e-7, 123456.79, 1e7, math.nan,
          math.inf, -math.inf, 16777217.0, 0.001, -2.5]
DOUBLES = [0.0, -0.0, 0.1, 1e21, 1e-7, 5e-324, 1.7976931348623157e308, math.pi, 1e7, 1e-3, 100.0, math.nan,
           -math.inf, 12345678.9, 2.5e-300, -1.0]
STRINGS = ["", "ascii", "ünïcödé", "日本語テキスト", "emoji 🎉🚀", "line\nbreak\r\n", "tab\tand\u0001control",
           " spaced ", '"quoted" \\ back/slash', "null", '{"looks": "like json"}', "x" * 200, "\u2028 separator"]
BYTES = [b"", b"ascii", "ü ✓".encode(), b"\xff\xfe", bytes(range(8)), b"\xe2\x82", b"\x00", b"\x80abc"]
INTS = [0, 1, -1, 2**31 - 1, -(2**31), 65537]
LONGS = [0, -1, 2**63 - 1, -(2**63), 1 << 40, 1_700_000_000_123]
#: Days: 1970, 1969, a leap day, the Gregorian cutover and the day before it, year 1, year 9999, year 1000.
DAYS = [0, -1, 19782, -141427, -141428, -719162, 2932896, -354285, 20000, -25567]
TIMES_MS = [0, 1, 86_399_999, 3_723_004, 43_200_000]
TIMESTAMPS_MS = [0, -1, 1_700_000_000_123, GREGORIAN_CUTOVER_MS - 1, GREGORIAN_CUTOVER_MS, 253_402_300_799_999,
                 -62_135_596_800_000, 951_782_400_000, -86_400_001]
AMOUNTS = [Decimal("0"), Decimal("-1E-10"), Decimal("1234567890123456789012345678.0123456789"),
           Decimal("0.000000123"), Decimal("-1234567890123456789012345678.9876543210"), Decimal("42"),
           Decimal("9999999999999999999999999999.9999999999")]


def pick(values: list[Any], n: int) -> Any:
    return values[n % len(values)]


def reading(n: int) -> dict[str, Any]:
    """Datum ``n`` of :data:`READING`: every field cycles through its own list of values."""
    return {
        "i": pick(INTS, n), "l": pick(LONGS, n), "f": pick(FLOATS, n), "d": pick(DOUBLES, n), "b": n % 2 == 0,
        "s": pick(STRINGS, n), "raw": pick(BYTES, n), "hash": bytes([n % 256, (n * 7) % 256, 0xFF, 0x41]),
        "color": pick(COLOR["symbols"], n), "price": Decimal(n * 137 - 5000).scaleb(-2),
        "amount": pick(AMOUNTS, n), "day": pick(DAYS, n), "clock": pick(TIMES_MS, n),
        "at": pick(TIMESTAMPS_MS, n), "clock_us": n * 1_000_003, "at_us": 1_700_000_000_123_456 - n * 999_999,
        "local_ms": 1_700_000_000_000 + n, "id": str(uuid.UUID(int=n * 0x1234567 + 1)),
        "tags": [f"t{n}", "ü"][: n % 3], "counts": [n, -n * 1000, 2**40][: n % 4],
        "ratios": FLOATS[n % 5: n % 5 + 2],
        "flags": [True, False, n % 2 == 1][: n % 4], "points": [{"x": n / 4, "label": None if n % 2 else f"p{n}"}
                                                                 ][: n % 2 + (n % 5 == 0)],
        "blobs": [pick(BYTES, n + 1), b"\xff"][: n % 3], "days": [pick(DAYS, n + 3)][: n % 2],
        # Positive decimals and one-entry maps only: see PRODUCT_BUGS for negative ones and the order of entries.
        "prices": [Decimal(n).scaleb(-2), Decimal("0.05")][: n % 3], "colors": ["BLUE", "RED"][: n % 3],
        "maybe": [None, n][: n % 3], "matrix": [[n], [], [1, 2]][: n % 4], "dicts": [{"k": n}, {}][: n % 3],
        "n_i": None if n % 3 == 0 else -n, "n_s": None if n % 4 == 0 else f"ns-{n}",
        "n_day": None if n % 5 == 0 else pick(DAYS, n + 1), "n_at": None if n % 2 else pick(TIMESTAMPS_MS, n + 2),
        "n_raw": None if n % 3 == 1 else pick(BYTES, n + 2), "n_hash": None if n % 2 else b"\x00\x01\xfe\xff",
        "n_price": None if n % 4 == 1 else Decimal(-n).scaleb(-3), "n_color": None if n % 3 == 2 else "GREEN",
        "s_n": None if n % 6 == 0 else f"sn{n}", "cps_message_body": None if n % 5 == 4 else f"body {n} ✓",
    }


def records_scenario() -> list[AvroRecord]:
    """Records with every field type as attributes, two writer schemas and a third Spark cannot
    read, under a string key, some with headers, some tombstones."""
    out = []
    for n in range(120):
        schema, value = (READING_V2, {**reading(n), "site": f"site-{n % 4}", "version": n}) if n % 3 == 2 else (
            READING, reading(n))
        headers = (("source", b"corpus"), ("seq", str(n).encode())) if n % 4 == 0 else ()
        out.append(AvroRecord(schema, value, key=None if n % 11 == 0 else f"k{n % 9}".encode(), headers=headers))
    out += [AvroRecord(HUGE, {"amount": amount, "note": "too precise"}, key=b"huge")
            for amount in (Decimal("1.5000"), Decimal("-123456789012345678901234567890123456.7891"))]
    out += [AvroRecord(None, None, key=f"tombstone-{n}".encode()) for n in range(3)]
    return out


# --- messageBodyName, Avro keys, top-level values both converters hand over alike ---------------

BODY_NAME = "payload"
BODY_TYPES: list[tuple[Any, list[Any]]] = [
    ("string", ["", "text ✓", "{\"a\": 1}"]),
    ("bytes", [b"", b"\x00raw\xff", "ü".encode()]),
    ("int", [0, 258, -(2**31)]),
    ("long", [0, -1, 2**63 - 1]),
    ("float", [1.5, -0.0, math.nan]),
    ("double", [math.pi, -math.inf, 1e-300]),
    ("boolean", [True, False]),
    ({"type": "enum", "name": "Level", "namespace": "corpus", "symbols": ["LOW", "HIGH"]}, ["LOW", "HIGH"]),
    ({"type": "fixed", "name": "Tag", "namespace": "corpus", "size": 3}, [b"abc", b"\x00\xff\x10"]),
    (logical("string", "uuid"), [str(uuid.UUID(int=7)), str(uuid.UUID(int=2**128 - 1))]),
    (["null", "string"], [None, "optional body"]),
    (["null", "long"], [None, 77]),
    (logical("long", "time-micros"), [0, 86_399_999_999]),
    (logical("long", "timestamp-micros"), [1_700_000_000_123_456, -1]),
    (logical("long", "local-timestamp-millis"), [1_700_000_000_123]),
]


def body_schema(index: int, body: Any) -> dict[str, Any]:
    """A record whose ``payload`` field (``messageBodyName``) is the message body."""
    return {"type": "record", "name": f"Body{index}", "namespace": "corpus", "fields": [
        {"name": BODY_NAME, "type": body}, {"name": "n", "type": "int"},
        {"name": "note", "type": ["null", "string"], "default": None}]}


KEY_V1 = {"type": "record", "name": "OrderKey", "namespace": "corpus",
          "fields": [{"name": "id", "type": "long"}, {"name": "region", "type": "string"}]}
KEY_V2 = {"type": "record", "name": "RichKey", "namespace": "corpus", "fields": [
    {"name": "id", "type": "long"}, {"name": "alias", "type": ["null", "string"]},
    {"name": "parts", "type": {"type": "array", "items": "string"}}, {"name": "ratio", "type": "float"},
    {"name": "raw", "type": "bytes"}, {"name": "day", "type": DATE}, {"name": "price", "type": decimal_bytes(8, 3)},
]}


def keys() -> list[tuple[Any, Any]]:
    """(schema, datum) of every Avro key kind both converters give the task alike: records (two
    writer schemas) and the primitives whose Java text is the same (a ``fixed`` key differs by
    a README row); None for a record without a key."""
    return [
        ("string", "plain-key"), ("string", ""), ("string", "ключ ✓"), ("int", 5), ("int", -(2**31)), ("long", 2**40),
        ("float", 0.1), ("float", math.inf), ("double", 0.25), ("double", 1e21), ("boolean", True),
        ({"type": "enum", "name": "Region", "namespace": "corpus", "symbols": ["EU", "US"]}, "EU"),
        (logical("string", "uuid"), str(uuid.UUID(int=12345))),
        ({"type": "fixed", "name": "KeyHash", "namespace": "corpus", "size": 2}, b"k\xff"),
        (KEY_V1, {"id": 1, "region": "eu"}), (KEY_V1, {"id": -7, "region": ""}),
        (KEY_V2, {"id": 2, "alias": None, "parts": ["a", "b"], "ratio": 0.5, "raw": b"\x01\x02", "day": -141428,
                  "price": Decimal("1.250")}),
        (KEY_V2, {"id": 3, "alias": "al", "parts": [], "ratio": -0.0, "raw": b"", "day": 0, "price": Decimal("0.001")}),
        (None, None),
    ]


#: Top-level values that Apicurio's converter and Confluent's give the task alike (a string, an
#: enum, a fixed, a uuid, a one-branch union, a nullable union holding a value).
PLAIN_VALUES: list[tuple[Any, Any]] = [
    ("string", "top-level text"), ("string", ""),
    ({"type": "enum", "name": "Mood", "namespace": "corpus", "symbols": ["HAPPY", "SAD"]}, "SAD"),
    ({"type": "fixed", "name": "Six", "namespace": "corpus", "size": 6}, b"\x00\x01bin\xff"),
    (logical("string", "uuid"), str(uuid.UUID(int=99))),
    (["string"], "one branch"), (["null", "string"], "nullable present"),
]


def body_and_keys_scenario() -> list[AvroRecord]:
    """Bodies of every kind (``messageBodyName``) under every kind of Avro key, plain top-level
    values and tombstones; keys give the ordering key."""
    key_list = keys()
    out: list[AvroRecord] = []
    n = 0
    for index, (body, samples) in enumerate(BODY_TYPES):
        for sample in samples:
            for variant in range(2):
                key_schema, key = pick(key_list, n)
                value = {BODY_NAME: sample, "n": n, "note": None if variant else f"note {n}"}
                out.append(AvroRecord(body_schema(index, body), value, key_schema, key))
                n += 1
    for schema, value in PLAIN_VALUES:
        for _ in range(3):
            key_schema, key = pick(key_list, n)
            out.append(AvroRecord(schema, value, key_schema, key))
            n += 1
    for key_schema, key in key_list:
        out.append(AvroRecord(None, None, key_schema, key))
    return out


_AVRO_KEY = {"orderingKeySource": "key"}

SCENARIOS: list[AvroScenario] = [
    AvroScenario("records", {"metadata.publish": "true", "headers.publish": "true"}, False, records_scenario()),
    AvroScenario("bodies-and-keys", {"metadata.publish": "true", "messageBodyName": BODY_NAME, **_AVRO_KEY}, True,
                 body_and_keys_scenario()),
]

# ----------------------------------------------------------------------------------------------
# Records on which Google's task stops
# ----------------------------------------------------------------------------------------------


def one_field(name: str, field_type: Any) -> dict[str, Any]:
    """A record of an ``int`` field ``a`` and the field ``name``."""
    return {"type": "record", "name": f"With{name.title()}", "namespace": "corpus",
            "fields": [{"name": "a", "type": "int"}, {"name": name, "type": field_type}]}


_PLAIN = {"metadata.publish": "true"}
_BODY = {"metadata.publish": "true", "messageBodyName": BODY_NAME}

#: name → (settings, the one record); every record has a key, so each of our messages names it.
FAILING: dict[str, tuple[dict[str, str], AvroRecord]] = {
    "nested-record-field": (_PLAIN, AvroRecord(one_field("inner", {"type": "record", "name": "Inner", "fields": [
        {"name": "x", "type": "int"}]}), {"a": 1, "inner": {"x": 2}}, key=b"k")),
    "union-field": (_PLAIN, AvroRecord(one_field("either", ["int", "string"]), {"a": 1, "either": "text"}, key=b"k")),
    "map-field": (_PLAIN, AvroRecord(one_field("dict", {"type": "map", "values": "int"}), {"a": 1, "dict": {"x": 1}},
                                     key=b"k")),
    "one-branch-union-field": (_PLAIN, AvroRecord(one_field("single", ["string"]), {"a": 1, "single": "only"},
                                                  key=b"k")),
    "array-value": (_PLAIN, AvroRecord({"type": "array", "items": "int"}, [1, 2, 3], key=b"k")),
    "array-body": (_BODY, AvroRecord(one_field(BODY_NAME, {"type": "array", "items": "int"}),
                                     {"a": 1, BODY_NAME: [1, -2]}, key=b"k")),
    "decimal-body": (_BODY, AvroRecord(one_field(BODY_NAME, decimal_bytes(6, 2)),
                                       {"a": 1, BODY_NAME: Decimal("123.45")}, key=b"k")),
    "date-body": (_BODY, AvroRecord(one_field(BODY_NAME, DATE), {"a": 1, BODY_NAME: 19782}, key=b"k")),
    "time-body": (_BODY, AvroRecord(one_field(BODY_NAME, TIME_MILLIS), {"a": 1, BODY_NAME: 3_723_004}, key=b"k")),
    "timestamp-body": (_BODY, AvroRecord(one_field(BODY_NAME, TIMESTAMP_MILLIS),
                                         {"a": 1, BODY_NAME: 1_700_000_000_123}, key=b"k")),
    # A product bug (see the test): ours must publish the unscaled bytes, 0xcf 0xc7.
    "negative-decimal-body": (_BODY, AvroRecord(one_field(BODY_NAME, decimal_bytes(6, 2)),
                                                {"a": 1, BODY_NAME: Decimal("-123.45")}, key=b"k")),
}

# ----------------------------------------------------------------------------------------------
# Product bugs: what ours must do and does not (expected failures of the test)
# ----------------------------------------------------------------------------------------------

KEY_NESTED = {"type": "record", "name": "NestedKey", "namespace": "corpus", "fields": [
    {"name": "id", "type": "long"},
    {"name": "inner", "type": {"type": "record", "name": "KeyInner", "fields": [{"name": "x", "type": "int"}]}}]}
KEY_LABELS = {"type": "record", "name": "LabelledKey", "namespace": "corpus", "fields": [
    {"name": "id", "type": "long"}, {"name": "labels", "type": {"type": "map", "values": "string"}}]}
KEY_PRICE = {"type": "record", "name": "PricedKey", "namespace": "corpus", "fields": [
    {"name": "id", "type": "long"}, {"name": "price", "type": decimal_bytes(8, 3)}]}
PRICES = {"type": "record", "name": "Prices", "namespace": "corpus", "fields": [
    {"name": "prices", "type": {"type": "array", "items": decimal_bytes(6, 2)}}]}
DICTS = {"type": "record", "name": "Dicts", "namespace": "corpus", "fields": [
    {"name": "dicts", "type": {"type": "array", "items": {"type": "map", "values": "int"}}}]}
_KEY = ("string", "k")


def _bug_records() -> dict[str, list[AvroRecord]]:
    return {
        # A negative decimal in compact JSON: the base64 of its unscaled two's-complement bytes.
        "negative decimal in JSON": [
            AvroRecord(PRICES, {"prices": [Decimal("-0.05"), Decimal("-1.00"), Decimal("-9999.99")]}, *_KEY),
            AvroRecord("string", "v", KEY_PRICE, {"id": 1, "price": Decimal("-0.001")}),
            AvroRecord("string", "v", KEY_PRICE, {"id": 2, "price": Decimal("-12345.678")})],
        # A map's entries in compact JSON: in the record's order.
        "map entries in JSON": [
            AvroRecord(DICTS, {"dicts": [{"z": 1, "a": 2, "key": 3, "cps_message_body": 4}]}, *_KEY),
            AvroRecord(DICTS, {"dicts": [{"b": 1, "a": 2}, {"one": 1, "two": 2, "three": 3}]}, *_KEY)],
        # A record key holding a record or a map: Google publishes its text (README: compact JSON).
        "record key with a record or map field": [
            AvroRecord("string", "v", KEY_NESTED, {"id": 1, "inner": {"x": 2}}),
            AvroRecord("string", "v", KEY_LABELS, {"id": 2, "labels": {"a": "1"}})],
    }


BUG_RECORDS = _bug_records()
#: One scenario for the bugs that dead-letter or misprint records: each bug's records, in order.
PRODUCT_BUGS = AvroScenario("product-bugs", {"metadata.publish": "true", **_AVRO_KEY}, True,
                            [r for records in BUG_RECORDS.values() for r in records])
#: A negative decimal of more than 34 digits whose rounding to 34 digits carries into a new one:
#: our convert stage fails on it (Spark negates a decimal in ``abs``, for ``BigDecimal``'s text,
#: through a 34-digit context), so it may not share a run with other records.
WIDE_NEGATIVE_DECIMAL = AvroScenario("wide-negative-decimal", {"metadata.publish": "true"}, False, [
    AvroRecord({"type": "record", "name": "Wide", "namespace": "corpus", "fields": [
        {"name": "amount", "type": decimal_bytes(38, 10)}]},
        {"amount": Decimal("-9999999999999999999999999999.9999999999")}, key=b"k")])

# ----------------------------------------------------------------------------------------------
# Where Apicurio's converter gives Google's task other values than Confluent's
# ----------------------------------------------------------------------------------------------

#: Values that are not Avro records, enums, fixed or arrays (and such keys): Apicurio's converter
#: gives the task the deserialized Java object without a Connect schema (Google's sink then
#: publishes its ``toString``), Confluent's a Connect schema and value (which ours maps). Also a
#: ``bytes`` writer schema (Confluent's serializers write the bytes as they are, Apicurio's
#: deserializer reads Avro's length-prefixed bytes) and a decimal on a ``fixed`` (Apicurio's
#: converter fails on it): converter errors, which ``errors.tolerance=all`` skips.
APICURIO_ONLY = AvroScenario("apicurio-only", {"metadata.publish": "true", "errors.tolerance": "all"}, True, [
    AvroRecord("int", 258, *_KEY), AvroRecord("long", -5, *_KEY), AvroRecord("float", 1.5, *_KEY),
    AvroRecord("double", 0.25, *_KEY), AvroRecord("boolean", True, *_KEY),
    AvroRecord({"type": "map", "values": "long"}, {"a": 1, "cps_message_body": 2}, *_KEY),
    AvroRecord(["int", "string"], "union text", *_KEY), AvroRecord(["int", "long"], 3, *_KEY),
    AvroRecord(DATE, 19782, *_KEY), AvroRecord(TIMESTAMP_MILLIS, 1_700_000_000_123, *_KEY),
    AvroRecord(logical("long", "timestamp-micros"), 12, *_KEY),
    AvroRecord(["null", "string"], None, *_KEY),
    AvroRecord("string", "date key", DATE, 19782), AvroRecord("string", "union key", ["int", "string"], "u"),
    AvroRecord("bytes", b"raw value", *_KEY),
    AvroRecord({"type": "fixed", "name": "Price", "namespace": "corpus", "size": 4, "logicalType": "decimal",
                "precision": 9, "scale": 2}, Decimal("-12.34"), *_KEY),
    AvroRecord(one_field("price", {"type": "fixed", "name": "FieldPrice", "size": 4, "logicalType": "decimal",
                                   "precision": 9, "scale": 2}), {"a": 1, "price": Decimal("12.34")}, *_KEY),
])
