"""The Schema Registry Avro converters on the JVM path: the convert stage's column mapping gives
the per-record reference's messages and dead letters for every record of an Avro corpus (several
writer schemas in one batch, keys in Avro too), with no Python per record."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from pubsub_connect.model.avro.reference import RegistryAvroConverter
from pubsub_connect.model.avro.wire import frame
from pubsub_connect.model.cps_sink.batch import CpsSinkConversion
from pubsub_connect.model.cps_sink.reference import CpsSinkMapper
from pubsub_connect.model.cps_sink.settings import CpsSinkSettings, KafkaRecord
from unit.test_avro_reference import READING, READING_VALUE, encode
from unit.test_cps_sink_batch import batch_rows, bronze, keyed_records, registry_lookup
from unit.test_cps_sink_batch import reference_rows as sink_reference_rows

AVRO = "io.confluent.connect.avro.AvroConverter"
APICURIO = "io.apicurio.registry.utils.converter.AvroConverter"
STRING = "org.apache.kafka.connect.storage.StringConverter"

EVOLVED = {**READING, "fields": [*READING["fields"], {"name": "site", "type": "string", "default": "x"}]}
NESTED = {"type": "record", "name": "Outer", "fields": [{"name": "a", "type": "int"}, {
    "name": "inner", "type": {"type": "record", "name": "Inner", "fields": [{"name": "x", "type": "int"}]}}]}
EVERYTHING = {
    "type": "record", "name": "Everything", "namespace": "corpus", "fields": [
        {"name": "i8", "type": {"type": "int", "connect.type": "int8"}},
        {"name": "i", "type": "int"}, {"name": "l", "type": "long"}, {"name": "f", "type": "float"},
        {"name": "d", "type": "double"}, {"name": "b", "type": "boolean"}, {"name": "s", "type": "string"},
        {"name": "raw", "type": "bytes"}, {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 2}},
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
        {"name": "small", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 4}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "clock", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "micros", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "longs", "type": {"type": "array", "items": "long"}},
        {"name": "words", "type": {"type": "array", "items": "string"}},
        {"name": "points", "type": {"type": "array", "items": {"type": "record", "name": "P", "fields": [
            {"name": "x", "type": "double"}, {"name": "tag", "type": ["null", "string"]}]}}},
        {"name": "maybe", "type": ["null", "long"]},
        {"name": "body", "type": ["null", "string"]},
    ]}


def everything(n: int) -> dict[str, Any]:
    return {"i8": -n % 100, "i": n * 7 - 50, "l": n * 10**12, "f": n / 3, "d": n * 1e-9, "b": n % 2 == 0,
            "s": f"s-{n} \"q\" é 😀", "raw": bytes([n % 256, 0xff]), "hash": bytes([n % 256, 1]),
            "color": "GREEN" if n % 2 else "RED", "small": Decimal(n * 13 - 40).scaleb(-4),
            "day": n * 1000 - 20_000, "clock": n * 1000, "at": 1_700_000_000_000 + n, "micros": n * 1_000_001,
            "local": n, "id": f"00000000-0000-0000-0000-{n:012d}", "longs": list(range(n % 4)),
            "words": ["a", f"w{n}"][: n % 3], "points": [{"x": n / 2, "tag": None if n % 2 else "t"}],
            "maybe": None if n % 3 == 0 else n, "body": None if n % 5 == 0 else f"body-{n}"}


SCHEMAS = {1: READING, 2: EVOLVED, 3: NESTED, 4: "string", 5: ["int", "string"], 6: EVERYTHING,
           7: {"type": "array", "items": "int"}, 8: {"type": "map", "values": "long"}, 9: "bytes",
           10: {"type": "long", "logicalType": "timestamp-millis"}}


def values() -> list[bytes | None]:
    """Every kind of framed value, and bytes that are not."""
    out: list[bytes | None] = [
        encode(READING, READING_VALUE, 1),
        encode(EVOLVED, {**READING_VALUE, "site": "lab", "note": "n"}, 2),
        encode(NESTED, {"a": 1, "inner": {"x": 2}}, 3),
        encode("string", "just text", 4),
        encode(["int", "string"], 42, 5),
        encode(["int", "string"], "forty-two", 5),
        encode({"type": "array", "items": "int"}, [1, -2, 300], 7),
        encode({"type": "map", "values": "long"}, {"body": 5, "other": 6}, 8),
        frame(9, b"raw bytes \x00\xff"),
        encode({"type": "long", "logicalType": "timestamp-millis"}, 5, 10),
        frame(1, b"\x0e"),                          # truncated
        frame(99, b"\x02"),                         # an id the registry does not know
        b'{"not": "framed"}',                        # another magic byte
        b"\x00\x00",                                 # too short
        None,                                        # a tombstone
    ]
    out += [encode(EVERYTHING, everything(n), 6) for n in range(1, 31)]
    return out


def records(keys: list[bytes | None] | None = None) -> list[KafkaRecord]:
    return keyed_records(values(), "avro-topic", keys)


lookup = registry_lookup(SCHEMAS)


def reference_rows(rows: list[KafkaRecord], settings: CpsSinkSettings) -> dict[int, tuple]:
    avro = RegistryAvroConverter(lookup)
    key_avro = avro if settings.key_converter in (AVRO, APICURIO) else None
    return sink_reference_rows(rows, settings, CpsSinkMapper(settings, key_converter=key_avro, value_converter=avro))


SETTINGS = {
    "body-field": CpsSinkSettings(key_converter=STRING, value_converter=AVRO, message_body_name="name"),
    "metadata-key-ordering": CpsSinkSettings(key_converter=STRING, value_converter=APICURIO, metadata_publish=True,
                                             ordering_key_source="key", message_body_name="body"),
}


def compare(actual: dict[int, tuple], expected: dict[int, tuple]) -> None:
    assert sorted(actual) == sorted(expected)
    for offset, row in expected.items():
        got = actual[offset]
        if row[7] == "AvroDataError":  # the JVM cannot say where the bytes stop decoding: the class only
            assert got[:8] == row[:8] and got[8].startswith("value: the bytes do not decode with writer schema"), \
                offset
            continue
        assert got == row, f"offset {offset}"


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_the_jvm_path_gives_the_references_messages(spark: Any, name: str) -> None:
    settings = SETTINGS[name]
    rows = records()
    actual = batch_rows(CpsSinkConversion(settings, with_skipped_headers=True, schemas=lookup)
                        .to_outbox(bronze(spark, rows)))
    expected = reference_rows(rows, settings)
    compare(actual, expected)
    classes = sorted({r[7] for r in expected.values() if r[7]})
    assert classes == ["AvroDataError", "UnknownSchemaError", "UnsupportedValueError", "WireFormatError"]
    assert sum(1 for r in expected.values() if r[0] is not None) >= 35


def test_avro_keys(spark: Any) -> None:
    keys = [encode(READING, {**READING_VALUE, "id": n}, 1) for n in range(5)] + [None, b"\x01bad"]
    settings = CpsSinkSettings(key_converter=AVRO, value_converter=AVRO, ordering_key_source="key")
    rows = records(keys)
    actual = batch_rows(CpsSinkConversion(settings, with_skipped_headers=True, schemas=lookup)
                        .to_outbox(bronze(spark, rows)))
    compare(actual, reference_rows(rows, settings))
    keyed = [r for r in actual.values() if r[1] and "key" in r[1]]
    assert keyed and all(r[1]["key"].startswith('{"id":') for r in keyed)


def test_no_python_per_record(spark: Any) -> None:
    plan = (CpsSinkConversion(SETTINGS["body-field"], schemas=lookup).to_outbox(bronze(spark, records()))
            ._jdf.queryExecution().executedPlan().toString())
    assert not [node for node in ("MapInArrow", "PythonUDF", "BatchEvalPython", "ArrowEvalPython") if node in plan]


def test_avro_message_bodies_are_the_datums_themselves(spark: Any) -> None:
    """``messageBodyFormat=avro``: the data is each value's datum as written (a top-level bytes
    value with its Avro length), decodable with its writer schema alone; nested records, maps
    and unions are no error; only the key (and metadata) are attributes. Bytes that are not a
    datum of their schema stay dead letters."""
    import io

    import fastavro

    settings = CpsSinkSettings(key_converter=STRING, value_converter=AVRO, message_body_format="avro",
                               metadata_publish=True)
    rows = records()
    actual = batch_rows(CpsSinkConversion(settings, with_skipped_headers=True, schemas=lookup)
                        .to_outbox(bronze(spark, rows)))
    expected = reference_rows(rows, settings)
    compare(actual, expected)
    assert sorted({r[7] for r in expected.values() if r[7]}) == ["AvroDataError", "UnknownSchemaError",
                                                                 "WireFormatError"]
    published = 0
    for record in rows:
        data, attributes = actual[record.offset][:2]
        if data is None or record.value is None:
            continue
        schema_id = int.from_bytes(record.value[1:5], "big")
        decoded = fastavro.schemaless_reader(io.BytesIO(data), fastavro.parse_schema(SCHEMAS[schema_id]))
        framed = record.value[5:]
        assert data == (framed if SCHEMAS[schema_id] != "bytes" else bytes([len(framed) * 2]) + framed)
        assert decoded is not None
        assert set(attributes) == {"kafka.topic", "kafka.partition", "kafka.offset", "kafka.timestamp"} | (
            {"key"} if record.key is not None else set())
        published += 1
    assert published == 40


def test_avro_message_bodies_need_an_avro_value() -> None:
    with pytest.raises(ValueError) as refused:
        CpsSinkSettings(value_converter=STRING, message_body_format="avro")
    assert str(refused.value) == ("messageBodyFormat=avro publishes the whole value of a Schema Registry converter: "
                                  "it needs value.converter=AvroConverter, not StringConverter")
    with pytest.raises(ValueError, match=r"it needs value\.converter=AvroConverter, not JsonSchemaConverter"):
        CpsSinkSettings(value_converter="io.confluent.connect.json.JsonSchemaConverter", message_body_format="avro")


def test_a_writer_schema_the_topic_refuses_dead_letters_its_records(spark: Any) -> None:
    """With the topic's schema known, records written with another schema are dead letters naming
    it (Pub/Sub would refuse them, and the publish of their batch with them), in both paths."""
    from pubsub_connect.model.avro.schema import parsing_canonical_form

    taken = parsing_canonical_form(json.dumps(READING))

    def check(writer: str) -> str | None:
        return None if parsing_canonical_form(writer) == taken else "not the topic's schema"

    settings = CpsSinkSettings(key_converter=STRING, value_converter=AVRO, message_body_format="avro")
    rows = records()
    actual = batch_rows(CpsSinkConversion(settings, with_skipped_headers=True, schemas=lookup, body_schemas=check)
                        .to_outbox(bronze(spark, rows)))
    avro = RegistryAvroConverter(lookup)
    expected = sink_reference_rows(rows, settings, CpsSinkMapper(settings, value_converter=avro, body_schemas=check))
    compare(actual, expected)
    published = [r for r in rows if r.value is not None and actual[r.offset][0] is not None]
    assert [r.offset for r in published] == [0]  # the one record written with READING
    refused = {actual[r.offset][8] for r in rows if actual[r.offset][7] == "TopicSchemaError"}
    assert refused == {f"value: writer schema {i}: not the topic's schema" for i in SCHEMAS if i != 1}


def test_the_canonical_form_is_avros() -> None:
    """What decides whether two schemas read the same bytes alike: names made full, docs,
    defaults, aliases and logical types left out, attributes in the specification's order, a
    named type written out once."""
    from pubsub_connect.model.avro.schema import parsing_canonical_form

    written = json.dumps({"namespace": "shop", "type": "record", "name": "Order", "doc": "an order", "fields": [
        {"name": "id", "type": {"type": "long", "logicalType": "timestamp-millis"}, "default": 0},
        {"type": {"type": "enum", "symbols": ["A", "B"], "name": "Kind", "aliases": ["K"]}, "name": "kind"},
        {"name": "again", "type": "Kind"}, {"name": "m", "type": {"values": "bytes", "type": "map"}},
        {"name": "u", "type": ["null", {"type": "fixed", "name": "x.F", "size": 2}]}]})
    assert parsing_canonical_form(written) == (
        '{"name":"shop.Order","type":"record","fields":[{"name":"id","type":"long"},'
        '{"name":"kind","type":{"name":"shop.Kind","type":"enum","symbols":["A","B"]}},'
        '{"name":"again","type":"shop.Kind"},{"name":"m","type":{"type":"map","values":"bytes"}},'
        '{"name":"u","type":["null",{"name":"x.F","type":"fixed","size":2}]}]}')
    assert parsing_canonical_form('{"type": "string"}') == '"string"'


def test_json_message_bodies_are_the_values_json(spark: Any) -> None:
    """``messageBodyFormat=json``: the data is the whole value's JSON as Kafka's JsonConverter writes
    it without schemas (fields in order, nulls kept, bytes and decimals in base64, dates as days,
    timestamps as milliseconds), nested records, maps and unions included; no attribute per field."""
    settings = CpsSinkSettings(key_converter=STRING, value_converter=AVRO, message_body_format="json")
    rows = records()
    actual = batch_rows(CpsSinkConversion(settings, with_skipped_headers=True, schemas=lookup)
                        .to_outbox(bronze(spark, rows)))
    compare(actual, reference_rows(rows, settings))
    by_offset = {r.offset: actual[r.offset] for r in rows}
    assert json.loads(by_offset[2][0]) == {"a": 1, "inner": {"x": 2}}          # a nested record
    assert by_offset[4][0] == b'{"int":42,"string":null}'                       # a union, as Connect's struct
    assert by_offset[6][0] == b"[1,-2,300]"
    assert by_offset[7][0] == b'{"body":5,"other":6}'                           # a map, by name
    assert by_offset[8][0] == b'"cmF3IGJ5dGVzIAD/"'                             # top-level bytes, base64
    assert by_offset[9][0] == b"5"                                              # a timestamp: its milliseconds
    assert all(a == ({"key": f"k{o}"} if o % 4 else {}) for o, (d, a, *_) in by_offset.items()
               if d is not None and rows[o].value is not None)
