"""The Cloud Pub/Sub source's Schema Registry Avro keys and values: the Spark expressions equal
the per-record reference on the source corpus, and what both write decodes, with the schema
registered for it, to the Connect value Google's source hands its worker (an independent Avro
reader, fastavro, is the judge).

The registry here is a recording table of ids (the model's only view of a registry is the id it
is given for a subject and schema); the real registry is exercised end to end in
``tests/e2e/test_cps_source_avro.py``.
"""

from __future__ import annotations

import io
import json
import zlib
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

import fastavro
import pytest

from pubsub_connect.model.avro.writer import (
    RECORD_NAME_STRATEGY,
    InvalidAvroNameError,
    SchemaRegistrationError,
    avro_name_problem,
    avro_schema_text,
    subject_name,
    zigzag_varint,
)
from pubsub_connect.model.connect import BYTES, OPTIONAL_STRING
from pubsub_connect.model.cps_source.batch import KafkaOutboxConversion
from pubsub_connect.model.cps_source.reference import reference_outbox
from pubsub_connect.model.cps_source.settings import CpsSourceSettings, OutboxRow, struct_schema
from unit.test_cps_source_batch import bronze_df, collect, load_corpus, to_received

AVRO = "io.confluent.connect.avro.AvroConverter"
APICURIO_AVRO = "io.apicurio.registry.utils.converter.AvroConverter"
BYTE_ARRAY = "org.apache.kafka.connect.converters.ByteArrayConverter"
TOPIC = "orders"


@dataclass
class RecordingRegistry:
    """Ids by (subject, schema text), a checksum of both (so they do not depend on the order the
    schemas are asked for in); ``refused`` subjects answer like a registry refusing an
    incompatible version."""

    refused: set[str] = field(default_factory=set)
    ids: dict[tuple[str, str], int] = field(default_factory=dict)
    calls: list[tuple[str, str, str]] = field(default_factory=list)

    def __call__(self, side: str, subject: str, text: str) -> int:
        self.calls.append((side, subject, text))
        if subject in self.refused:
            raise SchemaRegistrationError(f"Schema being registered is incompatible with an earlier schema for "
                                          f"subject \"{subject}\"")
        return self.ids.setdefault((subject, text), zlib.crc32(f"{subject}\n{text}".encode()) >> 1)

    def schema_of(self, schema_id: int) -> str:
        return next(text for (_, text), known in self.ids.items() if known == schema_id)


#: Corpus messages whose attribute names Avro refuses, beside the corpus's own.
BAD_NAMES = [
    {"message_id": "bad-dot", "data_hex": "6869", "attributes": {"kafka.topic": "t"}, "publish_time_ms": 5},
    {"message_id": "bad-digit", "data_hex": "", "attributes": {"1abc": "v", "fox": "k"}, "publish_time_ms": 6},
]

SETTINGS = {
    "value_struct_key_attribute": CpsSourceSettings(kafka_key_attribute="fox", kafka_timestamp_attribute="over",
                                                    key_converter=AVRO, value_converter=AVRO, partition_count=3,
                                                    kafka_topic=TOPIC),
    "ordering_key_made_attribute": CpsSourceSettings(kafka_key_attribute="orderingKey", key_converter=AVRO,
                                                     value_converter=APICURIO_AVRO, make_ordering_key_attribute=True,
                                                     partition_scheme="hash_key", partition_count=4,
                                                     kafka_topic=TOPIC),
    "headers_bytes_values_string_keys": CpsSourceSettings(kafka_key_attribute="fox", kafka_record_headers=True,
                                                          key_converter="org.apache.kafka.connect.storage."
                                                          "StringConverter", value_converter=AVRO,
                                                          kafka_topic=TOPIC),
    "record_name_strategy": CpsSourceSettings(kafka_key_attribute="fox", key_converter=AVRO, value_converter=AVRO,
                                              kafka_topic=TOPIC, key_subject_strategy=RECORD_NAME_STRATEGY,
                                              value_subject_strategy=RECORD_NAME_STRATEGY),
}


#: The sides and subjects each setting's records are registered under (a record strategy's
#: key and bytes values are refused before any registry is asked).
SUBJECTS = {
    "value_struct_key_attribute": {("key", f"{TOPIC}-key"), ("value", f"{TOPIC}-value")},
    "ordering_key_made_attribute": {("key", f"{TOPIC}-key"), ("value", f"{TOPIC}-value")},
    "headers_bytes_values_string_keys": {("value", f"{TOPIC}-value")},
    "record_name_strategy": {("value", "io.confluent.connect.avro.ConnectDefault")},
}


