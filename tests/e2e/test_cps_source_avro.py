"""The Cloud Pub/Sub source with Confluent's AvroConverter, end to end: messages from Google's
Pub/Sub emulator reach a real Apache Kafka broker in the Schema Registry wire format, with their
schemas registered in a real registry (Apicurio Registry's Confluent API) under the subjects
Connect uses, and read back by Confluent's own Python deserializer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from e2e.harness import context, run_once, source_config
from e2e.registry_outage import Outage, run_through_outage
from integration.kafka_helpers import consume_all, create_topic
from integration.pubsub_helpers import (
    create_avro_schema_topic,
    create_subscription,
    create_topic_and_subscription,
    publish,
)
from pubsub_connect.io.tables import TableRef

pytestmark = pytest.mark.usefixtures("pubsub_emulator_host")

AVRO = "io.confluent.connect.avro.AvroConverter"
RECORD = ('{"type":"record","name":"ConnectDefault","namespace":"io.confluent.connect.avro","fields":['
          '{"name":"message","type":"bytes"}%s]}')


def record_schema(*names: str) -> str:
    return RECORD % "".join(f',{{"name":"{n}","type":"string"}}' for n in names)


@pytest.mark.parametrize("mode", ["staged", "fused"])
def test_messages_reach_kafka_in_the_wire_format_with_their_schemas_registered(
        spark, kafka_bootstrap: str, schema_registry_url: str, tmp_path: Path, unique_name: str, mode: str) -> None:
    create_topic(kafka_bootstrap, unique_name)
    _, subscription = create_topic_and_subscription(unique_name)
    ids = publish(unique_name, [
        (b"plain", {}, None),
        (b"keyed", {"user": "u1"}, None),
        (b"with-attributes", {"user": "u2", "region": "eu", "tier": "gold"}, None),
        (b"other-attributes", {"region": "us"}, None),
        (b"bad-name", {"kafka.topic": "t"}, None),
    ])
    connector = source_config(unique_name, subscription, unique_name, **{
        "kafka.key.attribute": "user", "errors.tolerance": "all", "pipeline.mode": mode,
        "key.converter": AVRO, "key.converter.schema.registry.url": schema_registry_url,
        "value.converter": AVRO, "value.converter.schema.registry.url": schema_registry_url})
    ctx = run_once(spark, kafka_bootstrap, tmp_path, connector)

    registry = SchemaRegistryClient({"url": schema_registry_url})
    value_reader = AvroDeserializer(registry)
    got = []
    for r in consume_all(kafka_bootstrap, unique_name):
        writer = registry.get_schema(int.from_bytes(r.value[1:5], "big")).schema_str
        # Confluent's Java serializer writes a top-level "bytes" datum without its length (and its
        # readers expect that; the Python client's does not): read those here.
        value = r.value[5:] if json.loads(writer) == "bytes" else \
            value_reader(r.value, SerializationContext(unique_name, MessageField.VALUE))
        key = None if r.key is None else AvroDeserializer(registry)(r.key, SerializationContext(
            unique_name, MessageField.KEY))
        got.append((key, value))
    assert sorted(got, key=str) == sorted([
        (None, b"plain"),
        ("u1", b"keyed"),
        ("u2", {"message": b"with-attributes", "region": "eu", "tier": "gold"}),
        (None, {"message": b"other-attributes", "region": "us"}),
    ], key=str)

    # the subjects and versions Connect's converter registers, in the registry's own words
    assert registry.get_latest_version(f"{unique_name}-key").schema.schema_str == '["null","string"]'
    versions = [registry.get_version(f"{unique_name}-value", v).schema.schema_str
                for v in registry.get_versions(f"{unique_name}-value")]
    assert sorted(versions) == sorted(['"bytes"', record_schema("region"), record_schema("region", "tier")])

    dead = ctx.store.read(TableRef("dlq", unique_name)).select("message_id", "value", "error_class",
                                                               "error_message").collect()
    assert [tuple(r) for r in dead] == [(ids[4], b"bad-name", "SchemaParseException",
                                         "Illegal character in: kafka.topic")]


def test_a_schema_the_registry_refuses_dead_letters_its_messages(
        spark, kafka_bootstrap: str, schema_registry_url: str, tmp_path: Path, unique_name: str) -> None:
    """Under BACKWARD compatibility a record with a new attribute (a field without a default) is
    an incompatible version: Connect's converter fails those records, and here they are dead
    letters with the registry's line while the others are written."""
    registry = SchemaRegistryClient({"url": schema_registry_url})
    subject = f"{unique_name}-value"
    first = registry.register_schema(subject, Schema(record_schema("region"), "AVRO"))
    registry.set_compatibility(subject, "BACKWARD")
    create_topic(kafka_bootstrap, unique_name)
    _, subscription = create_topic_and_subscription(unique_name)
    ids = publish(unique_name, [(b"known", {"region": "eu"}, None), (b"new-field", {"region": "eu", "x": "1"}, None)])
    connector = source_config(unique_name, subscription, unique_name, **{
        "errors.tolerance": "all", "value.converter": AVRO, "value.converter.schema.registry.url": schema_registry_url})
    ctx = run_once(spark, kafka_bootstrap, tmp_path, connector)

    (written,) = consume_all(kafka_bootstrap, unique_name)
    assert written.value[:5] == b"\x00" + first.to_bytes(4, "big")
    (dead,) = ctx.store.read(TableRef("dlq", unique_name)).collect()
    assert (dead.message_id, dead.value, dead.error_class) == (ids[1], b"new-field", "SerializationException")
    assert dead.error_message.startswith(f"Schema Registry POST /subjects/{subject}/versions: ") and \
        "HTTP 409" in dead.error_message, dead.error_message


