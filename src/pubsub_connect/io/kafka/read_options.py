"""The source options of Spark's Kafka connector, parsed and validated once.

Why apart from the reader: the same parsed options serve the driver's planning
(:mod:`~pubsub_connect.io.kafka.offsets`), the tasks' reading
(:mod:`~pubsub_connect.io.kafka.partition_reader`) and the pipelines that look up a subscription's
partitions or a group's offsets, and both engines validate through them so that a bad option fails
the same way whichever connector would have run.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import StructType

from pubsub_connect.io.kafka.options import (
    SOURCE_FORBIDDEN,
    KafkaOptionsError,
    client_config,
    lower_keys,
    parse_bool,
    parse_positive_int,
    require_bootstrap_servers,
)
from pubsub_connect.model.schemas import KAFKA_RECORD_FIELDS

log = logging.getLogger(__name__)

#: Spark's Kafka source schema without headers (``includeHeaders=false``, the default).
KAFKA_SCHEMA_NO_HEADERS = StructType([f for f in KAFKA_RECORD_FIELDS if f.name != "headers"])
#: Spark's Kafka source schema with ``includeHeaders=true`` (the bronze table contract, ``model.schemas``).
KAFKA_SCHEMA = StructType(KAFKA_RECORD_FIELDS)

#: Offset sentinels of Spark's JSON offsets: -2 = earliest, -1 = latest.
EARLIEST = -2
LATEST = -1

TopicPartitionKey = tuple[str, int]
OffsetJson = dict[str, dict[str, int]]

_DEFAULT_GROUP_ID = "pubsub-connect-kafka-source"
_DEFAULT_POLL_TIMEOUT_MS = 120_000
_DEFAULT_OFFSET_TIMEOUT_MS = 60_000


class KafkaDataLossError(RuntimeError):
    """Records the query was supposed to read are gone (retention, topic recreated, truncation)."""


def _parse_offsets_option(key: str, raw: str | None, default: str) -> str | dict[TopicPartitionKey, int]:
    """``earliest`` / ``latest`` or Spark's per-partition JSON (``{"t":{"0":5,"1":-2}}``)."""
    if raw is None:
        return default
    text = raw.strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        parsed = json.loads(text)
        offsets: dict[TopicPartitionKey, int] = {}
        for topic, parts in parsed.items():
            for part, offset in parts.items():
                offsets[(str(topic), int(part))] = int(offset)
    except (ValueError, AttributeError, TypeError):
        raise KafkaOptionsError(
            f"option '{key}' must be 'earliest', 'latest' or JSON like "
            f"{{\"topic\":{{\"0\":23}}}}, got {raw!r}"
        ) from None
    return offsets


