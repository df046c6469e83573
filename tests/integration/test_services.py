"""The embedded services start on loopback, answer, and stop (tests use the same code)."""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from conftest import SecureKafka
from pubsub_connect.cli import main
from pubsub_connect.io.services import kafka as svc_kafka
from pubsub_connect.io.services import pubsub_emulator as svc_pubsub_emulator
from pubsub_connect.io.services.lifecycle import STARTERS, LocalServices, read_services
from pubsub_connect.io.services.process import RunningService, ServiceError


def test_services_up_status_down(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = str(tmp_path)
    try:
        assert main(["services", "up", "--storage-root", root]) == 0
        out = capsys.readouterr().out
        running = read_services(tmp_path)
        assert sorted(running) == ["kafka", "pubsub", "registry", "s3"]
        assert f"bootstrap.servers={running['kafka'].endpoint}" in out
        assert f"PUBSUB_EMULATOR_HOST={running['pubsub'].endpoint}" in out
        assert f"schema.registry.url={running['registry'].endpoint}" in out
        assert running["registry"].endpoint.endswith("/apis/ccompat/v7")
        assert all(s.endpoint.replace("http://", "").startswith("127.0.0.1:") for s in running.values())
        # the Kafka broker really answers on the advertised loopback address
        metadata = AdminClient({"bootstrap.servers": running["kafka"].endpoint}).list_topics(timeout=5)
        assert metadata.brokers and all(b.host == "127.0.0.1" for b in metadata.brokers.values())
        # each service keeps its files in a directory of its own
        assert {Path(s.directory).name for s in running.values()} == {"kafka", "pubsub", "registry", "s3"}
        # a second `up` reuses what runs
        assert main(["services", "up", "--storage-root", root]) == 0
        assert {k: v.pid for k, v in read_services(tmp_path).items()} == {k: v.pid for k, v in running.items()}
    finally:
        assert main(["services", "down", "--storage-root", root]) == 0
    assert "stopped: kafka, pubsub, registry, s3" in capsys.readouterr().out
    assert not any(s.is_running() for s in running.values())
    assert read_services(tmp_path) == {}


def test_only_the_registry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = str(tmp_path)
    try:
        assert main(["services", "up", "--only", "registry", "--storage-root", root]) == 0
        (registry,) = read_services(tmp_path).values()
        lines = capsys.readouterr().out.splitlines()
        assert lines[0] == f"registry pid={registry.pid:<7d} schema.registry.url={registry.endpoint}"
        assert registry.endpoint.startswith("http://127.0.0.1:")
    finally:
        assert main(["services", "down", "--storage-root", root]) == 0
    assert not registry.is_running()


def test_failed_start_stops_what_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[RunningService] = []
    real_start_kafka = svc_kafka.start_kafka

    def start_kafka(workdir: Path) -> RunningService:
        service = real_start_kafka(workdir)
        started.append(service)
        return service

    monkeypatch.setitem(STARTERS, "kafka", start_kafka)
    monkeypatch.setenv("PUBSUB_EMULATOR_LAUNCHER", "/nonexistent/emulator")
    monkeypatch.setattr(svc_pubsub_emulator, "pubsub_emulator_command",
                        lambda: (_ for _ in ()).throw(ServiceError("Google's Pub/Sub emulator is not installed")))
    with pytest.raises(ServiceError, match="emulator is not installed"):
        LocalServices(tmp_path, ("kafka", "pubsub")).start()
    assert started and not started[0].is_running()


def test_missing_java_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(ServiceError, match="Java is not installed"):
        svc_pubsub_emulator.pubsub_emulator_command()
    with pytest.raises(ServiceError, match=r"^Java is not installed: the local Kafka broker needs Java 17\+"):
        svc_kafka.start_kafka(tmp_path / "kafka")


def test_java_home_is_honoured_and_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(ServiceError, match=r"JAVA_HOME=.*nowhere has no bin/java"):
        svc_kafka.start_kafka(tmp_path / "kafka")
    old_java = tmp_path / "jdk11" / "bin" / "java"
    old_java.parent.mkdir(parents=True)
    old_java.write_text('#!/bin/sh\necho \'openjdk version "11.0.22" 2024-01-16\' >&2\n')
    old_java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk11"))
    with pytest.raises(ServiceError, match=r"needs Java 17\+, but .*jdk11/bin/java is Java 11"):
        svc_kafka.start_kafka(tmp_path / "kafka")


def test_a_broker_that_cannot_start_is_one_line_and_leaves_nothing_running(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ServiceError) as failure:
            svc_kafka.start_kafka(tmp_path / "kafka", port=port)
    message = str(failure.value)
    assert "\n" not in message
    assert message.startswith("Kafka broker exited with code "), message
    assert f"127.0.0.1:{port}" in message and "Address already in use" in message, message


# --------------------------------------------------------------------------------------------
# The broker is Apache Kafka: configs, exact offsets, transactions, data kept across a restart
# --------------------------------------------------------------------------------------------


def _read_to_end(bootstrap: str, topic: str, end: int, isolation: str, timeout_s: float = 60) -> list[bytes]:
    """Values of partition 0 of ``topic`` as a consumer with ``isolation`` sees them, read until
    the end-of-partition event at offset ``end``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-{isolation}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            assert time.monotonic() < deadline, f"{topic}: no end of partition at {end} within {timeout_s} s"
            for msg in consumer.consume(500, 0.5):
                err = msg.error()
                if err is None:
                    values.append(msg.value())
                elif err.code() == KafkaError._PARTITION_EOF:
                    if msg.offset() >= end:
                        return values
                else:
                    raise AssertionError(f"consume {topic}: {err}")
    finally:
        consumer.close()


def _latest_offsets(bootstrap: str, topic: str) -> tuple[int, int]:
    """``(earliest, latest)`` of partition 0 from a ListOffsets request (not a cached fetch)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-offsets"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
        return int(low), int(high)
    finally:
        consumer.close()


def _produce_one_batch(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """``values`` in a single record batch: the case where a wrong ListOffsets(latest) shows."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1000, "batch.num.messages": 10_000,
                         "enable.idempotence": True})
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0


def _produce_transaction(bootstrap: str, topic: str, values: list[bytes], commit: bool) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0  # the records are in the log before the transaction ends
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def test_the_broker_is_kafka_and_keeps_its_data_across_a_restart(tmp_path: Path) -> None:
    directory = tmp_path / "kafka"
    topic = "restarted"
    plain = [f"plain-{i}".encode() for i in range(50)]
    aborted = [f"aborted-{i}".encode() for i in range(20)]
    committed = [f"committed-{i}".encode() for i in range(10)]
    # 50 plain records, 20 aborted + abort marker, 10 committed + commit marker
    end = len(plain) + len(aborted) + 1 + len(committed) + 1

    service = svc_kafka.start_kafka(directory)
    try:
        bootstrap = service.endpoint
        assert Path(service.directory) == directory.resolve()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        broker = ConfigResource(ConfigResource.Type.BROKER, "1")
        configs = admin.describe_configs([broker])[broker].result(30)
        assert configs["log.dirs"].value == str(directory.resolve() / "data")
        assert configs["advertised.listeners"].value == f"PLAINTEXT://{bootstrap}"
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)

        _produce_one_batch(bootstrap, topic, plain)
        assert _latest_offsets(bootstrap, topic) == (0, len(plain))
        _produce_transaction(bootstrap, topic, aborted, commit=False)
        _produce_transaction(bootstrap, topic, committed, commit=True)
        assert _latest_offsets(bootstrap, topic) == (0, end)

        assert _read_to_end(bootstrap, topic, end, "read_committed") == plain + committed
        # the aborted records are in the log: the broker hides them from read_committed
        assert _read_to_end(bootstrap, topic, end, "read_uncommitted") == plain + aborted + committed
        cluster = (directory / "data" / "meta.properties").read_text()
    finally:
        service.stop()
    assert not service.is_running()

    restarted = svc_kafka.start_kafka(directory, port=service.port)
    try:
        assert restarted.endpoint == service.endpoint and restarted.pid != service.pid
        assert (directory / "data" / "meta.properties").read_text() == cluster  # not formatted again
        assert _latest_offsets(restarted.endpoint, topic) == (0, end)
        assert _read_to_end(restarted.endpoint, topic, end, "read_committed") == plain + committed
    finally:
        restarted.stop()
    assert not restarted.is_running()


def test_the_sasl_ssl_listener_takes_a_connect_users_keys_and_refuses_a_wrong_password(
        kafka_bootstrap: str, kafka_sasl_ssl: SecureKafka, unique_name: str) -> None:
    """SCRAM-SHA-512 over TLS, the broker's certificate verified against the test CA: the keys of
    a Connect file, translated for librdkafka, produce and read back; a wrong password is a
    one-line login error naming the listener."""
    from pubsub_connect.io.kafka.admin import KafkaLoginError, check_brokers
    from pubsub_connect.io.kafka.options import librdkafka_settings

    settings = librdkafka_settings({"bootstrap.servers": kafka_sasl_ssl.bootstrap,
                                    **kafka_sasl_ssl.java_client_settings()})
    check_brokers(settings)
    producer = Producer(settings)
    producer.produce(unique_name, b"over-tls", key=b"k")
    assert producer.flush(30) == 0
    consumer = Consumer({**settings, "group.id": unique_name, "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(unique_name, 0, 0)])
        message = consumer.poll(30)
        assert message is not None and message.error() is None
        assert (message.key(), message.value()) == (b"k", b"over-tls")
    finally:
        consumer.close()
    # The same records through the PLAINTEXT listener: one broker, two doors.
    metadata = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(unique_name, timeout=10)
    assert list(metadata.topics[unique_name].partitions) == [0]

    wrong = librdkafka_settings({"bootstrap.servers": kafka_sasl_ssl.bootstrap,
                                 **kafka_sasl_ssl.java_client_settings(password="wrong")})
    with pytest.raises(KafkaLoginError) as raised:
        check_brokers(wrong)
    assert str(raised.value) == (
        f"Kafka broker {kafka_sasl_ssl.bootstrap} (bootstrap.servers) refused the connection: SASL authentication "
        "error: Authentication failed during authentication due to invalid credentials with SASL mechanism "
        "SCRAM-SHA-512")
