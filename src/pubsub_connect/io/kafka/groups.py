"""Kafka consumer-group offsets: read, commit and delete a group's committed positions.

Why a sink connector touches a consumer group at all: Kafka Connect keeps a sink's position as
the offsets of consumer group ``connect-<name>``, and operators read lag from that group with
``kafka-consumer-groups``. pubsub-connect's position is its Spark checkpoint, but it starts a new
connector from the group's offsets (a cut-over from Kafka Connect loses nothing and republishes
nothing) and commits each ingested batch's end back to the group (lag tooling keeps working).

Commits come from a consumer that never joins the group: the broker accepts them only while the
group has no active member, which is exactly the cut-over rule (stop the old connector first)
and keeps a still-running Connect task from being overwritten.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from pubsub_connect.io.kafka.admin import admin_client
from pubsub_connect.io.kafka.librdkafka import connection_settings, with_client_logger

#: Connect's consumer group for a sink connector.
GROUP_PREFIX = "connect-"
_TIMEOUT_S = 30.0
_RETRY_S = 0.2
#: Answers that mean "ask again shortly": the group's coordinator is loading or has moved.
_COORDINATOR_MOVES = frozenset({KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                KafkaError.COORDINATOR_NOT_AVAILABLE})

#: ``(topic, partition)`` → the next offset to read.
Positions = dict[tuple[str, int], int]


class ConsumerGroupError(RuntimeError):
    """A group's offsets could not be read or written; ``str()`` is one line naming Kafka's error
    code (``COORDINATOR_NOT_AVAILABLE``, ``UNKNOWN_MEMBER_ID``…)."""


def _describe(exc: KafkaException) -> str:
    error = exc.args[0] if exc.args else None
    if error is None or not hasattr(error, "name"):
        return str(exc)
    return f"{error.name()} ({error.str()})"


def connect_group(connector_name: str) -> str:
    """The consumer group Kafka Connect uses for sink connector ``connector_name``."""
    return f"{GROUP_PREFIX}{connector_name}"


class ConsumerGroupOffsets:
    """One consumer group's committed offsets, through a consumer of that group that never
    subscribes (so it never joins the group: it only reads and commits offsets, like the tools).

    Why a consumer and not the admin API's group-offset calls: those crashed librdkafka's main
    thread here (a segfault of the whole process) on their error path while the group
    coordinator was still loading; the consumer's coordinator handling is the one every Kafka
    consumer relies on."""

    def __init__(self, client: Mapping[str, str], group: str):
        self.client = client
        self.group = group
        self._consumer: Consumer | None = None
        self._lock = threading.Lock()
        self._retry = threading.Event()  # never set: waits between retries

    def _group_consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(with_client_logger({
                **connection_settings(self.client), "group.id": self.group, "enable.auto.commit": False,
                "enable.auto.offset.store": False}))
        return self._consumer

    def read(self, partitions: Iterable[tuple[str, int]]) -> Positions:
        """The group's committed offsets of these partitions (those without a commit are absent)."""
        wanted = [TopicPartition(topic, partition) for topic, partition in sorted(set(partitions))]
        if not wanted:
            return {}
        committed = self._call(lambda consumer: consumer.committed(wanted, timeout=_TIMEOUT_S),
                               "read the offsets of")
        self._check(committed, "read the offsets of")
        return {(tp.topic, tp.partition): tp.offset for tp in committed if tp.offset >= 0}

    def commit(self, positions: Mapping[tuple[str, int], int]) -> None:
        """Set the group's offsets of these partitions (others keep theirs). Refused by the broker
        while the group has active members, e.g. the old Connect task still running."""
        if not positions:
            return
        partitions = [TopicPartition(topic, partition, offset)
                      for (topic, partition), offset in sorted(positions.items())]
        result = self._call(lambda consumer: consumer.commit(offsets=partitions, asynchronous=False) or [],
                            "commit offsets to")
        self._check(result, "commit offsets to")

    def _call(self, request: Callable[[Consumer], list[TopicPartition]], action: str) -> list[TopicPartition]:
        """Run a group request, asked again while Kafka calls its error retriable: a group
        coordinator that is still loading or has just moved (``COORDINATOR_LOAD_IN_PROGRESS``,
        ``NOT_COORDINATOR``, which the client does not retry itself for these requests) is not a
        reason to fail a stage, nor to take the group for empty."""
        deadline = time.monotonic() + _TIMEOUT_S
        with self._lock:
            while True:
                try:
                    return request(self._group_consumer())
                except KafkaException as exc:
                    error = exc.args[0] if exc.args else None
                    retriable = error is not None and (error.retriable() or error.code() in _COORDINATOR_MOVES)
                    if not retriable or time.monotonic() >= deadline:
                        raise ConsumerGroupError(f"cannot {action} consumer group {self.group}: "
                                                 f"{_describe(exc)}") from None
                    self._retry.wait(_RETRY_S)

    def _check(self, partitions: list[TopicPartition], action: str) -> None:
        """Raise for the first partition the broker answered with an error."""
        failed = [tp for tp in partitions if tp.error is not None]
        if failed:
            raise ConsumerGroupError(f"cannot {action} consumer group {self.group}: "
                                     f"{failed[0].topic}-{failed[0].partition}: {failed[0].error.name()}")

    def delete(self) -> None:
        """Forget the group and its offsets (nothing to do when it does not exist)."""
        admin = admin_client(self.client)
        futures = admin.delete_consumer_groups([self.group], request_timeout=_TIMEOUT_S)
        try:
            futures[self.group].result(timeout=_TIMEOUT_S)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if error is not None and hasattr(error, "name") and error.name() in ("GROUP_ID_NOT_FOUND", "_NOENT"):
                return
            raise ConsumerGroupError(f"cannot delete consumer group {self.group}: {_describe(exc)}") from None

    def close(self) -> None:
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None