@pytest.fixture(scope="module")
def messages() -> list[dict[str, Any]]:
    return load_corpus() + BAD_NAMES


def reference(rows: list[dict[str, Any]], settings: CpsSourceSettings, registry: RecordingRegistry) -> list[OutboxRow]:
    out = reference_outbox([to_received(r) for r in rows], settings, 0, registry)
    return sorted(out, key=lambda r: r.message_id)


def batch_and_reference(spark: Any, messages: list[dict[str, Any]], settings: CpsSourceSettings,
                        refused: set[str]) -> tuple[list[OutboxRow], RecordingRegistry]:
    """The reference's rows, asserted equal to the JVM path's, and the registry the JVM path
    asked, asserted to have been asked for what the reference asked (``refused``: subjects the
    registry refuses)."""
    registry, reference_registry = RecordingRegistry(refused=set(refused)), RecordingRegistry(refused=set(refused))
    want = reference(messages, settings, reference_registry)
    got = collect(KafkaOutboxConversion(settings, schema_ids=registry).apply(bronze_df(spark, messages)))
    assert got == want
    assert set(registry.calls) == set(reference_registry.calls)
    return want, registry


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_batch_equals_reference(spark: Any, messages: list[dict[str, Any]], name: str) -> None:
    refused = {f"{TOPIC}-value"} if name == "ordering_key_made_attribute" else set()
    _, registry = batch_and_reference(spark, messages, SETTINGS[name], refused)
    # both paths asked for the same schemas, on the same sides, under the subjects the strategies name
    assert {(side, subject) for side, subject, _ in registry.calls} == SUBJECTS[name]


def decoded(framed: bytes, registry: RecordingRegistry) -> Any:
    """The Connect value a reader of the wire format gets, with fastavro (top-level bytes raw)."""
    assert framed[0] == 0
    text = registry.schema_of(int.from_bytes(framed[1:5], "big"))
    if json.loads(text) == "bytes":
        return framed[5:]
    return fastavro.schemaless_reader(io.BytesIO(framed[5:]), fastavro.parse_schema(json.loads(text)))


@dataclass(frozen=True)
class Written:
    """A message written once and without error, and its record."""

    row: OutboxRow
    key: str | None
    data: bytes
    attributes: dict[str, str]
    struct: bool  # custom attributes: a STRUCT value


def written_messages(spark: Any, messages: list[dict[str, Any]], settings: CpsSourceSettings,
                     registry: RecordingRegistry) -> list[Written]:
    """The messages the conversion wrote (redeliveries: one is written; dead letters left out)."""
    rows = {r.message_id: r for r in collect(KafkaOutboxConversion(settings, schema_ids=registry)
                                             .apply(bronze_df(spark, messages)))}
    ids = Counter(m["message_id"] for m in messages)
    out = []
    for message in messages:
        row = rows[message["message_id"]]
        if row.error_class is not None or ids[message["message_id"]] > 1:
            continue
        attributes = dict(message.get("attributes") or {})
        key = attributes.pop(settings.kafka_key_attribute or "", None)
        custom = set(attributes) - {settings.kafka_timestamp_attribute}  # the timestamp alone makes no struct
        out.append(Written(row, key, bytes.fromhex(message.get("data_hex") or ""), attributes, bool(custom)))
    return out


def test_what_is_written_decodes_to_the_originals_values(spark: Any, messages: list[dict[str, Any]]) -> None:
    """Each written key and value decodes to the key, data and attributes of its message."""
    registry = RecordingRegistry()
    written = written_messages(spark, messages, SETTINGS["value_struct_key_attribute"], registry)
    for w in written:
        assert (w.row.key is None) if w.key is None else decoded(w.row.key, registry) == w.key
        assert decoded(w.row.value, registry) == ({"message": w.data, **w.attributes} if w.struct else w.data)
    assert len(written) == 16 and sum(w.struct for w in written) == 5


