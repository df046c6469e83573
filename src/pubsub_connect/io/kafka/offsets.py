"""Kafka offsets for the fallback engine's source: their JSON form, rate limits, task planning,
and the driver's offset lookups.

Why together: a planned micro-batch is fully described by its start and end offsets (stored by
Spark in the checkpoint), and everything here is a pure function of them, except
:class:`OffsetReader`, which asks the brokers where partitions begin and end.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import InputPartition

from pubsub_connect.io.kafka.admin import admin_client
from pubsub_connect.io.kafka.read_options import KafkaReadOptions, OffsetJson, TopicPartitionKey

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

log = logging.getLogger(__name__)

#: Backoff between offset lookups of partitions whose leader is moving: Kafka's clients start at
#: ``retry.backoff.ms`` (100 ms) and grow to ``retry.backoff.max.ms`` (1 s).
_RETRY_BACKOFF_MIN_S = 0.1
_RETRY_BACKOFF_MAX_S = 1.0


def offsets_to_json(offsets: Mapping[TopicPartitionKey, int]) -> OffsetJson:
    """Canonical JSON form (sorted topics, numerically sorted partitions) so that equal offsets
    serialise equally — Spark decides "no new data" by comparing the serialised offsets."""
    result: OffsetJson = {}
    for topic, part in sorted(offsets):
        result.setdefault(topic, {})[str(part)] = int(offsets[(topic, part)])
    return result


def offsets_from_json(offsets: Mapping[str, Mapping[str, int]] | None) -> dict[TopicPartitionKey, int]:
    return {(topic, int(part)): int(off) for topic, parts in (offsets or {}).items()
            for part, off in parts.items()}


def rate_limit(start: Mapping[TopicPartitionKey, int], end: dict[TopicPartitionKey, int],
               max_records: int) -> dict[TopicPartitionKey, int]:
    """Cap ``end`` so that at most about ``max_records`` are read, shared by each partition's backlog.

    Same rule as Spark's ``maxOffsetsPerTrigger``: every partition gets its proportional share
    rounded down, but a partition with a share below one record still gets one, so small
    partitions are never starved.
    """
    backlog = {tp: end[tp] - start[tp] for tp in end if start.get(tp, -1) >= 0 and end[tp] > start[tp]}
    total = sum(backlog.values())
    if total <= max_records:
        return end
    capped = dict(end)
    for tp, size in backlog.items():
        share = max_records * size / total
        take = math.ceil(share) if share < 1 else math.floor(share)
        capped[tp] = start[tp] + min(size, take)
    return capped


class KafkaInputPartition(InputPartition):
    """One Spark task: the records ``[start, end)`` of one topic-partition (or a slice of it)."""

    def __init__(self, topic: str, partition: int, start: int, end: int):
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"KafkaInputPartition({self.topic}-{self.partition} [{self.start}, {self.end}))"


def plan_partitions(ranges: Sequence[tuple[TopicPartitionKey, int, int]],
                    min_partitions: int | None) -> list[KafkaInputPartition]:
    """One task per non-empty range; with ``minPartitions`` above the range count, large ranges
    are cut into near-equal slices in proportion to their size. Pure function of its input, so a
    replayed batch is split exactly like the original."""
    ranges = [r for r in ranges if r[2] > r[1]]
    if not min_partitions or len(ranges) >= min_partitions:
        return [KafkaInputPartition(t, p, s, e) for (t, p), s, e in ranges]
    total = sum(e - s for _, s, e in ranges)
    planned: list[KafkaInputPartition] = []
    for (topic, part), start, end in ranges:
        size = end - start
        pieces = max(1, min(size, math.ceil(size * min_partitions / total)))
        for i in range(pieces):
            lo = start + size * i // pieces
            hi = start + size * (i + 1) // pieces
            planned.append(KafkaInputPartition(topic, part, lo, hi))
    return planned


# --------------------------------------------------------------------------------------------
# Driver-side offset lookups
# --------------------------------------------------------------------------------------------


class OffsetReader:
    """Metadata and offset lookups for planning (driver side only, never in tasks).

    Ends come from ListOffsets at the consumer's isolation level, as Spark's connector gets
    them: the high watermark for ``read_uncommitted`` (the default), the last stable offset for
    ``read_committed``, so a planned range never ends inside an open transaction.
    """

    def __init__(self, opts: KafkaReadOptions):
        self.opts = opts
        self.timeout_s = opts.offset_timeout_ms / 1000
        self._admin: AdminClient = admin_client(opts.client)
        self._read_committed = str(opts.consumer_config().get("isolation.level")) == "read_committed"

    def close(self) -> None:
        """Nothing to close: an AdminClient has no group membership or open fetches."""

    def partitions(self) -> list[TopicPartitionKey]:
        """The topic-partitions the subscription covers right now, sorted."""
        metadata = self._admin.list_topics(timeout=self.timeout_s)
        found: list[TopicPartitionKey] = []
        for name, topic in metadata.topics.items():
            if topic.error is not None or not self.opts.matches(name):
                continue
            for part in topic.partitions:
                if self.opts.assign and (name, part) not in self.opts.assign:
                    continue
                found.append((name, part))
        return sorted(found)

    def _list_offsets(self, tps: Sequence[TopicPartitionKey], spec: str) -> dict[TopicPartitionKey, int]:
        """Each partition's offset by ``spec``; partitions answered with a retriable error are
        asked again until ``fetchOffset.timeoutMs``.

        Why: a partition whose leader is moving or not yet elected (a topic created a moment ago,
        a broker restarting) answers ``NOT_LEADER_FOR_PARTITION`` or ``LEADER_NOT_AVAILABLE``.
        Kafka's Java admin client retries those within its API timeout, which is what Spark's
        connector relies on; librdkafka hands them to the caller, so the retry lives here.
        """
        from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        which = OffsetSpec.earliest() if spec == "earliest" else OffsetSpec.latest()
        isolation = IsolationLevel.READ_COMMITTED if self._read_committed else IsolationLevel.READ_UNCOMMITTED
        deadline = time.monotonic() + self.timeout_s
        backoff_s = _RETRY_BACKOFF_MIN_S
        found: dict[TopicPartitionKey, int] = {}
        pending = list(tps)
        while pending:
            futures = self._admin.list_offsets({TopicPartition(t, p): which for t, p in pending},
                                               isolation_level=isolation, request_timeout=self.timeout_s)
            retry: list[TopicPartitionKey] = []
            for tp, fut in futures.items():
                key = (tp.topic, tp.partition)
                try:
                    found[key] = fut.result().offset
                except KafkaException as exc:
                    err = exc.args[0]
                    if _is_gone(err):
                        log.debug("%s-%d disappeared while listing offsets", tp.topic, tp.partition)
                    elif _is_leader_moving(err) and time.monotonic() + backoff_s < deadline:
                        retry.append(key)
                    else:
                        raise
            if retry:
                log.debug("listing %s offsets again for %d partition(s) without a leader", spec, len(retry))
                time.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, _RETRY_BACKOFF_MAX_S)
            pending = sorted(retry)
        return found

    def earliest(self, tps: Sequence[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        return self._list_offsets(tps, "earliest")

    def end_offsets(self, tps: Sequence[TopicPartitionKey],
                    earliest: Mapping[TopicPartitionKey, int] | None = None) -> dict[TopicPartitionKey, int]:
        """The end of each partition as of now; a partition that no longer exists (missing from
        ``earliest`` or from the answer) is left out."""
        lo = dict(earliest) if earliest is not None else self.earliest(tps)
        return self._list_offsets([tp for tp in tps if tp in lo], "latest")


def _is_gone(err: Any) -> bool:
    """Whether a client error means the topic/partition does not exist (any more)."""
    from confluent_kafka import KafkaError

    return err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION,
                          KafkaError._UNKNOWN_TOPIC)


def _is_leader_moving(err: Any) -> bool:
    """Whether a client error means the partition exists but has no reachable leader right now."""
    from confluent_kafka import KafkaError

    return err.retriable() or err.code() in (KafkaError.NOT_LEADER_FOR_PARTITION,
                                             KafkaError.LEADER_NOT_AVAILABLE)
