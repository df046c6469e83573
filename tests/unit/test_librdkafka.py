"""Java client settings → librdkafka settings, and the one-line broker check's wording."""

from __future__ import annotations

from pathlib import Path

import pytest

from integration.kafka_tls import make_kafka_tls
from pubsub_connect.io.kafka.admin import KafkaUnreachableError, _reason, check_brokers
from pubsub_connect.io.kafka.librdkafka import CLIENT_LOGGER, with_client_logger
from pubsub_connect.io.kafka.options import KafkaOptionsError, librdkafka_settings

JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="connect" '
        'password="s3cr\\"et";')


def test_a_connect_users_sasl_ssl_settings_become_librdkafkas(tmp_path: Path) -> None:
    assert librdkafka_settings({
        "bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": JAAS, "ssl.truststore.type": "PEM", "ssl.truststore.location": "/etc/ca.pem",
        "ssl.endpoint.identification.algorithm": "", "client.dns.lookup": "use_all_dns_ips",
        "max.poll.records": "500", "send.buffer.bytes": "1024",
    }) == {
        "bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "connect", "sasl.password": 's3cr"et', "ssl.ca.location": "/etc/ca.pem",
        "ssl.endpoint.identification.algorithm": "none", "socket.send.buffer.bytes": "1024",
    }


def test_a_pkcs12_trust_store_is_read_and_its_certificates_handed_over_as_pem(tmp_path: Path) -> None:
    tls = make_kafka_tls(tmp_path)
    conf = librdkafka_settings({"ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(tls.ca_pkcs12),
                                "ssl.truststore.password": tls.truststore_password})
    assert set(conf) == {"ssl.ca.location"}
    assert Path(conf["ssl.ca.location"]).read_bytes() == tls.ca_pem.read_bytes()
    with pytest.raises(KafkaOptionsError, match=r"^producer\.ssl\.truststore\.location: cannot read the PKCS12 store"):
        librdkafka_settings({"ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(tls.ca_pkcs12),
                             "ssl.truststore.password": "wrong"}, shown_prefix="producer.")


def test_key_stores_and_inline_pem() -> None:
    assert librdkafka_settings({"ssl.keystore.type": "PEM", "ssl.keystore.location": "/k.pem"}) == {
        "ssl.certificate.location": "/k.pem", "ssl.key.location": "/k.pem"}
    assert librdkafka_settings({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/k.p12",
                                "ssl.keystore.password": "pw"}) == {
        "ssl.keystore.location": "/k.p12", "ssl.keystore.password": "pw"}
    assert librdkafka_settings({"ssl.truststore.certificates": "CA", "ssl.keystore.certificate.chain": "CHAIN",
                                "ssl.keystore.key": "KEY"}) == {
        "ssl.ca.pem": "CA", "ssl.certificate.pem": "CHAIN", "ssl.key.pem": "KEY"}


@pytest.mark.parametrize(("settings", "message"), [
    ({"ssl.truststore.location": "/x.jks"}, r"^consumer\.ssl\.truststore\.type=JKS cannot be read outside Java"),
    ({"ssl.keystore.location": "/x.jks"}, r"^consumer\.ssl\.keystore\.type=JKS cannot be read outside Java"),
    ({"sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required;"},
     r"^consumer\.sasl\.jaas\.config: only PlainLoginModule/ScramLoginModule"),
    ({"sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"u\";"},
     r'^consumer\.sasl\.jaas\.config must contain username="…" and password="…"$'),
    ({"interceptor.classes": "com.example.Audit"}, r"^Kafka setting 'consumer\.interceptor\.classes' names a Java"),
])
def test_what_cannot_be_translated_is_refused_in_one_line(settings: dict[str, str], message: str) -> None:
    with pytest.raises(KafkaOptionsError, match=message) as raised:
        librdkafka_settings(settings, shown_prefix="consumer.")
    assert "\n" not in str(raised.value)


def test_the_reason_drops_what_the_line_already_says() -> None:
    assert _reason("sasl_ssl://127.0.0.1:4/bootstrap: SASL authentication error: bad (after 333ms in state "
                   "AUTH_REQ)") == "SASL authentication error: bad"
    assert _reason("127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 0ms in "
                   "state CONNECT)") == "Connect to ipv4#127.0.0.1:1 failed: Connection refused"


def test_client_logs_go_to_the_project_logger_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    import pickle

    assert pickle.loads(pickle.dumps(with_client_logger({"a": "b"})))["a"] == "b"
    with caplog.at_level("DEBUG", logger="pubsub_connect.kafka.client"):
        CLIENT_LOGGER.log(40, "%s: %s", "FAIL", "broker down")
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        ("pubsub_connect.kafka.client", "DEBUG", "FAIL: broker down")]


def test_nothing_listening_is_reported_with_the_address(tmp_path: Path) -> None:
    import socket

    with socket.socket() as holder:  # a port that is certainly free while the check runs
        holder.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{holder.getsockname()[1]}"
        with pytest.raises(KafkaUnreachableError) as raised:
            check_brokers({"bootstrap.servers": address})
    assert str(raised.value) == (f"Kafka broker {address} (bootstrap.servers) is not reachable: "
                                 f"Connect to ipv4#{address} failed: Connection refused")
