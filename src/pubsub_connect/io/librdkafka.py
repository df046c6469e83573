"""Kafka client settings in the Java client's names → the same settings for librdkafka.

Why: users bring the keys of their Connect files (``security.protocol``, ``sasl.jaas.config``,
``ssl.truststore.location`` …), which Spark's Kafka connector and Databricks take as they are,
because both run the Java client. The parts of this product that run librdkafka through
confluent-kafka (the transactional producer of the source connectors, the admin lookups, the
fallback engine's Kafka source) must accept the same keys and reach the same broker with the same
credentials. Most names are shared; this module renames, translates or rejects the rest, each
with a one-line message instead of librdkafka's "No such configuration property".
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger(__name__)


class KafkaOptionsError(ValueError):
    """A Kafka client setting is missing, malformed or not supported — one-line message."""


#: Java client names whose librdkafka counterpart has another name.
JAVA_RENAMES = {
    "fetch.max.wait.ms": "fetch.wait.max.ms",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
    "ssl.truststore.certificates": "ssl.ca.pem",
    "ssl.keystore.certificate.chain": "ssl.certificate.pem",
    "ssl.keystore.key": "ssl.key.pem",
}
#: Java-only knobs with no librdkafka equivalent; dropped so a Databricks job's settings also work
#: here (they change performance or Java internals, never which broker or which credentials).
JAVA_ONLY_IGNORED = frozenset({
    "max.poll.records",
    "default.api.timeout.ms",
    "buffer.memory",
    "max.block.ms",
    "ssl.protocol",
    "ssl.enabled.protocols",
    "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm",
    "ssl.secure.random.implementation",
    "group.instance.id",
    "client.dns.lookup",
})

_JAAS_KV = re.compile(r"""(\w+)\s*=\s*"((?:[^"\\]|\\.)*)\"""")


def librdkafka_settings(java: Mapping[str, str], *, shown_prefix: str = "") -> dict[str, str]:
    """``java`` (Java client names, no ``kafka.`` prefix) as librdkafka settings.

    ``shown_prefix`` is how the user wrote the keys (``kafka.``, ``producer.``…), for messages.
    Values are never part of a message: some of them are passwords.
    """
    conf: dict[str, str] = {}
    for name, value in java.items():
        if name in JAVA_ONLY_IGNORED:
            log.debug("ignoring Java-only Kafka setting %s%s", shown_prefix, name)
            continue
        if name.endswith((".class", ".classes")):
            raise KafkaOptionsError(f"Kafka setting '{shown_prefix}{name}' names a Java class, which the "
                                    "librdkafka client of this connector cannot load")
        if name == "sasl.jaas.config":
            conf.update(translate_jaas(value, f"{shown_prefix}{name}"))
            continue
        if name == "ssl.endpoint.identification.algorithm":
            # Java turns verification off with an empty value, librdkafka with "none".
            conf[name] = value.strip().lower() or "none"
            continue
        conf[JAVA_RENAMES.get(name, name)] = value
    _translate_truststore(conf, shown_prefix)
    _translate_keystore(conf, shown_prefix)
    return conf


def translate_jaas(jaas: str, shown_key: str = "sasl.jaas.config") -> dict[str, str]:
    """``sasl.jaas.config`` → ``sasl.username`` / ``sasl.password``.

    Only the user/password login modules (PLAIN, SCRAM) have a librdkafka counterpart.
    """
    if "PlainLoginModule" not in jaas and "ScramLoginModule" not in jaas:
        raise KafkaOptionsError(
            f"{shown_key}: only PlainLoginModule/ScramLoginModule can be translated for the librdkafka "
            "client; set sasl.username / sasl.password (or sasl.oauthbearer.*) instead"
        )
    values = {k.lower(): v.replace('\\"', '"') for k, v in _JAAS_KV.findall(jaas)}
    if "username" not in values or "password" not in values:
        raise KafkaOptionsError(f'{shown_key} must contain username="…" and password="…"')
    return {"sasl.username": values["username"], "sasl.password": values["password"]}


def _translate_truststore(conf: dict[str, str], shown_prefix: str) -> None:
    """``ssl.truststore.*`` → ``ssl.ca.location``: PEM is used as it is, PKCS12 is converted to a
    PEM file of its certificates (public data); JKS has no reader outside Java."""
    store_type = conf.pop("ssl.truststore.type", "JKS").strip().upper()
    password = conf.pop("ssl.truststore.password", None)
    location = conf.pop("ssl.truststore.location", None)
    if location is None:
        return
    if store_type == "PEM":
        conf["ssl.ca.location"] = location
    elif store_type == "PKCS12":
        conf["ssl.ca.location"] = str(_pkcs12_certificates_as_pem(location, password, shown_prefix))
    else:
        raise KafkaOptionsError(
            f"{shown_prefix}ssl.truststore.type={store_type} cannot be read outside Java: give a PEM file "
            f"({shown_prefix}ssl.truststore.type=PEM) or convert it with "
            "keytool -importkeystore -deststoretype PKCS12"
        )


def _translate_keystore(conf: dict[str, str], shown_prefix: str) -> None:
    """``ssl.keystore.*`` (a client certificate, mTLS): librdkafka reads PKCS12 itself; a PEM
    keystore file holds the key and the chain, which librdkafka takes as two settings."""
    store_type = conf.pop("ssl.keystore.type", "JKS").strip().upper()
    location = conf.get("ssl.keystore.location")
    if location is None:
        return
    if store_type == "PEM":
        del conf["ssl.keystore.location"]
        conf.pop("ssl.keystore.password", None)
        conf["ssl.certificate.location"] = location
        conf["ssl.key.location"] = location
    elif store_type != "PKCS12":
        raise KafkaOptionsError(
            f"{shown_prefix}ssl.keystore.type={store_type} cannot be read outside Java: give a PKCS12 or "
            "PEM keystore"
        )


def _pkcs12_certificates_as_pem(location: str, password: str | None, shown_prefix: str) -> Path:
    """The certificates of a PKCS12 trust store, written once as PEM next to the temp files,
    named after the store's content (a changed store gets a new file)."""
    from cryptography.hazmat.primitives.serialization import Encoding, pkcs12

    try:
        data = Path(location).read_bytes()
        store = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except (OSError, ValueError) as exc:
        raise KafkaOptionsError(f"{shown_prefix}ssl.truststore.location: cannot read the PKCS12 store "
                                f"{location}: {exc}") from None
    certificates = [entry.certificate for entry in store.additional_certs]
    if store.cert is not None:
        certificates.append(store.cert.certificate)
    if not certificates:
        raise KafkaOptionsError(f"{shown_prefix}ssl.truststore.location: {location} holds no certificate")
    pem = b"".join(cert.public_bytes(Encoding.PEM) for cert in certificates)
    target = Path(tempfile.gettempdir()) / f"pubsub-connect-truststore-{hashlib.sha256(pem).hexdigest()[:16]}.pem"
    if not target.exists():
        partial = target.with_suffix(f".{os.getpid()}.tmp")
        partial.write_bytes(pem)
        partial.replace(target)
    return target