def test_dead_letters_name_avros_and_the_registrys_reasons(spark: Any, messages: list[dict[str, Any]]) -> None:
    rows = {r.message_id: r for r in collect(KafkaOutboxConversion(
        SETTINGS["value_struct_key_attribute"], schema_ids=RecordingRegistry()).apply(bronze_df(spark, messages)))}
    assert (rows["bad-dot"].error_class, rows["bad-dot"].error_message) == \
        ("SchemaParseException", "Illegal character in: kafka.topic")
    assert (rows["bad-digit"].error_class, rows["bad-digit"].error_message) == \
        ("SchemaParseException", "Illegal initial character: 1abc")
    assert (rows["bad-dot"].key, rows["bad-dot"].value) == (None, b"hi")
    keyed = {r.message_id: r for r in collect(KafkaOutboxConversion(
        SETTINGS["record_name_strategy"], schema_ids=RecordingRegistry()).apply(bronze_df(spark, messages)))}
    reasons = {(r.error_class, r.error_message) for r in keyed.values() if r.key is not None}
    assert reasons == {("SerializationException", f"In configuration key.subject.name.strategy = "
                                                   f"{RECORD_NAME_STRATEGY}, the message key must only be a record "
                                                   "schema")}


def test_schemas_are_resolved_once_and_a_complete_set_runs_no_job(spark: Any, messages: list[dict[str, Any]]) -> None:
    """Headers mode writes two schemas at most (key, bytes value): once both are known, later
    batches ask the registry nothing and run the jobs a conversion without a registry runs."""
    settings = replace(SETTINGS["headers_bytes_values_string_keys"], key_converter=AVRO)
    registry = RecordingRegistry()
    conversion = KafkaOutboxConversion(settings, schema_ids=registry)
    frame = bronze_df(spark, messages)
    tracker, context = spark.sparkContext.statusTracker(), spark.sparkContext

    def jobs_of(group: str, applied: KafkaOutboxConversion = conversion) -> tuple[list[OutboxRow], int]:
        context.setJobGroup(group, group)
        try:
            rows = collect(applied.apply(frame))
        finally:
            context.setLocalProperty("spark.jobGroup.id", None)
        return rows, len(tracker.getJobIdsForGroup(group))

    first, first_jobs = jobs_of("avro-first-batch")
    assert [c[1] for c in registry.calls] == [f"{TOPIC}-key", f"{TOPIC}-value"]  # the key first, as Connect
    again, again_jobs = jobs_of("avro-second-batch")
    assert again == first and len(registry.calls) == 2
    plain = KafkaOutboxConversion(replace(settings, key_converter=BYTE_ARRAY, value_converter=BYTE_ARRAY))
    assert again_jobs == jobs_of("avro-as-bytes", plain)[1] < first_jobs


def test_schema_texts_and_subjects_are_confluents() -> None:
    """The texts Confluent's AvroData derives for the source's schemas, and their subjects."""
    assert avro_schema_text(OPTIONAL_STRING) == '["null","string"]'
    assert avro_schema_text(BYTES) == '"bytes"'
    record = avro_schema_text(struct_schema(["a", "é"]))
    assert record == ('{"type":"record","name":"ConnectDefault","namespace":"io.confluent.connect.avro","fields":'
                      '[{"name":"message","type":"bytes"},{"name":"a","type":"string"},{"name":"é","type":"string"}]}')
    assert subject_name("io.confluent.kafka.serializers.subject.TopicNameStrategy", "t", True, record) == "t-key"
    assert subject_name(RECORD_NAME_STRATEGY, "t", False, record) == "io.confluent.connect.avro.ConnectDefault"
    assert subject_name("io.confluent.kafka.serializers.subject.TopicRecordNameStrategy", "t", False, record) == \
        "t-io.confluent.connect.avro.ConnectDefault"
    with pytest.raises(SchemaRegistrationError, match="the message value must only be a record schema"):
        subject_name(RECORD_NAME_STRATEGY, "t", False, '"bytes"')
    with pytest.raises(InvalidAvroNameError, match="Illegal character in: x-goog-id"):
        avro_schema_text(struct_schema(["x-goog-id"]))
    bold_a = "\U0001d400"  # a letter outside the BMP: two UTF-16 units, neither a letter to Java
    assert [avro_name_problem(n) for n in ("_ok", "é1", bold_a, "")] == \
        [None, None, f"Illegal initial character: {bold_a}", "Empty name"]
    assert [zigzag_varint(n) for n in (0, 1, 64, 8192)] == [b"\x00", b"\x02", b"\x80\x01", b"\x80\x80\x01"]


#: Pub/Sub's schema revisions by (name, revision): what the messages below name.
ORDER_V1 = '{"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}'
ORDER_V2 = ('{"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}, '
            '{"name": "site", "type": "string", "default": ""}]}')
REVISIONS = {("projects/p/schemas/order", "r1"): ("AVRO", ORDER_V1),
             ("projects/p/schemas/order", "r2"): ("AVRO", ORDER_V2),
             ("projects/p/schemas/proto", "r1"): ("PROTOCOL_BUFFER", "syntax = 'proto3'; message M {}"),
             ("projects/p/schemas/raw", "r1"): ("AVRO", '"bytes"')}


