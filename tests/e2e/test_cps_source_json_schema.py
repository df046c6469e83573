"""The Cloud Pub/Sub source with Confluent's JsonSchemaConverter, end to end: messages from
Google's Pub/Sub emulator reach a real Apache Kafka broker in the Schema Registry wire format,
with the schemas Confluent's converter registers (its exact texts) in a real registry (Apicurio
Registry's Confluent API) under the subjects Connect uses, and are read back by Confluent's own
Python JSON Schema deserializer, which validates each value against its schema."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from e2e.harness import run_once, source_config
from integration.kafka_helpers import consume_all, create_topic
from integration.pubsub_helpers import create_topic_and_subscription, publish

pytestmark = pytest.mark.usefixtures("pubsub_emulator_host")

JSON_SCHEMA = "io.confluent.connect.json.JsonSchemaConverter"


@pytest.mark.parametrize("mode", ["staged", "fused"])
def test_messages_reach_kafka_as_json_with_their_schemas_registered(
        spark, kafka_bootstrap: str, schema_registry_url: str, tmp_path: Path, unique_name: str, mode: str) -> None:
    create_topic(kafka_bootstrap, unique_name)
    _, subscription = create_topic_and_subscription(unique_name)
    publish(unique_name, [
        (b"plain", {}, None),
        (b"keyed", {"user": "u1"}, None),
        (b"with-attributes \xff", {"user": "u2", "region": "eu", "tier": "gold"}, None),
        (b"other-attributes", {"kafka.topic": "t \"q\" é 😀"}, None),
    ])
    connector = source_config(unique_name, subscription, unique_name, **{
        "kafka.key.attribute": "user", "errors.tolerance": "none", "pipeline.mode": mode,
        "key.converter": JSON_SCHEMA, "key.converter.schema.registry.url": schema_registry_url,
        "value.converter": JSON_SCHEMA, "value.converter.schema.registry.url": schema_registry_url})
    run_once(spark, kafka_bootstrap, tmp_path, connector)

    registry = SchemaRegistryClient({"url": schema_registry_url})
    read = JSONDeserializer(None, schema_registry_client=registry)  # each value against its writer schema
    got = []
    for r in consume_all(kafka_bootstrap, unique_name):
        key = None if r.key is None else read(r.key, SerializationContext(unique_name, MessageField.KEY))
        got.append((key, read(r.value, SerializationContext(unique_name, MessageField.VALUE))))

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    assert sorted(got, key=str) == sorted([
        (None, b64(b"plain")),
        ("u1", b64(b"keyed")),
        ("u2", {"message": b64(b"with-attributes \xff"), "region": "eu", "tier": "gold"}),
        (None, {"message": b64(b"other-attributes"), "kafka.topic": "t \"q\" é 😀"}),
    ], key=str)

    # the subjects and texts Confluent's converter registers, as this registry keeps them: Apicurio
    # reads a schema without properties as Avro unless its draft is declared, so those two carry
    # "$schema" (Confluent's registry takes them bare, the texts the unit tests assert)
    draft = '{"$schema":"http://json-schema.org/draft-07/schema#",'
    assert registry.get_latest_version(f"{unique_name}-key").schema.schema_str == \
        draft + '"oneOf":[{"type":"null"},{"type":"string"}]}'
    versions = [registry.get_version(f"{unique_name}-value", v).schema
                for v in registry.get_versions(f"{unique_name}-value")]
    assert {v.schema_type for v in versions} == {"JSON"}
    assert sorted(v.schema_str for v in versions) == sorted([
        draft + '"type":"string","connect.type":"bytes"}',
        # Confluent's converter's texts, properties in its HashMap order
        '{"type":"object","properties":{"tier":{"type":"string","connect.index":2},"message":{"type":"string",'
        '"connect.index":0,"connect.type":"bytes"},"region":{"type":"string","connect.index":1}}}',
        '{"type":"object","properties":{"kafka.topic":{"type":"string","connect.index":1},"message":{"type":'
        '"string","connect.index":0,"connect.type":"bytes"}}}'])