# --------------------------------------------------------------------------------------------
# The clients' own logs, and whether a broker can be reached at all
# --------------------------------------------------------------------------------------------

_client_log = logging.getLogger("pubsub_connect.kafka.client")


class _DebugLog:
    """Where librdkafka's own log lines go: the project's logger, at debug level (``--debug``
    shows them). Errors reach the connector through the clients' return values and exceptions;
    printed as they happened, one unreachable broker made ~20 lines a second on the console.
    A module-level object, so client settings holding it still pickle for Spark tasks."""

    def log(self, level: int, msg: str, *args: object) -> None:
        _client_log.debug(msg, *args)


CLIENT_LOGGER = _DebugLog()


#: librdkafka settings about reaching and logging in to the brokers (what an admin client, or a
#: consumer that only reads and commits group offsets, needs; an AdminClient warns about every
#: consumer- or producer-only key).
CONNECTION_PREFIXES = (
    "bootstrap.servers", "security.protocol", "ssl.", "sasl.", "client.id", "socket.", "broker.",
    "metadata.", "reconnect.", "retry.", "api.version", "client.dns.lookup", "debug", "log_level",
    "connections.max.idle.ms", "topic.metadata",
)


def connection_settings(client: Mapping[str, str]) -> dict[str, str]:
    """Only the settings of a librdkafka client that say how to reach and log in to the brokers."""
    return {k: v for k, v in client.items() if k.startswith(CONNECTION_PREFIXES)}


def with_client_logger(settings: Mapping[str, object]) -> dict[str, object]:
    """``settings`` plus the logger every confluent-kafka client of this project uses."""
    return {**settings, "logger": CLIENT_LOGGER}


class KafkaUnreachableError(ConnectionError):
    """No broker of ``bootstrap.servers`` answered (refused, unresolvable, timed out): worth
    retrying, the stage runner restarts the stage."""


class KafkaLoginError(PermissionError):
    """A broker answered but refused the client's TLS handshake or SASL login: retrying with the
    same settings cannot help."""


#: librdkafka error codes that mean "the broker refused us", not "no broker there".
_LOGIN_ERRORS = ("_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED", "_SSL", "CLUSTER_AUTHORIZATION_FAILED")


def check_brokers(settings: Mapping[str, str], timeout_s: float = 10.0) -> None:
    """Ask ``bootstrap.servers`` for metadata once, with ``settings`` (librdkafka names, TLS and
    SASL included); raise a one-line error naming the brokers and the failure when none answers.

    Why before a stage starts: Spark's Kafka connector and librdkafka both retry a dead broker
    quietly for minutes (each request up to ``default.api.timeout.ms``) and log every attempt, so
    a wrong address or password surfaced late and buried in client logs.
    """
    import time

    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    brokers = settings.get("bootstrap.servers", "")
    where = f"Kafka broker {brokers} (bootstrap.servers)"
    errors: list[KafkaError] = []
    admin = AdminClient(with_client_logger({**connection_settings(settings), "error_cb": errors.append}))
    deadline = time.monotonic() + timeout_s
    failures = 0
    while True:
        try:
            admin.list_topics(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            return
        except KafkaException:
            failures += 1
        admin.poll(0)  # serves error_cb: the connection errors behind the failed request
        for error in errors:
            if error.name() in _LOGIN_ERRORS:
                raise KafkaLoginError(f"{where} refused the connection: {_reason(error.str())}") from None
        specific = [e for e in errors if e.name() != "_ALL_BROKERS_DOWN"]
        # Two failed requests with a connection error behind them: the address is wrong or down
        # now (a restart of the stage asks again later); otherwise wait for the deadline.
        if (specific and failures >= 2) or time.monotonic() >= deadline:
            reason = _reason(specific[0].str()) if specific else f"no answer within {timeout_s:.0f} s"
            raise KafkaUnreachableError(f"{where} is not reachable: {reason}") from None


def _reason(text: str) -> str:
    """librdkafka's message without its ``sasl_ssl://host:port/bootstrap: `` prefix (the broker is
    already named) and the state-machine suffix ``(after 0ms in state CONNECT)``."""
    text = re.sub(r"^(?:\w+://)?\S+?/(?:bootstrap|\d+): ", "", text.strip())
    return re.sub(r" \(after \d+ms in state \w+\)", "", text)