@pytest.mark.parametrize(("mode", "stage"), [("staged", "convert"), ("fused", "fused")])
def test_a_registry_that_goes_away_restarts_the_stage_and_loses_nothing(
        spark, kafka_bootstrap: str, registry_service, tmp_path: Path, unique_name: str, mode: str,
        stage: str) -> None:
    """The registry unreachable when the first messages are to be written: the stage that writes
    them restarts (one line per restart, like an unreachable broker) until the registry answers;
    then every message is in Kafka, framed, and none is dead-lettered."""
    create_topic(kafka_bootstrap, unique_name)
    _, subscription = create_topic_and_subscription(unique_name)
    publish(unique_name, [(f"m{n}".encode(), {"n": str(n)}, None) for n in range(10)])
    outage = Outage(registry_service.port)
    url = f"http://127.0.0.1:{outage.port}/apis/ccompat/v7"
    connector = source_config(unique_name, subscription, unique_name, **{
        "pipeline.mode": mode, "value.converter": AVRO, "value.converter.schema.registry.url": url})
    restart = run_through_outage(spark, kafka_bootstrap, tmp_path, connector, outage, stage)
    assert restart.endswith(f"Schema Registry unreachable ({url}: [Errno 111] Connection refused); restarting from "
                            "the checkpoint in 1 s (restart 1)"), restart
    reader = AvroDeserializer(SchemaRegistryClient({"url": registry_service.endpoint}))
    values = [reader(r.value, SerializationContext(unique_name, MessageField.VALUE))
              for r in consume_all(kafka_bootstrap, unique_name)]
    assert sorted(values, key=str) == sorted(({"message": f"m{n}".encode(), "n": str(n)} for n in range(10)), key=str)
    assert context(spark, kafka_bootstrap, tmp_path).store.count(TableRef("dlq", unique_name)) == 0


READING = json.dumps({"type": "record", "name": "Reading", "namespace": "lab", "fields": [
    {"name": "sensor", "type": "string"}, {"name": "celsius", "type": "double"},
    {"name": "note", "type": ["null", "string"], "default": None}]})


@pytest.mark.parametrize("mode", ["staged", "fused"])
def test_a_topic_with_an_avro_schema_reaches_kafka_as_its_datums(
        spark, kafka_bootstrap: str, schema_registry_url: str, tmp_path: Path, unique_name: str, mode: str) -> None:
    """``messageBodyFormat=avro``: the messages of a topic with an Avro schema (binary encoding)
    reach Kafka as those datums, framed with the id of their schema (registered under the
    topic's value subject), so Connect's AvroConverter readers get the records; the attributes,
    Pub/Sub's schema ones included, are headers."""
    import io

    import fastavro

    create_topic(kafka_bootstrap, unique_name)
    _, revision = create_avro_schema_topic(unique_name, READING)
    subscription = create_subscription(unique_name, f"{unique_name}-sub").rsplit("/", 1)[1]
    parsed = fastavro.parse_schema(json.loads(READING))
    readings = [{"sensor": f"s{n}", "celsius": 20.5 + n, "note": None if n % 2 else f"n{n}"} for n in range(6)]

    def datum(reading: dict) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, reading)
        return out.getvalue()

    publish(unique_name, [(datum(r), {"site": "lab-1"}, None) for r in readings])
    connector = source_config(unique_name, subscription, unique_name, **{
        "pipeline.mode": mode, "messageBodyFormat": "avro", "kafka.record.headers": "true",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": AVRO, "value.converter.schema.registry.url": schema_registry_url})
    run_once(spark, kafka_bootstrap, tmp_path, connector)

    registry = SchemaRegistryClient({"url": schema_registry_url})
    reader = AvroDeserializer(registry)
    records = consume_all(kafka_bootstrap, unique_name)
    got = sorted((reader(r.value, SerializationContext(unique_name, MessageField.VALUE)) for r in records),
                 key=lambda v: v["sensor"])
    assert got == readings
    assert json.loads(registry.get_latest_version(f"{unique_name}-value").schema.schema_str) == json.loads(READING)
    assert {tuple(sorted(r.headers)) for r in records} == {(
        ("googclient_schemaencoding", b"BINARY"), ("googclient_schemaname", f"projects/test-project/schemas/"
                                                                            f"{unique_name}".encode()),
        ("googclient_schemarevisionid", revision.encode()), ("site", b"lab-1"))}
