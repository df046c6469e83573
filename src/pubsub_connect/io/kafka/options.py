"""The one translation of Kafka client settings: Connect's and Spark's keys → librdkafka's.

Why one module: users bring the keys of their Connect files (``security.protocol``,
``sasl.jaas.config``, ``ssl.truststore.location`` …), which Spark's Kafka connector and Databricks
take as they are, because both run the Java client. The parts of this product that run librdkafka
through confluent-kafka (the transactional producer of the source connectors, the admin lookups,
the fallback engine's Kafka source and sink) must accept the same keys and reach the same broker
with the same credentials. Most names are shared; this module renames, translates or rejects the
rest, each with a one-line message instead of librdkafka's "No such configuration property".

Three shapes of the same settings meet here:

* Connect's: the worker's ``<role>.*`` keys and a connector's ``<role>.override.*`` keys
  (:func:`connect_client_settings`, Java client names);
* Spark's Kafka options: the same names with a ``kafka.`` prefix (:func:`spark_client_options`),
  read back by :func:`client_config` for the Python data source, with the keys each connector
  owns itself (``SOURCE_FORBIDDEN``, ``SINK_FORBIDDEN``) rejected; on Databricks, whose Java
  client is relocated, with the client's own class names relocated too
  (:func:`shade_kafka_class_names`);
* librdkafka's (:func:`librdkafka_settings`).

Both the reader and the writer of the fallback engine parse their options with these helpers,
so neither imports the other.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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
# Spark's Kafka options (``kafka.*`` plus the connector's own keys)
# --------------------------------------------------------------------------------------------

#: Options Spark's connector rejects because the connector itself owns them.
SOURCE_FORBIDDEN = {
    "auto.offset.reset": "set the source option 'startingOffsets' instead",
    "key.deserializer": "keys are always returned as binary",
    "value.deserializer": "values are always returned as binary",
    "enable.auto.commit": "offsets live in the Spark checkpoint, nothing is committed to Kafka",
    "interceptor.classes": "Java interceptors cannot run in a Python client",
}
SINK_FORBIDDEN = {
    "key.serializer": "keys are always written as binary (cast the column)",
    "value.serializer": "values are always written as binary (cast the column)",
    "interceptor.classes": "Java interceptors cannot run in a Python client",
}


def lower_keys(options: Mapping[str, Any]) -> dict[str, str]:
    """Spark options are case-insensitive; normalise once (values keep their case)."""
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def client_config(options: Mapping[str, str], forbidden: Mapping[str, str]) -> dict[str, str]:
    """The Spark-style ``kafka.*`` options as a librdkafka configuration.

    Why a translation: the same option map must work for Spark's JVM connector (Java client
    names) and for this module (librdkafka names); see :func:`librdkafka_settings`.
    """
    opts = lower_keys(options)
    java: dict[str, str] = {}
    for key, value in opts.items():
        if not key.startswith("kafka."):
            continue
        name = key[len("kafka."):]
        if name in forbidden:
            raise KafkaOptionsError(f"Kafka option 'kafka.{name}' is not supported: {forbidden[name]}")
        java[name] = value
    conf = librdkafka_settings(java, shown_prefix="kafka.")
    if not conf.get("bootstrap.servers"):
        raise KafkaOptionsError("option 'kafka.bootstrap.servers' is required")
    return conf


def require_bootstrap_servers(opts: Mapping[str, str]) -> None:
    """The one client option every Kafka query needs, checked for the native connector too
    (whose own message would come from the JVM, late and long). ``opts``: lower-cased keys."""
    if not opts.get("kafka.bootstrap.servers"):
        raise KafkaOptionsError("option 'kafka.bootstrap.servers' is required")


def parse_bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise KafkaOptionsError(f"option '{key}' must be true or false, got {raw!r}")


def parse_positive_int(opts: Mapping[str, str], key: str) -> int | None:
    raw = opts.get(key.lower())
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise KafkaOptionsError(f"option '{key}' must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise KafkaOptionsError(f"option '{key}' must be a positive integer, got {raw!r}")
    return value


# --------------------------------------------------------------------------------------------
# Connect's client keys
# --------------------------------------------------------------------------------------------


def connect_client_settings(bootstrap_servers: str, worker_settings: Mapping[str, str], role: str,
                            connector_settings: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Java client settings of a Connect client acting as ``role`` (``consumer``,
    ``producer``, ``admin``), in Connect's order: the bootstrap servers, the worker's ``<role>.*``
    keys (``worker_settings``, prefix already removed), then the connector's
    ``<role>.override.*`` keys found in ``connector_settings``."""
    java = {"bootstrap.servers": bootstrap_servers, **worker_settings}
    if connector_settings is not None:
        override = f"{role}.override."
        java.update({k[len(override):]: v for k, v in connector_settings.items() if k.startswith(override)})
    return java


#: The package Databricks Runtime relocates ("shades") the Java Kafka client under:
#: ``org.apache.kafka.common.security.plain.PlainLoginModule`` is
#: ``kafkashaded.org.apache.kafka.common.security.plain.PlainLoginModule`` there, and the
#: unrelocated name does not exist (a JAAS line naming it fails with "No LoginModule found").
SHADED_KAFKA_PREFIX = "kafkashaded."

#: Java client settings whose value names classes the client loads, besides the ``*.class`` and
#: ``*.classes`` ones: the login module of a JAAS line, and the lists of Kafka's own assignor and
#: reporter classes.
CLASS_NAMING_SETTINGS = frozenset({"sasl.jaas.config", "partition.assignment.strategy", "metric.reporters"})

#: A class name in Kafka's own package, not preceded by another package (so neither
#: ``kafkashaded.org.apache.kafka.…`` nor ``com.example.org.apache.kafka.…`` matches).
_KAFKA_CLASS_NAME = re.compile(r"(?<![\w.$])org\.apache\.kafka\.")


def names_classes(name: str) -> bool:
    """Whether the Java client setting ``name`` (no ``kafka.`` prefix) holds class names."""
    return name in CLASS_NAMING_SETTINGS or name.endswith((".class", ".classes"))


def shade_kafka_class_names(java: Mapping[str, str]) -> dict[str, str]:
    """``java`` with every class of Kafka's own package, in the settings that name classes,
    relocated to where Databricks Runtime has it (:data:`SHADED_KAFKA_PREFIX`).

    Why here: users bring their Connect files' JAAS lines (``org.apache.kafka.common.security.
    scram.ScramLoginModule required …``) and callback handlers unchanged, and the same files run
    locally, where the client is not relocated. A name already relocated, and classes of other
    packages (a user's own callback handler), stay as they are; other settings are never touched.
    """
    return {name: _KAFKA_CLASS_NAME.sub(SHADED_KAFKA_PREFIX + "org.apache.kafka.", value)
            if names_classes(name) else value for name, value in java.items()}


def spark_client_options(java: Mapping[str, str], *, shaded_kafka: bool) -> dict[str, str]:
    """Java client settings as Spark Kafka options (``kafka.``-prefixed), which both Spark's
    connector and :func:`client_config` read.

    ``shaded_kafka``: the session's Java Kafka client is Databricks Runtime's relocated one
    (``Capabilities.databricks``), so Kafka's class names are relocated to match
    (:func:`shade_kafka_class_names`); never locally. The librdkafka settings are built from the
    unchanged Java settings (:func:`librdkafka_settings`), which accepts either name."""
    if shaded_kafka:
        java = shade_kafka_class_names(java)
    return {f"kafka.{key}": value for key, value in java.items()}
