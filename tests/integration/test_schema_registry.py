"""The Schema Registry client against a real registry (Apicurio Registry's Confluent API)."""

from __future__ import annotations

import base64
import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from pubsub_connect.io.schema_registry import (
    RegistrySettings,
    SchemaRegistryClient,
    SchemaRegistryUnreachableError,
    UnknownSchemaError,
    settings_from,
)
from pubsub_connect.io.services.process import free_port
from pubsub_connect.io.services.registry import start_registry

RECORD = json.dumps({"type": "record", "name": "Reading", "namespace": "example",
                     "fields": [{"name": "id", "type": "long"}, {"name": "celsius", "type": "double"}]})
EVOLVED = json.dumps({"type": "record", "name": "Reading", "namespace": "example",
                      "fields": [{"name": "id", "type": "long"}, {"name": "celsius", "type": "double"},
                                 {"name": "site", "type": ["null", "string"], "default": None}]})


def test_register_fetch_and_evolve(schema_registry_url: str) -> None:
    client = SchemaRegistryClient(RegistrySettings((schema_registry_url,)))
    subject = f"readings-{uuid.uuid4().hex}-value"
    first = client.register(subject, RECORD)
    assert client.register(subject, RECORD) == first  # registering again: the same id
    # ids are the schema's, not the subject's: Confluent's semantics, which the wire format relies on
    assert client.register(f"other-{uuid.uuid4().hex}-value", RECORD) == first
    second = client.register(subject, EVOLVED)
    assert second != first
    assert json.loads(SchemaRegistryClient(RegistrySettings((schema_registry_url,))).schema(first).text) == \
        json.loads(RECORD)
    latest = client.latest(subject)
    assert (latest.schema_id, latest.subject, latest.version, latest.schema_type) == (second, subject, 2, "AVRO")
    assert client.lookup(subject, RECORD) == first


def test_unknown_id_and_subject_are_the_records_fault(schema_registry_url: str) -> None:
    client = SchemaRegistryClient(RegistrySettings((schema_registry_url,)))
    with pytest.raises(UnknownSchemaError) as err:
        client.schema(987_654_321)
    assert (err.value.status, err.value.code) == (404, 40403)
    assert str(err.value).startswith("Schema Registry GET /schemas/ids/987654321: ") and "\n" not in str(err.value)
    with pytest.raises(UnknownSchemaError):
        client.latest(f"never-{uuid.uuid4().hex}-value")


def test_schemas_by_id_outlive_the_registry_and_a_dead_url_is_passed_over(tmp_path: Path) -> None:
    """A second URL is tried when the first cannot be reached; once the registry is gone an id seen
    before still resolves (cached), a new one is a transient error naming every URL."""
    dead = f"http://127.0.0.1:{free_port()}/apis/ccompat/v7"
    registry = start_registry(tmp_path / "registry")
    try:
        client = SchemaRegistryClient(RegistrySettings((dead, registry.endpoint)))
        schema_id = client.register("cached-value", RECORD)
        client.schema(schema_id)
    finally:
        registry.stop()
    assert json.loads(client.schema(schema_id).text) == json.loads(RECORD)
    with pytest.raises(SchemaRegistryUnreachableError) as err:
        client.schema(schema_id + 1)
    assert str(err.value).startswith("Schema Registry unreachable (") and dead in str(err.value)
    assert registry.endpoint in str(err.value)


class _Recorder(BaseHTTPRequestHandler):
    """Answers every request with schema 1 and remembers its Authorization header (a registry
    with basic authentication is what this checks the client against, not a registry's logic)."""

    seen: list[str | None] = []

    def do_GET(self) -> None:
        type(self).seen.append(self.headers.get("Authorization"))
        body = json.dumps({"schema": RECORD}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Recorder)
    _Recorder.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_basic_authentication_as_connect_users_configure_it(recorder: str) -> None:
    user_info = settings_from({"schema.registry.url": recorder, "basic.auth.credentials.source": "USER_INFO",
                               "basic.auth.user.info": "fred:s3cret"})
    SchemaRegistryClient(user_info).schema(1)
    host = recorder.removeprefix("http://")
    in_url = settings_from({"schema.registry.url": f"http://ann:pw@{host}"})
    SchemaRegistryClient(in_url).schema(1)
    assert _Recorder.seen == ["Basic " + base64.b64encode(b"fred:s3cret").decode(),
                              "Basic " + base64.b64encode(b"ann:pw").decode()]


