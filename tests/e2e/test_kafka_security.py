"""Kafka with SASL_SSL (SCRAM-SHA-512 over TLS, a CA made by the tests), and Kafka that is not
there, through ``pubsub-connect run`` as users run it.

The worker file carries the keys a Connect user already has (``consumer.``/``producer.``
``security.protocol``, ``sasl.mechanism``, ``sasl.jaas.config``, ``ssl.truststore.*``); the Pub/Sub
sink, the Pub/Sub source (its transactional producer included) and the archive all run with it,
on the native engine and on the fallback. A wrong password stops the connector with one line; a
broker that is not there gets one line per restart, naming the address. The password never
appears in the output, the tables, the checkpoints or the archive.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from archive_checks import KEEP, T0, archived_records, produce_at, topic_records
from conftest import SecureKafka
from e2e.harness import ENGINES
from integration.kafka_helpers import consume_all, create_topic
from integration.pubsub_helpers import assert_no_more_messages, create_topic_and_subscription, publish, pull_all
from pubsub_connect.io.objectstore.local import LocalStore
from pubsub_connect.io.services.process import free_port

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("pubsub_emulator_host")]

ENGINE_LINES = {"native": "local: native kafka, native delta", "fallback": "local: python kafka source, delta-rs"}


def write_properties(path: Path, settings: dict[str, str]) -> Path:
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    return path


def cli(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pubsub_connect.cli", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def secure_worker(tmp_path: Path, secure: SecureKafka, password: str | None = None, **extra: str) -> Path:
    """A worker file whose consumers and producers log in over SASL_SSL (Connect's prefixes)."""
    return write_properties(tmp_path / "worker.properties", {
        "bootstrap.servers": secure.bootstrap, "storage.root": str(tmp_path / "root"),
        "spark.master": "local[2]", "spark.sql.shuffle.partitions": "2",
        **secure.java_client_settings("consumer.", password), **secure.java_client_settings("producer.", password),
        **extra})


def files_containing(root: Path, secret: bytes) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file() and secret in path.read_bytes()]


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_sink_source_and_archive_log_in_with_sasl_ssl(engine: str, kafka_bootstrap: str,
                                                      kafka_sasl_ssl: SecureKafka, tmp_path: Path,
                                                      unique_name: str) -> None:
    records_in, records_out = f"{unique_name}-in", f"{unique_name}-out"
    create_topic(kafka_bootstrap, records_in, partitions=2, config=KEEP)
    create_topic(kafka_bootstrap, records_out, partitions=1)
    produce_at(kafka_bootstrap, records_in, [(i % 2, b"s%d" % i, T0 + i) for i in range(12)])
    _, sink_subscription = create_topic_and_subscription(f"{unique_name}-sink")
    source_topic, source_subscription = create_topic_and_subscription(f"{unique_name}-source")
    publish(source_topic, [(b"m%d" % i, {}, None) for i in range(9)])

    worker = secure_worker(tmp_path, kafka_sasl_ssl, **ENGINES[engine])
    sink = write_properties(tmp_path / "sink.properties", {
        "name": f"{unique_name}-sink", "connector.class": "CloudPubSubSinkConnector", "topics": records_in,
        "cps.project": "test-project", "cps.topic": f"{unique_name}-sink", "cps.useEmulator": "true"})
    source = write_properties(tmp_path / "source.properties", {
        "name": f"{unique_name}-source", "connector.class": "CloudPubSubSourceConnector",
        "cps.project": "test-project", "cps.subscription": source_subscription, "cps.useEmulator": "true",
        "kafka.topic": records_out, "kafka.record.headers": "true",
        "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter"})
    out, buffer = tmp_path / "archive", tmp_path / "buffer"
    buffer.mkdir()
    archive = write_properties(tmp_path / "archive.properties", {
        "name": f"{unique_name}-archive", "connector.class": "S3SinkConnector", "topics": records_in,
        "output.path": str(out), "local.buffer.dir": str(buffer)})

    result = cli("run", "--once", "--worker", str(worker), str(sink), str(source), str(archive))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert ENGINE_LINES[engine] in result.stdout

    got = sorted(m.data for m in pull_all(sink_subscription, 12, timeout=60))
    assert got == sorted(b"s%d" % i for i in range(12))
    assert_no_more_messages(sink_subscription, wait=1.0)
    assert sorted(r.value for r in consume_all(kafka_bootstrap, records_out)) == sorted(b"m%d" % i for i in range(9))
    assert archived_records(LocalStore(out), "") == topic_records(kafka_bootstrap, records_in)

    password = kafka_sasl_ssl.password
    validate = cli("validate", "--worker", str(worker), str(sink), str(source), str(archive))
    assert validate.returncode == 0, validate.stderr
    assert "consumer.sasl.jaas.config" in validate.stdout
    for text in (result.stdout, result.stderr, validate.stdout, validate.stderr):
        assert password not in text
    assert files_containing(tmp_path / "root", password.encode()) == []
    assert files_containing(out, password.encode()) == []


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_a_wrong_password_stops_the_connector_with_one_line(engine: str, kafka_bootstrap: str,
                                                            kafka_sasl_ssl: SecureKafka, tmp_path: Path,
                                                            unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name, partitions=1)
    wrong = "not-the-password-7c1e"
    worker = secure_worker(tmp_path, kafka_sasl_ssl, password=wrong, **ENGINES[engine])
    sink = write_properties(tmp_path / "sink.properties", {
        "name": unique_name, "connector.class": "CloudPubSubSinkConnector", "topics": unique_name,
        "cps.project": "test-project", "cps.topic": unique_name, "cps.useEmulator": "true"})
    result = cli("run", "--once", "--worker", str(worker), str(sink))
    assert result.returncode == 2, result.stdout[-3000:] + result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {unique_name}: Kafka broker {kafka_sasl_ssl.bootstrap} (bootstrap.servers) refused "
                      "the connection: SASL authentication error: Authentication failed during authentication "
                      "due to invalid credentials with SASL mechanism SCRAM-SHA-512"], result.stderr
    assert len(result.stdout.splitlines()) + len(result.stderr.splitlines()) < 5, result.stdout + result.stderr
    assert wrong not in result.stdout + result.stderr