@dataclass(frozen=True)
class KafkaReadOptions:
    """The source options of Spark's Kafka connector, parsed and validated once.

    Validated eagerly by :func:`read_kafka` for both implementations so that a bad option fails
    the same way whichever connector would have run.
    """

    client: dict[str, str]
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: tuple[TopicPartitionKey, ...] = ()
    starting: str | dict[TopicPartitionKey, int] = "latest"
    ending: str | dict[TopicPartitionKey, int] = "latest"
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = _DEFAULT_POLL_TIMEOUT_MS
    offset_timeout_ms: int = _DEFAULT_OFFSET_TIMEOUT_MS

    @classmethod
    def parse(cls, options: Mapping[str, Any], *, streaming: bool,
              python_client: bool = True) -> KafkaReadOptions:
        """Validate ``options``; ``python_client=False`` (native connector) skips the translation
        to librdkafka names, since the JVM client understands the Java ones."""
        opts = lower_keys(options)
        strategies = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k, "").strip()]
        if len(strategies) != 1:
            raise KafkaOptionsError(
                "exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be set"
                + (f" (got {', '.join(strategies)})" if strategies else "")
            )
        for unsupported in ("startingtimestamp", "startingoffsetsbytimestamp", "endingtimestamp",
                            "endingoffsetsbytimestamp", "minoffsetspertrigger"):
            if unsupported in opts:
                raise KafkaOptionsError(f"option '{unsupported}' is not supported by the Python Kafka source")
        if python_client:
            client = client_config(opts, SOURCE_FORBIDDEN)
        else:
            for name, why in SOURCE_FORBIDDEN.items():
                if f"kafka.{name}" in opts:
                    raise KafkaOptionsError(f"Kafka option 'kafka.{name}' is not supported: {why}")
            require_bootstrap_servers(opts)
            client = {}
        subscribe: tuple[str, ...] = ()
        pattern: str | None = None
        assign: tuple[TopicPartitionKey, ...] = ()
        if strategies[0] == "subscribe":
            subscribe = tuple(sorted({t.strip() for t in opts["subscribe"].split(",") if t.strip()}))
            if not subscribe:
                raise KafkaOptionsError("option 'subscribe' must list at least one topic")
        elif strategies[0] == "subscribepattern":
            pattern = opts["subscribepattern"].strip()
            try:
                re.compile(pattern)
            except re.error as exc:
                raise KafkaOptionsError(f"option 'subscribePattern' is not a valid regex: {exc}") from None
        else:
            try:
                parsed = json.loads(opts["assign"])
                assign = tuple(sorted((str(t), int(p)) for t, parts in parsed.items() for p in parts))
            except (ValueError, AttributeError, TypeError):
                raise KafkaOptionsError(
                    f"option 'assign' must be JSON like {{\"topicA\":[0,1]}}, got {opts['assign']!r}"
                ) from None
        starting = _parse_offsets_option("startingOffsets", opts.get("startingoffsets"),
                                         "latest" if streaming else "earliest")
        ending = _parse_offsets_option("endingOffsets", opts.get("endingoffsets"), "latest")
        if streaming and "endingoffsets" in opts:
            raise KafkaOptionsError("option 'endingOffsets' is only valid for batch queries")
        if not streaming:
            if starting == "latest" or (isinstance(starting, dict) and LATEST in starting.values()):
                raise KafkaOptionsError("startingOffsets 'latest' (-1) is not allowed for batch queries")
            if ending == "earliest" or (isinstance(ending, dict) and EARLIEST in ending.values()):
                raise KafkaOptionsError("endingOffsets 'earliest' (-2) is not allowed for batch queries")
            if "maxoffsetspertrigger" in opts:
                raise KafkaOptionsError("option 'maxOffsetsPerTrigger' is only valid for streaming queries")
        poll_timeout = parse_positive_int(opts, "kafkaConsumer.pollTimeoutMs") or _DEFAULT_POLL_TIMEOUT_MS
        offset_timeout = parse_positive_int(opts, "fetchOffset.timeoutMs") or _DEFAULT_OFFSET_TIMEOUT_MS
        return cls(
            client=client,
            subscribe=subscribe,
            subscribe_pattern=pattern,
            assign=assign,
            starting=starting,
            ending=ending,
            max_offsets_per_trigger=parse_positive_int(opts, "maxOffsetsPerTrigger"),
            min_partitions=parse_positive_int(opts, "minPartitions"),
            fail_on_data_loss=parse_bool(opts, "failOnDataLoss", True),
            include_headers=parse_bool(opts, "includeHeaders", False),
            poll_timeout_ms=poll_timeout,
            offset_timeout_ms=offset_timeout,
        )

    @property
    def schema(self) -> StructType:
        return KAFKA_SCHEMA if self.include_headers else KAFKA_SCHEMA_NO_HEADERS

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` belongs to the subscription (a Java regex must match the whole name)."""
        if self.subscribe:
            return topic in self.subscribe
        if self.subscribe_pattern is not None:
            # Internal topics (__consumer_offsets, __transaction_state) are never subscribed,
            # like the Java consumer's exclude.internal.topics=true.
            return not topic.startswith("__") and re.fullmatch(self.subscribe_pattern, topic) is not None
        return any(t == topic for t, _ in self.assign)

    def consumer_config(self, **overrides: Any) -> dict[str, Any]:
        """A consumer that never joins a group nor commits: offsets live in the checkpoint.

        ``isolation.level`` defaults to the Java client's ``read_uncommitted`` (librdkafka's own
        default is ``read_committed``), so both connectors return the same records.
        """
        conf: dict[str, Any] = {"group.id": _DEFAULT_GROUP_ID, "isolation.level": "read_uncommitted",
                                **self.client}
        conf.update(
            {
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "error",  # an out-of-range position must surface, never reset
                "enable.partition.eof": True,
            }
        )
        conf.update(overrides)
        return conf


def report_data_loss(opts: KafkaReadOptions, message: str) -> None:
    """Spark's ``failOnDataLoss``: fail the query, or warn and go on."""
    if opts.fail_on_data_loss:
        raise KafkaDataLossError(
            f"{message}. Some data may have been lost. If you want the query to continue, set the "
            "source option failOnDataLoss=false."
        )
    log.warning("%s. Continuing because failOnDataLoss=false.", message)
