"""The fallback source's offset lookups ask again for partitions whose leader is moving.

librdkafka answers a partition of a topic created a moment ago with ``NOT_LEADER_FOR_PARTITION``
until its leader is elected; Kafka's Java admin client would retry that by itself. The admin
client here answers from a script, so each retry case is exact and repeatable.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from pubsub_connect.io.kafka import offsets
from pubsub_connect.io.kafka.offsets import OffsetReader
from pubsub_connect.io.kafka.read_options import KafkaReadOptions


@dataclass
class Answer:
    offset: int


class ScriptedAdmin:
    """Answers ``list_offsets`` call by call: per call, a map of partition to offset or error code."""

    def __init__(self, script: list[dict[tuple[str, int], int | KafkaError]]):
        self.script = script
        self.asked: list[list[tuple[str, int]]] = []

    def list_offsets(self, request: dict[Any, Any], **_: Any) -> dict[Any, Future[Answer]]:
        self.asked.append(sorted((tp.topic, tp.partition) for tp in request))
        answers = self.script[len(self.asked) - 1]
        futures: dict[Any, Future[Answer]] = {}
        for tp in request:
            fut: Future[Answer] = Future()
            answer = answers[(tp.topic, tp.partition)]
            if isinstance(answer, KafkaError):
                fut.set_exception(KafkaException(answer))
            else:
                fut.set_result(Answer(answer))
            futures[tp] = fut
        return futures


def reader_with(admin: ScriptedAdmin, timeout_ms: int = 30_000) -> OffsetReader:
    reader = OffsetReader(KafkaReadOptions.parse(
        {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t", "fetchOffset.timeoutMs": str(timeout_ms)},
        streaming=True))
    reader._admin = admin  # type: ignore[assignment]
    return reader


NOT_LEADER = KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION)
NO_LEADER = KafkaError(KafkaError.LEADER_NOT_AVAILABLE)


def test_partitions_without_a_leader_are_asked_again_alone_until_answered() -> None:
    admin = ScriptedAdmin([
        {("t", 0): 5, ("t", 1): NOT_LEADER, ("t", 2): NO_LEADER},
        {("t", 1): NOT_LEADER, ("t", 2): 7},
        {("t", 1): 0},
    ])
    assert reader_with(admin).earliest([("t", 0), ("t", 1), ("t", 2)]) == {("t", 0): 5, ("t", 1): 0, ("t", 2): 7}
    assert admin.asked == [[("t", 0), ("t", 1), ("t", 2)], [("t", 1), ("t", 2)], [("t", 1)]]


def test_a_partition_gone_meanwhile_is_left_out_without_asking_again() -> None:
    admin = ScriptedAdmin([{("t", 0): 3, ("t", 1): KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)}])
    assert reader_with(admin).end_offsets([("t", 0), ("t", 1)], earliest={("t", 0): 0, ("t", 1): 0}) == {("t", 0): 3}
    assert len(admin.asked) == 1


class FakeClock:
    """Stands in for the module's ``time``: sleeping advances the clock, so backoff is exact."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_leader_still_missing_at_the_offset_timeout_fails_with_the_brokers_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock()
    monkeypatch.setattr(offsets, "time", clock)
    admin = ScriptedAdmin([{("t", 0): NOT_LEADER}] * 100)
    with pytest.raises(KafkaException) as raised:
        reader_with(admin, timeout_ms=4_000).earliest([("t", 0)])
    assert raised.value.args[0].code() == KafkaError.NOT_LEADER_FOR_PARTITION
    # Backoff doubles from 100 ms up to 1 s; the wait that would cross the 4 s timeout is not taken.
    assert clock.slept == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert len(admin.asked) == 7


def test_a_non_retriable_error_fails_at_once() -> None:
    admin = ScriptedAdmin([{("t", 0): KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)}])
    with pytest.raises(KafkaException):
        reader_with(admin).earliest([("t", 0)])
    assert len(admin.asked) == 1