def test_an_unreachable_broker_is_named_in_one_line_per_restart(tmp_path: Path, unique_name: str) -> None:
    """Nothing listens at the address: each restart of the ingest stage prints one line naming
    it, then the connector gives up after ``pipeline.restart.timeout.ms`` (the first 20 s here)."""
    address = f"127.0.0.1:{free_port()}"
    worker = write_properties(tmp_path / "worker.properties", {
        "bootstrap.servers": address, "storage.root": str(tmp_path / "root"), "spark.master": "local[1]",
        "pipeline.restart.timeout.ms": "20000"})
    sink = write_properties(tmp_path / "sink.properties", {
        "name": unique_name, "connector.class": "CloudPubSubSinkConnector", "topics": unique_name,
        "cps.project": "test-project", "cps.topic": unique_name, "cps.useEmulator": "true"})
    result = cli("run", "--once", "--worker", str(worker), str(sink))
    assert result.returncode == 2, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines() + result.stderr.splitlines()
    assert len(lines) < 20, "\n".join(lines)
    named = f"Kafka broker {address} (bootstrap.servers) is not reachable: Connect to ipv4#{address} failed: " \
            "Connection refused"
    restarts = [line for line in result.stdout.splitlines() if line.startswith(f"[{unique_name}.ingest]")]
    assert restarts and all(named in line for line in restarts), result.stdout
    assert restarts[0] == f"[{unique_name}.ingest] {named}; restarting from the checkpoint in 1 s (restart 1)"
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and named in errors[0] and "pipeline.restart.timeout.ms=20000" in errors[0], result.stderr