@pytest.mark.parametrize(("keys", "message"), [
    ({}, "schema.registry.url is required"),
    ({"schema.registry.url": "http://x", "basic.auth.credentials.source": "USER_INFO"}, "basic.auth.user.info="),
    ({"schema.registry.url": "http://x", "basic.auth.credentials.source": "SASL_INHERIT"}, "is not supported"),
])
def test_settings_errors_are_one_line(keys: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        settings_from(keys)


def test_a_sources_ids_follow_each_sides_registration_keys(schema_registry_url: str) -> None:
    """``written_schema_ids`` as Confluent's serializer gets ids: registered by default; looked up
    with ``auto.register.schemas=false`` (a schema the subject lacks fails its records); the
    latest version with ``use.latest.version=true`` (which must be the record's schema here)."""
    from pubsub_connect.config import loader as cfg
    from pubsub_connect.model.avro.writer import SchemaRegistrationError
    from pubsub_connect.pipelines.writer_schemas import written_schema_ids

    def ids(**keys: str):
        config = cfg.validate_connector({
            "name": "s", "connector.class": "CloudPubSubSourceConnector", "kafka.topic": "t", "cps.project": "p",
            "cps.subscription": "s", "value.converter": "io.confluent.connect.avro.AvroConverter",
            "value.converter.schema.registry.url": schema_registry_url,
            **{f"value.converter.{k.replace('_', '.')}": v for k, v in keys.items()}}, "s.properties")
        found = written_schema_ids(config)
        assert found is not None
        return found

    subject = f"orders-{uuid.uuid4().hex}-value"
    client = SchemaRegistryClient(RegistrySettings((schema_registry_url,)))
    with pytest.raises(SchemaRegistrationError) as missing:
        ids(auto_register_schemas="false")("value", subject, RECORD)
    assert str(missing.value).startswith(f"Schema Registry POST /subjects/{subject}: ") and "HTTP 404" in \
        str(missing.value)
    registered = ids()("value", subject, RECORD)
    assert client.latest(subject).schema_id == registered
    assert ids(auto_register_schemas="false")("value", subject, RECORD) == registered
    client.register(subject, EVOLVED)
    latest = ids(auto_register_schemas="false", use_latest_version="true")
    assert latest("value", subject, EVOLVED) == client.latest(subject).schema_id
    with pytest.raises(SchemaRegistrationError) as other:
        latest("value", subject, RECORD)
    assert str(other.value) == (f"use.latest.version: the latest version of subject {subject} (id "
                                f"{client.latest(subject).schema_id}) is not this record's schema {RECORD}")


def test_the_lite_sources_schemas_are_registered_when_it_starts(schema_registry_url: str) -> None:
    """The Lite source's Avro keys (``["null","bytes"]``) and values (``"bytes"``) have one schema
    each: registered under the topic's subjects when the stage starts, their frames shipped to the
    tasks; what it writes reads back with Confluent's own deserializer. A subject strategy that
    takes records only stops the connector in one line."""
    from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from pubsub_connect.config import loader as cfg
    from pubsub_connect.model.lite.source import LiteReceived, source_record
    from pubsub_connect.pipelines.context import ConnectorError
    from pubsub_connect.pipelines.lite_source import source_converters

    topic = f"lite-{uuid.uuid4().hex}"
    avro = "io.confluent.connect.avro.AvroConverter"

    def config(**extra: str) -> cfg.ConnectorConfig:
        return cfg.validate_connector({
            "name": "lite-avro", "connector.class": "com.google.pubsublite.kafka.source.PubSubLiteSourceConnector",
            "pubsublite.project": "p", "pubsublite.location": "europe-west1-b", "pubsublite.subscription": "s",
            "kafka.topic": topic, "key.converter": avro, "value.converter": avro,
            "key.converter.schema.registry.url": schema_registry_url,
            "value.converter.schema.registry.url": schema_registry_url, **extra}, "lite-avro.properties")

    converters = source_converters(config())
    record = source_record(LiteReceived(partition=0, offset=1, publish_time_ns=0, key=b"k1", data=b"\x00payload"),
                           topic, converters)
    client = SchemaRegistryClient(RegistrySettings((schema_registry_url,)))
    assert client.latest(f"{topic}-key").text == '["null","bytes"]'
    assert client.latest(f"{topic}-value").text == '"bytes"'
    assert record.value[5:] == b"\x00payload"  # a top-level bytes value: written as it is, as Confluent does
    key = AvroDeserializer(ConfluentClient({"url": schema_registry_url}))(
        record.key, SerializationContext(topic, MessageField.KEY))
    assert key == b"k1"
    with pytest.raises(ConnectorError) as refused:
        source_converters(config(**{"key.converter.key.subject.name.strategy":
                                    "io.confluent.kafka.serializers.subject.RecordNameStrategy"}))
    assert str(refused.value) == ("lite-avro: key.converter: In configuration key.subject.name.strategy = "
                                  "io.confluent.kafka.serializers.subject.RecordNameStrategy, the message key must "
                                  "only be a record schema")
