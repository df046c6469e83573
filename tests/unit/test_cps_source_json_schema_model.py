"""The Cloud Pub/Sub source's Schema Registry JSON Schema keys and values: the Spark expressions
equal the per-record reference on the source corpus; what both write is the JSON of the message's
key, data and attributes and validates against the schema registered for it (an independent JSON
Schema validator is the judge); the schema texts are the ones Confluent's converter registers.

The registry is the Avro tests' recording table of ids; the real registry and Confluent's own
JSON Schema deserializer are exercised end to end in ``tests/e2e/test_cps_source_json_schema.py``.
"""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from typing import Any

import jsonschema
import pytest

from pubsub_connect.model.connect import BYTES, OPTIONAL_STRING
from pubsub_connect.model.converters import REGISTRY_AVRO_CONVERTERS
from pubsub_connect.model.cps_source.settings import struct_schema
from pubsub_connect.model.jsonschema.writer import json_schema_text
from unit.test_cps_source_avro_model import BAD_NAMES, RecordingRegistry, batch_and_reference, written_messages
from unit.test_cps_source_avro_model import SETTINGS as AVRO_SETTINGS
from unit.test_cps_source_batch import load_corpus

JSON_SCHEMA = "io.confluent.connect.json.JsonSchemaConverter"
TOPIC = "orders"

#: The Avro tests' settings with JSON Schema where they have a registry converter (the record
#: strategy's aside: JSON Schema takes TopicNameStrategy only).
SETTINGS = {name: replace(settings, **{side: JSON_SCHEMA for side in ("key_converter", "value_converter")
                                       if getattr(settings, side) in REGISTRY_AVRO_CONVERTERS})
            for name, settings in AVRO_SETTINGS.items() if name != "record_name_strategy"}


@pytest.fixture(scope="module")
def messages() -> list[dict[str, Any]]:
    return load_corpus() + BAD_NAMES  # names Avro refuses: JSON takes them


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_batch_equals_reference(spark: Any, messages: list[dict[str, Any]], name: str) -> None:
    refused = {f"{TOPIC}-value"} if name == "ordering_key_made_attribute" else set()
    want, registry = batch_and_reference(spark, messages, SETTINGS[name], refused)
    assert {(side, subject) for side, subject, _ in registry.calls} == (
        {("value", f"{TOPIC}-value")} if name.startswith("headers") else
        {("key", f"{TOPIC}-key"), ("value", f"{TOPIC}-value")})
    if refused:  # every value is a struct there (the made orderingKey): none is written
        assert {r.error_class for r in want} == {"DuplicateFieldError", "SerializationException"}
        assert {r.error_message for r in want if r.error_class == "SerializationException"} == {
            f'Schema being registered is incompatible with an earlier schema for subject "{TOPIC}-value"'}


def test_what_is_written_is_the_messages_json_and_valid_against_its_schema(
        spark: Any, messages: list[dict[str, Any]]) -> None:
    registry = RecordingRegistry()
    written = written_messages(spark, messages, SETTINGS["value_struct_key_attribute"], registry)
    for w in written:
        assert (w.row.key is None) if w.key is None else parsed(w.row.key, registry) == w.key
        encoded = base64.b64encode(w.data).decode()
        assert parsed(w.row.value, registry) == ({"message": encoded, **w.attributes} if w.struct else encoded)
    assert len(written) == 18 and sum(w.struct for w in written) == 7


def parsed(framed: bytes, registry: RecordingRegistry) -> Any:
    """The JSON after the header, validated against the schema registered for its id."""
    assert framed[0] == 0
    value = json.loads(framed[5:])
    jsonschema.validate(value, json.loads(registry.schema_of(int.from_bytes(framed[1:5], "big"))))
    return value


def test_schema_texts_are_confluents() -> None:
    """The texts Confluent's ``JsonSchemaConverter`` 8.5 registers for these Connect schemas
    (properties and keywords in its ``HashMap`` order), byte for byte."""
    assert json_schema_text(OPTIONAL_STRING) == '{"oneOf":[{"type":"null"},{"type":"string"}]}'
    assert json_schema_text(BYTES) == '{"type":"string","connect.type":"bytes"}'
    assert json_schema_text(struct_schema(["a"])) == (
        '{"type":"object","properties":{"a":{"type":"string","connect.index":1},'
        '"message":{"type":"string","connect.index":0,"connect.type":"bytes"}}}')
    assert json_schema_text(struct_schema(["attr-x", "b.c", "orderingKey"])) == (
        '{"type":"object","properties":{"attr-x":{"type":"string","connect.index":1},'
        '"b.c":{"type":"string","connect.index":2},"orderingKey":{"type":"string","connect.index":3},'
        '"message":{"type":"string","connect.index":0,"connect.type":"bytes"}}}')


def test_datums_are_confluents() -> None:
    """The JSON Confluent's ``JsonSchemaConverter`` 8.5 writes after the header for these
    values (Jackson's compact JSON: a character outside the BMP as two escapes, others as
    they are), byte for byte."""
    from pubsub_connect.model.connect import Struct
    from pubsub_connect.model.cps_source.reference import serialize_bytes_value, serialize_key, serialize_struct

    settings = SETTINGS["value_struct_key_attribute"]
    registry = RecordingRegistry()
    key = serialize_key("k1 \"q\" é 😀\u0001/", settings, registry)
    assert key is not None and key[5:] == '"k1 \\"q\\" é \\uD83D\\uDE00\\u0001/"'.encode()
    assert serialize_key(None, settings, registry) is None
    assert serialize_bytes_value(bytes([0, 1, 2, 255, 97]), settings, registry)[5:] == b'"AAEC/2E="'
    schema = struct_schema(["a"])
    value = serialize_struct(Struct(schema, {"message": "hié".encode(), "a": 'v-a "\\\t😀'}), settings, registry)
    assert value[5:] == b'{"message":"aGnDqQ==","a":"v-a \\"\\\\\\t\\uD83D\\uDE00"}'