def revision(name: str, revision_id: str) -> tuple[str, str]:
    from pubsub_connect.model.cps_source.settings import MessageSchemaError

    if (name, revision_id) not in REVISIONS:
        raise MessageSchemaError(f"schema {name}@{revision_id} is not in Pub/Sub's schema service")
    return REVISIONS[(name, revision_id)]


def validated(name: str, revision_id: str, encoding: str = "BINARY", **more: str) -> dict[str, str]:
    return {"googclient_schemaname": f"projects/p/schemas/{name}", "googclient_schemarevisionid": revision_id,
            "googclient_schemaencoding": encoding, **more}


DATUM_MESSAGES = [
    {"message_id": "v1", "data_hex": "02", "attributes": validated("order", "r1", user="u1"), "publish_time_ms": 1},
    {"message_id": "v2", "data_hex": "0402" + "6c61", "attributes": validated("order", "r2"), "publish_time_ms": 2},
    {"message_id": "json", "data_hex": "7b7d", "attributes": validated("order", "r1", "JSON"), "publish_time_ms": 3},
    {"message_id": "plain", "data_hex": "6869", "attributes": {"user": "u2"}, "publish_time_ms": 4},
    {"message_id": "proto", "data_hex": "", "attributes": validated("proto", "r1"), "publish_time_ms": 5},
    {"message_id": "gone", "data_hex": "02", "attributes": validated("order", "r9"), "publish_time_ms": 6},
    {"message_id": "raw", "data_hex": "0461", "attributes": validated("raw", "r1"), "publish_time_ms": 7},
]


def test_message_datums_are_written_with_the_schema_revision_they_name(spark: Any) -> None:
    """``messageBodyFormat=avro``: a message Pub/Sub validated is its datum framed with the id of
    its revision's schema, registered under the value's subject; the attributes are headers;
    what cannot be written is a dead letter with the reason, in both paths alike."""
    settings = CpsSourceSettings(kafka_key_attribute="user", kafka_record_headers=True, key_converter=AVRO,
                                 value_converter=AVRO, kafka_topic=TOPIC, message_body_format="avro")
    registry = RecordingRegistry()
    got = collect(KafkaOutboxConversion(settings, schema_ids=registry, message_schemas=revision)
                  .apply(bronze_df(spark, DATUM_MESSAGES)))
    want = sorted(reference_outbox([to_received(r) for r in DATUM_MESSAGES], settings, 0, RecordingRegistry(),
                                   revision), key=lambda r: r.message_id)
    assert got == want
    rows = {r.message_id: r for r in got}
    v1, v2 = registry.ids[(f"{TOPIC}-value", json.dumps(json.loads(ORDER_V1), separators=(",", ":")))], \
        registry.ids[(f"{TOPIC}-value", json.dumps(json.loads(ORDER_V2), separators=(",", ":")))]
    assert rows["v1"].value == b"\x00" + v1.to_bytes(4, "big") + b"\x02"
    assert rows["v2"].value == b"\x00" + v2.to_bytes(4, "big") + bytes.fromhex("04026c61")
    assert decoded(rows["v1"].key, registry) == "u1"
    assert sorted(name for name, _ in rows["v1"].headers) == [
        "googclient_schemaencoding", "googclient_schemaname", "googclient_schemarevisionid"]
    reasons = {r.message_id: (r.error_class, r.error_message) for r in got if r.error_class}
    assert reasons == {
        "json": ("MessageSchemaError", "the message is JSON-encoded under schema projects/p/schemas/order@r1; "
                                       "messageBodyFormat=avro writes Avro's binary encoding (set the topic's schema "
                                       "encoding to BINARY)"),
        "plain": ("MessageSchemaError", "the message has no googclient_schemaname/googclient_schemarevisionid "
                                        "attributes: it was not validated against a topic's schema "
                                        "(messageBodyFormat=avro)"),
        "proto": ("MessageSchemaError", "schema projects/p/schemas/proto@r1 is a PROTOCOL_BUFFER schema; "
                                        "messageBodyFormat=avro writes Avro"),
        "gone": ("MessageSchemaError", "schema projects/p/schemas/order@r9 is not in Pub/Sub's schema service"),
        "raw": ("MessageSchemaError", "schema projects/p/schemas/raw@r1 is a top-level bytes schema: its datums are "
                                      "the message data itself (use messageBodyFormat=connect)"),
    }
