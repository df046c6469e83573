"""A sink's replay: its bronze of Kafka records published again to Cloud Pub/Sub or Pub/Sub Lite,
through the connector's current data model and publisher settings, at least once (as its
publish stage)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.keys import CPS_SINK, LITE_SINK
from pubsub_connect.config.loader import ConnectorConfig
from pubsub_connect.model.schemas import KAFKA_DLQ
from pubsub_connect.pipelines.replay.steps import ReplaySteps, Sent


class SinkReplay(ReplaySteps):
    """A sink connector's replay steps: its data model, the split into messages and dead
    letters (``KAFKA_DLQ``-shaped), and its publisher, aimed at ``target``."""

    dlq_schema = KAFKA_DLQ
    verbs = ("publish", "published")

    def __init__(self, convert: Callable[[DataFrame], DataFrame],
                 split: Callable[[DataFrame], tuple[DataFrame, DataFrame]], publish: Callable[[DataFrame], int],
                 target: str):
        self._convert, self._split, self._publish = convert, split, publish
        self.target = target

    def chunks(self, selected: DataFrame, batch_size: int) -> Iterator[DataFrame]:
        for condition in offset_chunks(selected, batch_size):
            yield selected.filter(condition)

    def convert(self, rows: DataFrame, converted_before: int) -> DataFrame:
        return self._convert(rows)

    def split(self, converted: DataFrame) -> tuple[DataFrame, DataFrame]:
        return self._split(converted)

    def sendable(self, good: DataFrame) -> int:
        return good.filter(F.col("data").isNotNull()).count()

    def send(self, good: DataFrame, chunk: int, replay_id: str) -> Sent:
        return Sent(self._publish(good))


def sink_replay(config: ConnectorConfig, to_topic: str | None = None) -> SinkReplay:
    """The connector's replay steps with its current settings; ``to_topic`` aims them elsewhere.
    Its conversion is built of column expressions, so a Spark session must be running."""
    tasks = int(config.get("tasks.max"))
    if config.kind == CPS_SINK:
        from pubsub_connect.model.cps_sink.batch import CpsSinkConversion
        from pubsub_connect.pipelines.cps_sink import publish_to_pubsub, sink_settings, split_pubsub_outbox
        from pubsub_connect.pipelines.pubsub_settings import cps_publisher_config
        from pubsub_connect.pipelines.writer_schemas import body_schema_check, writer_schema_lookup

        publisher = cps_publisher_config(config)
        if to_topic:
            publisher = dataclasses.replace(publisher, topic=to_topic)
        conversion = CpsSinkConversion(sink_settings(config), schemas=writer_schema_lookup(config),
                                       body_schemas=body_schema_check(config))
        return SinkReplay(conversion.to_outbox, split_pubsub_outbox,
                          lambda rows: publish_to_pubsub(rows, publisher, tasks), publisher.topic_path)
    if config.kind == LITE_SINK:
        from pubsub_connect.io.pubsublite.admin import topic_partition_count
        from pubsub_connect.pipelines.lite_sink import (
            LiteSinkSettings,
            lite_conversion,
            publish_to_lite,
            split_lite_outbox,
        )

        settings = LiteSinkSettings.from_connector(config)
        if to_topic:
            settings = dataclasses.replace(settings, topic_path=settings.connection.topic_path(to_topic))

        def publish(rows: DataFrame) -> int:
            return publish_to_lite(rows, settings, topic_partition_count(settings.connection, settings.topic_path),
                                   tasks)

        return SinkReplay(lite_conversion(config), split_lite_outbox, publish, settings.topic_path)
    raise ConfigError(f"{config.name}: a {config.kind} is not a Cloud Pub/Sub or Lite sink")


def offset_chunks(selected: DataFrame, batch_size: int) -> list[Column]:
    """Conditions that cut the selection into chunks of at most ``batch_size`` offsets per
    partition (one small aggregate job: each partition's first and last selected offset)."""
    bounds = (selected.groupBy("topic", "partition").agg(F.min("offset").alias("lo"), F.max("offset").alias("hi"))
              .orderBy("topic", "partition").collect())
    if not bounds:
        return []
    steps = max((row.hi - row.lo) // batch_size + 1 for row in bounds)
    chunks = []
    for step in range(steps):
        parts = []
        for row in bounds:
            first = row.lo + step * batch_size
            if first <= row.hi:
                last = min(row.hi, first + batch_size - 1)
                parts.append((F.col("topic") == row.topic) & (F.col("partition") == row.partition)
                             & F.col("offset").between(first, last))
        chunk = parts[0]
        for part in parts[1:]:
            chunk = chunk | part
        chunks.append(chunk)
    return chunks
