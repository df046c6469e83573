"""Kafka cluster administration: topic metadata, topic creation, the broker check.

Why one module: an ``AdminClient`` needs only the connection settings (it warns about every
consumer- or producer-only key) and the project's client logger; making it here, once, keeps every
lookup of topics, partitions and the cluster consistent, and keeps confluent-kafka's admin API out
of the pipelines.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from pubsub_connect.io.kafka.librdkafka import connection_settings, with_client_logger

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient, ClusterMetadata


def admin_client(settings: Mapping[str, object], **extra: object) -> AdminClient:
    """An ``AdminClient`` from a librdkafka client's ``settings`` (only the connection keys are
    kept), plus ``extra`` settings (callbacks, backoffs) and the project's client logger."""
    from confluent_kafka.admin import AdminClient

    return AdminClient(with_client_logger({**connection_settings(settings), **extra}))


def list_topics(settings: Mapping[str, object], *, topic: str | None = None,
                timeout_s: float = 30) -> ClusterMetadata:
    """The cluster's metadata: every topic, or only ``topic``."""
    return admin_client(settings).list_topics(topic=topic, timeout=timeout_s)


def partition_counts(settings: Mapping[str, object], wanted: Iterable[str] = (), pattern: str | None = None,
                     timeout_s: float = 30) -> dict[str, int]:
    """Partitions of the existing topics named in ``wanted`` or whose whole name matches
    ``pattern`` (internal ``__`` topics excepted, as a Java consumer's subscription would)."""
    names = set(wanted)
    compiled = re.compile(pattern) if pattern is not None else None
    counts = {}
    for name, topic in list_topics(settings, timeout_s=timeout_s).topics.items():
        if topic.error is not None:
            continue
        if name in names or (compiled is not None and not name.startswith("__") and compiled.fullmatch(name)):
            counts[name] = len(topic.partitions)
    return counts


def partition_count(settings: Mapping[str, object], topic: str, timeout_s: float = 30) -> int | None:
    """Partitions of ``topic`` now; None when it does not exist (or has no partition)."""
    found = list_topics(settings, topic=topic, timeout_s=timeout_s).topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        return None
    return len(found.partitions)


def create_topic(settings: Mapping[str, object], topic: str, partitions: int,
                 replication_factor: int = -1, timeout_s: float = 30) -> bool:
    """Create ``topic``; False when it already existed (any other failure raises)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    admin = admin_client(settings)  # referenced until the future resolves
    futures = admin.create_topics([NewTopic(topic, partitions, replication_factor)], operation_timeout=timeout_s)
    try:
        futures[topic].result(timeout_s)
    except KafkaException as exc:
        if exc.args and hasattr(exc.args[0], "code") and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise
    return True


def cluster_id(settings: Mapping[str, object], timeout_s: float = 10) -> str | None:
    """The cluster's id, as Kafka Connect's ``GET /`` reports it."""
    admin = admin_client(settings)
    return admin.describe_cluster(request_timeout=timeout_s).result(timeout=timeout_s + 5).cluster_id


# --------------------------------------------------------------------------------------------
# Whether a broker can be reached at all
# --------------------------------------------------------------------------------------------


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
    from confluent_kafka import KafkaError, KafkaException

    brokers = settings.get("bootstrap.servers", "")
    where = f"Kafka broker {brokers} (bootstrap.servers)"
    errors: list[KafkaError] = []
    admin = admin_client(settings, error_cb=errors.append)
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
