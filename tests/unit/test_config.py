"""Connector configuration: .properties parsing, typed keys, defaults, errors, secrets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pubsub_connect.cli import main
from pubsub_connect.config import loader as cfg
from pubsub_connect.config.errors import MASK, ConfigError
from pubsub_connect.config.properties import parse_properties, read_properties

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "config"
SEED_EXAMPLES = ["cps-sink", "cps-source", "lite-sink", "lite-source"]


def test_properties_syntax_follows_java() -> None:
    text = (
        "# comment\n! also a comment\n"
        "a=1\n"
        "b : two words  \n"
        "c three\n"
        "d=line \\\n    continued\n"
        "e=tab\\tnew\\nline \\u0041\n"
        "f\\=g=escaped key\n"
        "empty=\n"
        "a=overridden\n"
    )
    assert parse_properties(text) == {
        "a": "overridden",
        "b": "two words  ",
        "c": "three",
        "d": "line continued",
        "e": "tab\tnew\nline A",
        "f=g": "escaped key",
        "empty": "",
    }


@pytest.mark.parametrize("example", SEED_EXAMPLES)
def test_seed_examples_validate(example: str) -> None:
    run = cfg.load([FIXTURES / f"{example}.properties"], FIXTURES / "worker.properties")
    (connector,) = run.connectors
    assert connector.kind == example.replace("-", "_")
    assert connector.get("tasks.max") == 10


def test_cps_sink_defaults_match_google_connector() -> None:
    (c,) = cfg.load([FIXTURES / "cps-sink.properties"]).connectors
    assert c.get("cps.endpoint") == "pubsub.googleapis.com:443"
    assert c.get("maxBufferSize") == 100
    assert c.get("maxBufferBytes") == 9_500_000
    assert c.get("maxOutstandingMessages") == 2**63 - 1
    assert c.get("maxOutstandingRequestBytes") == 2**63 - 1
    assert c.get("delayThresholdMs") == 100
    assert c.get("maxRequestTimeoutMs") == 10_000
    assert c.get("maxTotalTimeoutMs") == 60_000
    assert c.get("maxShutdownTimeoutMs") == 60_000
    assert c.get("metadata.publish") is False
    assert c.get("headers.publish") is False
    assert c.get("orderingKeySource") == "none"
    assert c.get("messageBodyName") == "cps_message_body"
    assert c.get("errors.tolerance") == "none"
    assert c.get("topics") == ["my-kafka-topic"]
    assert c.get("key.converter") == "org.apache.kafka.connect.storage.StringConverter"
    assert c.get("value.converter.schemas.enable") is True


def test_cps_source_and_lite_defaults() -> None:
    (src,) = cfg.load([FIXTURES / "cps-source.properties"]).connectors
    assert (
        src.get("cps.maxBatchSize"),
        src.get("kafka.partition.count"),
        src.get("kafka.partition.scheme"),
    ) == (100, 1, "round_robin")
    assert src.get("cps.streamingPull.flowControlBytes") == 100 * 1024 * 1024
    assert src.get("cps.streamingPull.flowControlMessages") == 1000
    (lite,) = cfg.load([FIXTURES / "lite-source.properties"]).connectors
    assert lite.get("pubsublite.partition_flow_control.bytes") == 20_000_000
    assert lite.get("pubsublite.partition_flow_control.messages") == 2**63 - 1
    (lite_sink,) = cfg.load(
        [FIXTURES / "lite-sink.properties"], overrides=["pubsublite.ordering.mode=kafka"]
    ).connectors
    assert lite_sink.get("pubsublite.ordering.mode") == "KAFKA"


def test_alias_max_delay_threshold() -> None:
    raw = read_properties(FIXTURES / "cps-sink.properties") | {"maxDelayThresholdMs": "250"}
    connector = cfg.validate_connector(raw, "x.properties")
    assert connector.get("delayThresholdMs") == 250


def test_short_alias_and_overrides_targeting_one_connector(tmp_path: Path) -> None:
    other = tmp_path / "other.properties"
    other.write_text("name=other\nconnector.class=cps-sink\ntopics=a\ncps.topic=t\ncps.project=p\n")
    run = cfg.load(
        [FIXTURES / "cps-sink.properties", other],
        overrides=["other:maxBufferSize=7", "metadata.publish=true", "bootstrap.servers=h:1"],
    )
    first, second = run.connectors
    assert (first.get("maxBufferSize"), second.get("maxBufferSize")) == (100, 7)
    assert first.get("metadata.publish") is True and second.get("metadata.publish") is True
    assert second.settings["maxBufferSize"].origin == "--set"
    assert run.worker.bootstrap_servers == "h:1"


def test_worker_converters_are_connector_defaults(tmp_path: Path) -> None:
    worker = tmp_path / "w.properties"
    worker.write_text(
        "value.converter=org.apache.kafka.connect.json.JsonConverter\n"
        "value.converter.schemas.enable=false\nspark.sql.shuffle.partitions=3\n"
        "consumer.fetch.max.bytes=1000\n"
    )
    connector = tmp_path / "c.properties"
    connector.write_text(
        "name=c\nconnector.class=cps-sink\ntopics=a\ncps.topic=t\ncps.project=p\n"
        "key.converter=org.apache.kafka.connect.storage.StringConverter\n"
    )
    run = cfg.load([connector], worker)
    (c,) = run.connectors
    assert c.get("value.converter") == "org.apache.kafka.connect.json.JsonConverter"
    assert c.settings["value.converter"].origin == "worker"
    assert c.get("value.converter.schemas.enable") is False
    # the connector's own setting wins over the worker default
    assert c.get("key.converter") == "org.apache.kafka.connect.storage.StringConverter"
    assert run.worker.spark_conf == {"spark.sql.shuffle.partitions": "3"}
    assert run.worker.client_conf("consumer.") == {"fetch.max.bytes": "1000"}


@pytest.mark.parametrize(
    ("file", "message"),
    [
        ("missing-topic", "missing-topic.properties: missing required key cps.topic"),
        ("bad-buffer", "maxBufferBytes='20000000' is above the maximum 9500000 (allowed: [1..9500000])"),
        ("bad-boolean", "metadata.publish='yes' is not a boolean (allowed: true, false)"),
        ("unknown-class", "connector.class='com.example.FancySinkConnector' is not supported"),
    ],
)
def test_bad_files_give_one_clear_error(file: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        cfg.load([FIXTURES / "bad" / f"{file}.properties"])
    assert message in str(err.value)
    assert str(FIXTURES / "bad" / f"{file}.properties") in str(err.value)
    assert "\n" not in str(err.value)


def test_sink_needs_exactly_one_of_topics_and_regex() -> None:
    raw = read_properties(FIXTURES / "cps-sink.properties") | {"topics.regex": "my-.*"}
    with pytest.raises(ConfigError, match=r"set exactly one of topics or topics.regex"):
        cfg.validate_connector(raw, "s.properties")
    raw.pop("topics")
    assert cfg.validate_connector(raw, "s.properties").get("topics.regex") == "my-.*"


def test_enum_and_range_errors() -> None:
    raw = read_properties(FIXTURES / "cps-sink.properties") | {"orderingKeySource": "value"}
    with pytest.raises(
        ConfigError,
        match=r"orderingKeySource='value' is not allowed \(allowed: none, key, "
        r"partition\)",
    ):
        cfg.validate_connector(raw, "s.properties")
    raw = read_properties(FIXTURES / "cps-sink.properties") | {"tasks.max": "0"}
    with pytest.raises(ConfigError, match=r"tasks\.max='0' is below the minimum 1"):
        cfg.validate_connector(raw, "s.properties")
    raw = read_properties(FIXTURES / "cps-sink.properties") | {"maxBufferSize": "ten"}
    with pytest.raises(ConfigError, match="maxBufferSize='ten' is not an integer"):
        cfg.validate_connector(raw, "s.properties")


def test_unknown_key_warns(caplog: pytest.LogCaptureFixture) -> None:
    raw = read_properties(FIXTURES / "cps-sink.properties") | {"cps.topicc": "typo"}
    cfg.validate_connector(raw, "s.properties")
    assert "s.properties: unknown key cps.topicc (ignored)" in caplog.text


SECRET = '{"type": "service_account", "private_key": "-----BEGIN SECRET-----"}'


def test_secrets_are_masked_and_resolved_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GCP_JSON", SECRET)
    path = tmp_path / "s.properties"
    path.write_text(
        (FIXTURES / "cps-sink.properties").read_text() + "gcp.credentials.json=${env:GCP_JSON}\n"
        "producer.override.sasl.jaas.config=hunter2\n"
    )
    (c,) = cfg.load([path]).connectors
    assert c.get("gcp.credentials.json") == SECRET
    shown = c.effective()
    assert shown["gcp.credentials.json"] == MASK
    assert shown["producer.override.sasl.jaas.config"] == MASK
    assert SECRET not in repr(shown) and "hunter2" not in repr(shown)


def test_secret_value_never_in_error_message(tmp_path: Path) -> None:
    path = tmp_path / "s.properties"
    path.write_text(
        "name=x\nconnector.class=cps-sink\ntopics=a\ncps.topic=t\ncps.project=p\n"
        "gcp.sa.credentials.json=topsecret\nmaxBufferSize=-1\n"
    )
    with pytest.raises(ConfigError) as err:
        cfg.load([path])
    assert "topsecret" not in str(err.value)


def test_cli_validate_prints_effective_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "s.properties"
    path.write_text((FIXTURES / "cps-sink.properties").read_text() + "gcp.credentials.json=very-secret\n")
    assert main(["validate", str(path), "--worker", str(FIXTURES / "worker.properties")]) == 0
    out = capsys.readouterr().out
    assert "cps.topic=my-cps-topic" in out
    assert "maxBufferBytes=9500000" in out
    assert "gcp.credentials.json=********" in out
    assert "very-secret" not in out
    assert "storage.root=./.pubsub-connect" in out


def test_cli_validate_bad_file_exits_nonzero_with_one_line() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pubsub_connect.cli",
            "validate",
            str(FIXTURES / "bad" / "bad-buffer.properties"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert (
        lines[0].startswith("error: ") and "maxBufferBytes" in lines[0] and "Traceback" not in result.stderr
    )


AVRO_SINK = {"name": "avro", "connector.class": "CloudPubSubSinkConnector", "topics": "t", "cps.project": "p",
             "cps.topic": "t", "value.converter": "io.confluent.connect.avro.AvroConverter"}


def test_the_schema_registry_converter_keys_as_connect_users_write_them(capsys: pytest.CaptureFixture[str],
                                                                        tmp_path: Path) -> None:
    raw = AVRO_SINK | {"value.converter.schema.registry.url": "http://r1:8081,http://r2:8081",
                       "value.converter.basic.auth.credentials.source": "USER_INFO",
                       "value.converter.basic.auth.user.info": "fred:s3cret-pw"}
    config = cfg.validate_connector(raw, "avro.properties")
    assert config.get("value.converter.basic.auth.user.info") == "fred:s3cret-pw"
    assert config.effective()["value.converter.basic.auth.user.info"] == MASK
    assert config.get("value.converter.value.subject.name.strategy") == \
        "io.confluent.kafka.serializers.subject.TopicNameStrategy"
    path = tmp_path / "avro.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in raw.items()))
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "value.converter=io.confluent.connect.avro.AvroConverter" in out and "s3cret-pw" not in out


@pytest.mark.parametrize(("extra", "message"), [
    ({}, "avro.properties: value.converter=AvroConverter needs value.converter.schema.registry.url"),
    ({"value.converter.schema.registry.url": "http://r", "value.converter.basic.auth.credentials.source": "USER_INFO"},
     "needs value.converter.basic.auth.user.info=<user>:<password>"),
    ({"value.converter.schema.registry.url": "http://r", "connector.class": "PubSubLiteSinkConnector",
      "pubsublite.project": "p", "pubsublite.location": "l", "pubsublite.topic": "t"},
     "value.converter=AvroConverter is not supported by PubSubLiteSinkConnector"),
    # one column mapping serves both sides: JSON beside a registry converter would need the reference
    ({"value.converter.schema.registry.url": "http://r",
      "key.converter": "org.apache.kafka.connect.json.JsonConverter"},
     "key.converter=org.apache.kafka.connect.json.JsonConverter cannot be combined with a Schema Registry converter "
     "(allowed beside it: ByteArrayConverter, StringConverter, AvroConverter, JsonSchemaConverter)"),
    ({"value.converter": "org.apache.kafka.connect.json.JsonConverter",
      "key.converter": "io.confluent.connect.avro.AvroConverter", "key.converter.schema.registry.url": "http://r"},
     "value.converter=org.apache.kafka.connect.json.JsonConverter cannot be combined with a Schema Registry"),
    ({"value.converter": "org.apache.kafka.connect.storage.StringConverter", "messageBodyFormat": "json"},
     "avro.properties: messageBodyFormat=json publishes each whole value: it needs "
     "value.converter=io.confluent.connect.avro.AvroConverter or io.confluent.connect.json.JsonSchemaConverter; to "
     "publish other values as they are, use value.converter=ByteArrayConverter"),
    ({"value.converter": "io.confluent.connect.json.JsonSchemaConverter", "messageBodyFormat": "avro"},
     "avro.properties: messageBodyFormat=avro publishes each whole Avro value: it needs "
     "value.converter=io.confluent.connect.avro.AvroConverter (or Apicurio's)"),
    ({"value.converter.schema.registry.url": "http://r",
      "value.converter.value.subject.name.strategy": "com.example.MyStrategy"},
     "value.converter.value.subject.name.strategy=com.example.MyStrategy is not one of TopicNameStrategy, "
     "RecordNameStrategy, TopicRecordNameStrategy"),
    ({"value.converter.schema.registry.url": "http://r1", "key.converter": "io.confluent.connect.avro.AvroConverter",
      "key.converter.schema.registry.url": "http://r2"},
     "key.converter and value.converter name different Schema Registries; one connector's schema ids come from one "
     "registry"),
])
def test_schema_registry_converter_errors_are_one_line(extra: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        cfg.validate_connector(AVRO_SINK | extra, "avro.properties")
    assert "\n" not in str(err.value)


def test_the_source_takes_registry_converters_beside_any_it_writes_with() -> None:
    """A source writes its keys and values itself: a JSON key beside an Avro value is fine."""
    config = cfg.validate_connector({
        "name": "avro-source", "connector.class": "CloudPubSubSourceConnector", "kafka.topic": "orders",
        "cps.project": "p", "cps.subscription": "s", "value.converter": "io.confluent.connect.avro.AvroConverter",
        "value.converter.schema.registry.url": "http://r", "value.converter.auto.register.schemas": "false",
        "key.converter": "org.apache.kafka.connect.json.JsonConverter"}, "avro-source.properties")
    assert config.get("value.converter.auto.register.schemas") is False
    assert config.get("value.converter.use.latest.version") is False


def test_json_schema_serves_the_cloud_pubsub_connectors() -> None:
    config = cfg.validate_connector(AVRO_SINK | {"value.converter": "io.confluent.connect.json.JsonSchemaConverter",
                                                 "value.converter.schema.registry.url": "http://r",
                                                 "messageBodyFormat": "json"}, "json.properties")
    assert config.get("value.converter") == "io.confluent.connect.json.JsonSchemaConverter"
    source = {"name": "json-source", "connector.class": "CloudPubSubSourceConnector", "kafka.topic": "orders",
              "cps.project": "p", "cps.subscription": "s",
              "value.converter": "io.confluent.connect.json.JsonSchemaConverter",
              "value.converter.schema.registry.url": "http://r"}
    assert cfg.validate_connector(source, "json-source.properties").kind == "cps_source"
    with pytest.raises(ConfigError) as refused:
        cfg.validate_connector(source | {"value.converter.value.subject.name.strategy":
                                         "io.confluent.kafka.serializers.subject.RecordNameStrategy"},
                               "json-source.properties")
    assert str(refused.value) == (
        "json-source.properties: value.converter.value.subject.name.strategy=RecordNameStrategy names subjects by a "
        "schema's title; the JSON Schemas the Cloud Pub/Sub source writes have none (use TopicNameStrategy)")
    lite = {"name": "json-lite", "connector.class": "PubSubLiteSourceConnector", "kafka.topic": "orders",
            "pubsublite.project": "p", "pubsublite.location": "us-central1-a", "pubsublite.subscription": "s",
            "value.converter": "io.confluent.connect.json.JsonSchemaConverter",
            "value.converter.schema.registry.url": "http://r"}
    with pytest.raises(ConfigError, match=r"value\.converter=JsonSchemaConverter serves the Cloud Pub/Sub sink and "
                                          r"source; the Lite source writes Schema Registry data as Avro"):
        cfg.validate_connector(lite, "json-lite.properties")


def test_protobuf_is_refused_with_why() -> None:
    with pytest.raises(ConfigError) as refused:
        cfg.validate_connector(AVRO_SINK | {"value.converter": "io.confluent.connect.protobuf.ProtobufConverter"},
                               "proto.properties")
    assert str(refused.value) == (
        "proto.properties: value.converter='io.confluent.connect.protobuf.ProtobufConverter' is not supported: the "
        "Schema Registry holds Protocol Buffers schemas as .proto text, which Spark decodes only with compiled "
        "descriptors; use ByteArrayConverter to move the bytes as they are")


def test_apicurios_converter_is_the_same_thing() -> None:
    from pubsub_connect.pipelines.writer_schemas import registry_settings

    config = cfg.validate_connector(AVRO_SINK | {
        "value.converter": "io.apicurio.registry.utils.converter.AvroConverter",
        "value.converter.apicurio.registry.url": "http://127.0.0.1:8080/apis/registry/v2"}, "a.properties")
    assert registry_settings(config, "value").urls == ("http://127.0.0.1:8080/apis/ccompat/v7",)


@pytest.mark.parametrize(("example", "kind", "converter"), [
    ("cps-sink-avro", "cps_sink", "io.confluent.connect.avro.AvroConverter"),
    ("cps-source-avro", "cps_source", "io.confluent.connect.avro.AvroConverter"),
    ("cps-sink-json-schema", "cps_sink", "io.confluent.connect.json.JsonSchemaConverter"),
    ("cps-source-json-schema", "cps_source", "io.confluent.connect.json.JsonSchemaConverter")])
def test_the_schema_registry_examples_validate(example: str, kind: str, converter: str) -> None:
    (connector,) = cfg.load([FIXTURES / f"{example}.properties"], FIXTURES / "worker.properties").connectors
    assert (connector.kind, connector.get("value.converter"), connector.get("value.converter.schema.registry.url")) \
        == (kind, converter, "http://127.0.0.1:8081/apis/ccompat/v7")
