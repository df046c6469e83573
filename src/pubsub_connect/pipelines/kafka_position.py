"""Where a Kafka-reading stage starts, and the position it reports back to Kafka.

Why: a sink connector's position is its ingest checkpoint, but Kafka Connect kept it as the
offsets of consumer group ``connect-<name>``. So that moving from Kafka Connect (or from
pubsub-connect's own offsets tools, which write the same group) loses and repeats nothing:

- a sink with no checkpoint yet starts from the group's committed offsets; partitions without a
  commit start at ``consumer.auto.offset.reset`` (Connect's default ``earliest``);
- after each ingest batch is durably in bronze, its end offsets are committed to the group, so
  ``kafka-consumer-groups --describe --group connect-<name>`` shows the true lag.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence

from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.loader import ConnectorConfig, WorkerConfig
from pubsub_connect.io.kafka.groups import ConsumerGroupError, ConsumerGroupOffsets, Positions, connect_group
from pubsub_connect.io.kafka.offsets import OffsetReader
from pubsub_connect.io.kafka.read_options import EARLIEST, LATEST, KafkaReadOptions

TopicPartition = tuple[str, int]


def subscribed_partitions(options: Mapping[str, str]) -> list[TopicPartition]:
    """The topic-partitions a Kafka read with these options covers now (Spark requires JSON
    ``startingOffsets`` to name every one of them)."""
    reader = OffsetReader(KafkaReadOptions.parse(dict(options), streaming=True))
    try:
        return list(reader.partitions())
    finally:
        reader.close()


def starting_offsets(resume: Mapping[TopicPartition, int], subscribed: Sequence[TopicPartition],
                     default: str = "earliest") -> str:
    """Spark's ``startingOffsets``: the known position of each subscribed partition, ``default``
    (``earliest``/``latest``) for the others, or just ``default`` when none is known."""
    if not any(tp in resume for tp in subscribed):
        return default
    fallback = EARLIEST if default == "earliest" else LATEST
    doc: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(subscribed):
        doc.setdefault(topic, {})[str(partition)] = resume.get((topic, partition), fallback)
    return json.dumps(doc, separators=(",", ":"))


def auto_offset_reset(worker: WorkerConfig, config: ConnectorConfig) -> str:
    """``consumer.override.auto.offset.reset`` of the connector, else the worker's
    ``consumer.auto.offset.reset``, else Connect's default for sinks, ``earliest``."""
    value = config.passthrough.get("consumer.override.auto.offset.reset") \
        or worker.client_conf("consumer.").get("auto.offset.reset") or "earliest"
    value = value.strip().lower()
    if value not in ("earliest", "latest", "none"):
        raise ConfigError(f"{config.source}: auto.offset.reset={value!r} is not allowed (allowed: earliest, latest, "
                          "none)")
    return value


def offsets_json_positions(doc: object) -> Positions:
    """``{"topic": {"0": 12}}`` (a Kafka source's checkpoint offsets) → positions; Spark's
    sentinels (negative offsets) are no position."""
    positions: Positions = {}
    if isinstance(doc, dict):
        for topic, partitions in doc.items():
            for partition, offset in (partitions or {}).items():
                if int(offset) >= 0:
                    positions[(str(topic), int(partition))] = int(offset)
    return positions


def new_sink_start(worker: WorkerConfig, config: ConnectorConfig, client: Mapping[str, str],
                   read_options: Mapping[str, str]) -> tuple[str, str]:
    """``startingOffsets`` for a sink whose ingest has no checkpoint, and a line saying why."""
    reset = auto_offset_reset(worker, config)
    group = connect_group(config.name)
    subscribed = subscribed_partitions(read_options)
    # an unreadable group fails the stage start (restarted as a transient failure when Kafka says
    # so): taking it for empty would republish everything a Connect cut-over had delivered
    groups = ConsumerGroupOffsets(client, group)
    try:
        known = groups.read(subscribed)
    finally:
        groups.close()
    if not known:
        if reset == "none":
            raise ConfigError(f"{config.name}: consumer group {group} has no committed offsets for the subscribed "
                              "topics and auto.offset.reset=none")
        return reset, f"no offsets in consumer group {group}: starting at auto.offset.reset={reset}"
    if reset == "none" and len(known) < len(subscribed):
        missing = sorted(set(subscribed) - set(known))
        raise ConfigError(f"{config.name}: consumer group {group} has no committed offset for "
                          f"{missing[0][0]}-{missing[0][1]} and auto.offset.reset=none")
    where = ", ".join(f"{t}-{p}@{o}" for (t, p), o in sorted(known.items()))
    return starting_offsets(known, subscribed, "latest" if reset == "latest" else "earliest"), \
        f"starting from consumer group {group}: {where}"


class GroupCommitter:
    """Commits a sink's ingested position to ``connect-<name>`` after each ingest batch.

    A failed commit is reported once per streak and does not stop the connector: the checkpoint,
    not the group, is where the connector resumes (the group is for lag tooling and cut-overs)."""

    def __init__(self, client: Mapping[str, str], connector: str, progress: Callable[[str], None] = print):
        self.groups = ConsumerGroupOffsets(client, connect_group(connector))
        self.connector = connector
        self.progress = progress
        self.failing = False

    def close(self) -> None:
        self.groups.close()

    def commit(self, positions: Positions) -> None:
        try:
            self.groups.commit(positions)
        except ConsumerGroupError as exc:
            if not self.failing:
                self.progress(f"[{self.connector}.ingest] {exc} (the checkpoint keeps the position; retried with "
                              "the next batch)")
            self.failing = True
            return
        self.failing = False
