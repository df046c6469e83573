"""Schema Registry Avro → Connect → Pub/Sub message, per record: the Connect schemas and values
Confluent's AvroConverter gives (AvroData's rules), and what Google's sink makes of them.

The datums are written by fastavro (an encoder independent of the decoder under test) and framed
with their schema id; the expected values are literals.
"""

from __future__ import annotations

import io
import json
from decimal import Decimal
from typing import Any

import fastavro
import pytest

from pubsub_connect.model.avro.reference import AvroDataError, RegistryAvroConverter
from pubsub_connect.model.avro.schema import AvroSchemaError, connect_schema, parse_schema
from pubsub_connect.model.avro.wire import WireFormatError, frame, split_frame
from pubsub_connect.model.connect import (
    DATE,
    DECIMAL,
    TIME,
    TIMESTAMP,
    Field,
    JavaDate,
    Schema,
    Struct,
    Type,
)
from pubsub_connect.model.converters import java_text
from pubsub_connect.model.cps_sink.reference import CpsSinkMapper
from pubsub_connect.model.cps_sink.settings import CpsSinkSettings, UnsupportedValueError

READING = {
    "type": "record", "name": "Reading", "namespace": "example",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "at_micros", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
        {"name": "ratio", "type": "float"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "ok", "type": "boolean"},
    ],
}
READING_VALUE = {"id": 7, "name": "ann", "price": Decimal("12.34"), "day": 19_000, "at": 1_700_000_000_123,
                 "at_micros": 1_700_000_000_123_456, "color": "GREEN", "ratio": 0.1, "tags": ["a", "b"],
                 "note": None, "ok": True}


def encode(schema: Any, datum: Any, schema_id: int) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), datum)
    return frame(schema_id, out.getvalue())


def converter(*schemas: Any) -> RegistryAvroConverter:
    """A converter whose registry holds ``schemas`` as ids 1, 2, …"""
    texts = {i: json.dumps(s) for i, s in enumerate(schemas, start=1)}
    return RegistryAvroConverter(texts.__getitem__)


# --------------------------------------------------------------------------------------------
# Avro schema → Connect schema
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("avro", "expected"), [
    ("int", Schema(Type.INT32)),
    ({"type": "int", "connect.type": "int16"}, Schema(Type.INT16)),
    ("long", Schema(Type.INT64)),
    ("float", Schema(Type.FLOAT32)),
    ("double", Schema(Type.FLOAT64)),
    ("boolean", Schema(Type.BOOLEAN)),
    ({"type": "string", "logicalType": "uuid"}, Schema(Type.STRING)),
    ({"type": "fixed", "name": "Hash", "namespace": "ex", "size": 4},
     Schema(Type.BYTES, name="ex.Hash", parameters=(("connect.fixed.size", "4"),))),
    ({"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
     Schema(Type.BYTES, name=DECIMAL, version=1, parameters=(("scale", "2"), ("connect.decimal.precision", "10")))),
    ({"type": "fixed", "name": "D", "size": 8, "logicalType": "decimal", "precision": 64, "scale": 3},
     Schema(Type.BYTES, name=DECIMAL, version=1, parameters=(("scale", "3"), ("connect.fixed.size", "8")))),
    ({"type": "int", "logicalType": "date"}, Schema(Type.INT32, name=DATE)),
    ({"type": "int", "logicalType": "time-millis"}, Schema(Type.INT32, name=TIME)),
    ({"type": "long", "logicalType": "timestamp-millis"}, Schema(Type.INT64, name=TIMESTAMP)),
    ({"type": "long", "logicalType": "timestamp-micros"}, Schema(Type.INT64)),
    ({"type": "long", "logicalType": "local-timestamp-millis"}, Schema(Type.INT64)),
    ({"type": "long", "connect.name": TIMESTAMP}, Schema(Type.INT64, name=TIMESTAMP)),
    ({"type": "enum", "name": "Color", "namespace": "ex", "symbols": ["RED", "GREEN"]},
     Schema(Type.STRING, name="ex.Color", parameters=(("io.confluent.connect.avro.Enum", "ex.Color"),
                                                       ("io.confluent.connect.avro.Enum.RED", "RED"),
                                                       ("io.confluent.connect.avro.Enum.GREEN", "GREEN")))),
    ({"type": "array", "items": "long"}, Schema(Type.ARRAY, value_schema=Schema(Type.INT64))),
    ({"type": "map", "values": "double"}, Schema(Type.MAP, key_schema=Schema(Type.STRING),
                                                   value_schema=Schema(Type.FLOAT64))),
    ({"type": "array", "items": {"type": "record", "name": "io.confluent.connect.avro.MapEntry",
                                 "fields": [{"name": "key", "type": "int"}, {"name": "value", "type": "string"}]}},
     Schema(Type.MAP, key_schema=Schema(Type.INT32), value_schema=Schema(Type.STRING))),
    (["null", "string"], Schema(Type.STRING, optional=True)),
    (["string", "null"], Schema(Type.STRING, optional=True)),
    (["string"], Schema(Type.STRING)),
    (["int", "string"], Schema(Type.STRUCT, name="io.confluent.connect.avro.Union", fields=(
        Field("int", Schema(Type.INT32, optional=True)), Field("string", Schema(Type.STRING, optional=True))))),
    (["null", "int", {"type": "record", "name": "ex.Point", "fields": [{"name": "x", "type": "int"}]}],
     Schema(Type.STRUCT, optional=True, name="io.confluent.connect.avro.Union", fields=(
         Field("int", Schema(Type.INT32, optional=True)),
         Field("Point", Schema(Type.STRUCT, optional=True, name="ex.Point",
                               fields=(Field("x", Schema(Type.INT32)),)))))),
])
def test_connect_schemas_are_avro_datas(avro: Any, expected: Schema) -> None:
    assert connect_schema(parse_schema(json.dumps(avro))) == expected


def test_record_fields_keep_order_and_nullability() -> None:
    schema = connect_schema(parse_schema(json.dumps(READING)))
    assert (schema.type, schema.name) == (Type.STRUCT, "example.Reading")
    assert [f.name for f in schema.fields] == [f["name"] for f in READING["fields"]]
    assert [f.name for f in schema.fields if f.schema.optional] == ["note"]


def test_recursive_and_undefined_schemas_are_one_line_errors() -> None:
    linked = {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}
    with pytest.raises(AvroSchemaError, match=r"^record Node refers to itself; Connect schemas cannot be recursive$"):
        connect_schema(parse_schema(json.dumps(linked)))
    with pytest.raises(AvroSchemaError, match="undefined type 'Nope'"):
        parse_schema(json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "Nope"}]}))


# --------------------------------------------------------------------------------------------
# Datums → Connect values
# --------------------------------------------------------------------------------------------


def test_a_record_decodes_to_avro_datas_values() -> None:
    decoded = converter(READING).to_connect(encode(READING, READING_VALUE, 1))
    assert isinstance(decoded.value, Struct)
    assert decoded.value.values == {
        "id": 7, "name": "ann", "price": Decimal("12.34"), "day": JavaDate(19_000 * 86_400_000),
        "at": JavaDate(1_700_000_000_123), "at_micros": 1_700_000_000_123_456, "color": "GREEN",
        "ratio": pytest.approx(0.1, rel=1e-7), "tags": ["a", "b"], "note": None, "ok": True,
    }


BIG = 1234567890123456789012345678900000000001


@pytest.mark.parametrize(("avro", "datum", "expected"), [
    # A bytes writer schema has the raw bytes after the header, not their Avro encoding: for a
    # Decimal its unscaled value's two's complement.
    ({"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 10}, BIG.to_bytes(17, "big", signed=True),
     Decimal("123456789012345678901234567890.0000000001")),
    ({"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}, b"\xfb", Decimal("-0.05")),
    ("bytes", b"raw \x00 bytes", b"raw \x00 bytes"),
    ({"type": "record", "name": "R", "fields": [{"name": "d", "type": {"type": "bytes", "logicalType": "decimal",
                                                                       "precision": 40, "scale": 10}}]},
     {"d": Decimal("123456789012345678901234567890.0000000001")},
     {"d": Decimal("123456789012345678901234567890.0000000001")}),
    ({"type": "fixed", "name": "F", "size": 3}, b"\x00\xff\x10", b"\x00\xff\x10"),
    ({"type": "int", "logicalType": "time-millis"}, 3_600_000, JavaDate(3_600_000)),
    ({"type": "map", "values": "int"}, {"a": 1, "b": 2}, {"a": 1, "b": 2}),
    ("string", "héllo", "héllo"),
])
def test_values(avro: Any, datum: Any, expected: Any) -> None:
    raw = avro == "bytes" or (isinstance(avro, dict) and avro.get("type") == "bytes")
    value = converter(avro).to_connect(frame(1, datum) if raw else encode(avro, datum, 1)).value
    assert (value.values if isinstance(value, Struct) else value) == expected


def test_a_union_is_a_union_struct_with_the_decoded_branch_set() -> None:
    union = ["null", "int", "string"]
    decoded = converter(union).to_connect(encode(union, "x", 1))
    assert decoded.value.values == {"string": "x"} and decoded.value.schema.name == "io.confluent.connect.avro.Union"
    assert converter(union).to_connect(encode(union, 5, 1)).value.values == {"int": 5}


def test_two_writer_schemas_in_one_topic() -> None:
    evolved = {**READING, "fields": [*READING["fields"], {"name": "site", "type": "string", "default": "x"}]}
    both = converter(READING, evolved)
    first = both.to_connect(encode(READING, READING_VALUE, 1))
    second = both.to_connect(encode(evolved, {**READING_VALUE, "site": "lab"}, 2))
    assert "site" not in first.value.values and second.value.get("site") == "lab"
    assert second.schema.field("site") == Field("site", Schema(Type.STRING))


@pytest.mark.parametrize(("data", "error", "message"), [
    (b"{\"a\":1}", WireFormatError, r"^Unknown magic byte! \(the first byte is 0x7b, not 0x00"),
    (b"\x00\x00\x01", WireFormatError, r"too short for the Schema Registry wire format"),
    (frame(1, b"\x0e"), AvroDataError, r"^the datum ends"),
    (frame(1, b"\x0e\x07ann"), AvroDataError, r"^a negative length \(-4\)$"),
])
def test_bytes_that_do_not_decode_are_one_line_errors(data: bytes, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        converter(READING).to_connect(data)


def test_a_null_datum_is_an_error_and_a_tombstone_is_null() -> None:
    union = ["null", "string"]
    with pytest.raises(AvroDataError, match="the datum is null"):
        converter(union).to_connect(encode(union, None, 1))
    assert converter(union).to_connect(None).value is None


def test_split_frame() -> None:
    assert split_frame(b"\x00\x00\x00\x01\x02abc") == (258, b"abc")


# --------------------------------------------------------------------------------------------
# What Google's sink makes of them
# --------------------------------------------------------------------------------------------


def sink(value_converter: RegistryAvroConverter, **keys: Any) -> CpsSinkMapper:
    return CpsSinkMapper(CpsSinkSettings(**keys), value_converter=value_converter)


def test_a_record_becomes_its_body_field_and_attributes_of_java_text() -> None:
    result = sink(converter(READING), message_body_name="name").map_values(
        None, encode(READING, READING_VALUE, 1), "t", 0, 0, None, None)
    assert result.message is not None
    assert result.message.data == b"ann"
    assert result.message.attributes == {
        "id": "7", "price": "12.34", "day": "Sat Jan 08 00:00:00 UTC 2022", "at": "Tue Nov 14 22:13:20 UTC 2023",
        "at_micros": "1700000000123456", "color": "GREEN", "ratio": "0.1", "tags": '["a","b"]', "ok": "true",
    }


@pytest.mark.parametrize(("field_type", "kind"), [
    ({"type": "record", "name": "Inner", "fields": [{"name": "x", "type": "int"}]}, "STRUCT"),
    (["null", {"type": "record", "name": "Inner", "fields": [{"name": "x", "type": "int"}]}], "STRUCT"),
    ({"type": "map", "values": "string"}, "MAP"),
    (["int", "string"], "STRUCT"),
])
def test_nested_records_maps_and_unions_cannot_be_attributes(field_type: Any, kind: str) -> None:
    """Google's task fails on such a field, even a null one; here the record is a dead letter."""
    schema = {"type": "record", "name": "Outer", "fields": [{"name": "a", "type": "int"},
                                                             {"name": "inner", "type": field_type}]}
    datum = {"a": 1, "inner": {"x": 1} if kind == "STRUCT" and not isinstance(field_type, list) else
             ({"k": "v"} if kind == "MAP" else (None if field_type[0] == "null" else 5))}
    with pytest.raises(UnsupportedValueError, match=f'struct field "inner" is a nested {kind}'):
        sink(converter(schema)).map_values(None, encode(schema, datum, 1), "t", 0, 0, None, None)


@pytest.mark.parametrize(("avro", "datum", "body"), [
    ({"type": "int", "logicalType": "date"}, -3, b"\xff\xff\xff\xfd"),
    ({"type": "int", "logicalType": "time-millis"}, 258, b"\x00\x00\x01\x02"),
    ({"type": "long", "logicalType": "timestamp-millis"}, 1, b"\x00" * 7 + b"\x01"),
    ({"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}, b"\xff\x38", b"\xff\x38"),
])
def test_logical_values_as_the_body_are_their_base_types_bytes(avro: Any, datum: Any, body: bytes) -> None:
    """Google's task fails on them; here they publish as JSON's logical values do (README)."""
    data = frame(1, datum) if isinstance(datum, bytes) else encode(avro, datum, 1)
    result = sink(converter(avro)).map_values(None, data, "t", 0, 0, None, None)
    assert result.message is not None and result.message.data == body


@pytest.mark.parametrize(("value", "text"), [
    (Decimal("1E-10"), "1E-10"), (Decimal("0.00000123"), "0.00000123"), (Decimal("1E+3"), "1E+3"),
    (Decimal("0.000"), "0.000"), (JavaDate(0), "Thu Jan 01 00:00:00 UTC 1970"),
    (JavaDate(-62_135_596_800_000 + 86_400_000), "Tue Jan 02 00:00:00 UTC 1"),
])
def test_java_text_of_logical_values(value: Any, text: str) -> None:
    """BigDecimal.toString and java.util.Date.toString (a JVM in UTC), as the JDK prints them."""
    assert java_text(None, value) == text
