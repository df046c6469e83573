"""A source's replay: its bronze of Pub/Sub or Pub/Sub Lite messages produced to Kafka again,
through the connector's current data model and producer settings, each chunk in one Kafka
transaction.

Why transactions: the produce stage promises ``read_committed`` consumers every record once, and
a replay keeps that promise for what it sends. Each chunk is written by the produce stage's
writer (:mod:`pubsub_connect.pipelines.kafka_produce`) in one transaction with a marker that
names the replay and the chunk, so

- a replay cut short leaves its open transaction to be aborted: consumers see whole chunks only;
- the same replay run again (same connector, range, destination and chunk size: the same
  replay id) reads the markers and skips the chunks that committed, so it finishes what was cut
  short and sends nothing twice. That holds while the range's rows stay the same: a closed range
  (``--until`` in the past) on ``ingest_time`` is the one no later pull can add rows to.

Chunks are cut in the order records are produced (publish time and message id, or Lite partition
and offset), numbered once for the whole selection, so a chunk's records and their round-robin
partitions are the same on every run: the spread goes on from the records converted before the
chunk, as the convert stage's goes on from its outbox's rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.keys import CPS_SOURCE, LITE_SOURCE
from pubsub_connect.config.loader import ConnectorConfig
from pubsub_connect.io.tables import DLQ, TableRef
from pubsub_connect.model.error_text import error_line
from pubsub_connect.pipelines.context import ConnectorError, PipelineContext
from pubsub_connect.pipelines.kafka_produce import indexed_rows, produce_batch, transactional_id
from pubsub_connect.pipelines.produce_rejects import ProduceDeadLetters, apply_tolerance
from pubsub_connect.pipelines.replay.steps import ReplaySteps, Sent

#: The replay's name among a connector's Kafka transactions (``pubsub-connect-<name>-replay``).
STAGE = "replay"
#: A selected row's place in produce order, across the whole selection.
_ROW = "_replay_row"


@dataclasses.dataclass(frozen=True)
class SourceShape:
    """What differs between the two sources: the bronze columns records are produced in the order
    of (unique per message), the outbox's produce order, its dead letters' table and its refused
    records' rows."""

    bronze_order: Sequence[str]
    produce_order: Sequence[str]
    dlq_schema: StructType
    rejects: ProduceDeadLetters


class SourceReplay(ReplaySteps):
    """A source connector's replay steps: ``convert`` (rows, records converted before them) → outbox rows with
    ``error_class``; ``split`` → records and dead-letter rows; sent with ``config``'s ``kafka.topic``."""

    verbs = ("produce", "produced")

    def __init__(self, ctx: PipelineContext, config: ConnectorConfig, shape: SourceShape,
                 convert: Callable[[DataFrame, int], DataFrame],
                 split: Callable[[DataFrame], tuple[DataFrame, DataFrame]]):
        self.ctx, self.config, self.shape = ctx, config, shape
        self._convert, self._split = convert, split
        self.target = str(config.get("kafka.topic"))
        self.dlq_schema = shape.dlq_schema

    def chunks(self, selected: DataFrame, batch_size: int) -> Iterator[DataFrame]:
        # Numbered once over the selection's keys alone (a redelivered message, twice in bronze,
        # is one key), in one partition in produce order, as the produce stage's writer numbers a
        # batch: every batch_size-th key starts a chunk. A chunk is then a key range of the
        # selection, read when it is sent: nothing but those few keys is held, and both copies of
        # a redelivered message fall into one chunk, where the conversion keeps one.
        keys = _keys(selected, self.shape.bronze_order)
        numbered = (selected.select(*keys.values()).distinct().repartition(1).sortWithinPartitions(*keys)
                    .withColumn(_ROW, F.monotonically_increasing_id()))
        starts = numbered.filter(F.col(_ROW) % batch_size == 0).orderBy(_ROW).select(*keys).collect()
        for index, start in enumerate(starts):
            chunk = _from(keys, start)
            if index + 1 < len(starts):
                chunk = chunk & ~_from(keys, starts[index + 1])
            yield selected.filter(chunk)

    def convert(self, rows: DataFrame, converted_before: int) -> DataFrame:
        return self._convert(rows, converted_before)

    def split(self, converted: DataFrame) -> tuple[DataFrame, DataFrame]:
        return self._split(converted)

    def sendable(self, good: DataFrame) -> int:
        return good.count()

    def send(self, good: DataFrame, chunk: int, replay_id: str) -> Sent:
        order = self.shape.produce_order
        try:
            outcome = produce_batch(self.ctx, self.config, good, chunk, order,
                                    identity=(transactional_id(self.config, STAGE), replay_id))
        except Exception as exc:
            raise ConnectorError(f"replay of chunk {chunk + 1} to {self.target} failed: {error_line(exc)}") from exc
        refused = apply_tolerance(self.ctx, self.config, TableRef(DLQ, self.config.name), self.shape.rejects,
                                  outcome, lambda: indexed_rows(good, order), chunk,
                                  app_id=f"{self.config.name}/{STAGE}@{replay_id}-produce-dlq")
        return Sent(max(outcome.written, 0), refused, outcome.written < 0)


def _keys(rows: DataFrame, order: Sequence[str]) -> dict[str, Column]:
    """The produce-order key columns of ``rows``, by name; a time as microseconds since the epoch,
    so that a key collected to the driver compares exactly, whatever the session's time zone."""
    types = dict(rows.dtypes)
    return {name: (F.unix_micros(F.col(name)) if types[name] == "timestamp" else F.col(name)).alias(name)
            for name in order}


def _from(keys: dict[str, Column], start: Row) -> Column:
    """The rows at or after key ``start`` (compared column by column, in ``keys``' order)."""
    (name, key), *rest = keys.items()
    if not rest:
        return key >= start[name]
    return (key > start[name]) | ((key == start[name]) & _from(dict(rest), start))


def _aimed(config: ConnectorConfig, to_topic: str | None) -> ConnectorConfig:
    """``config`` producing to ``to_topic`` instead of its ``kafka.topic``."""
    if not to_topic:
        return config
    topic = dataclasses.replace(config.settings["kafka.topic"], value=to_topic, origin="--to-topic")
    return dataclasses.replace(config, settings={**config.settings, "kafka.topic": topic})


def source_replay(ctx: PipelineContext, config: ConnectorConfig, to_topic: str | None = None) -> SourceReplay:
    """The connector's replay steps with its current settings, to ``to_topic`` if given (a Kafka
    topic that must exist). Column expressions: a Spark session must be running."""
    config = _aimed(config, to_topic)
    ctx.check_kafka("producer", config)
    if config.kind == CPS_SOURCE:
        return _cps_source(ctx, config)
    if config.kind == LITE_SOURCE:
        return _lite_source(ctx, config)
    raise ConfigError(f"{config.name}: a {config.kind} is not a Cloud Pub/Sub or Lite source")


def _cps_source(ctx: PipelineContext, config: ConnectorConfig) -> SourceReplay:
    from pubsub_connect.model.cps_source.batch import KafkaOutboxConversion
    from pubsub_connect.model.schemas import PUBSUB_DLQ
    from pubsub_connect.pipelines.cps_pull import check_settings
    from pubsub_connect.pipelines.cps_source import (
        OUTBOX_COLUMNS,
        PRODUCE_DEAD_LETTERS,
        PRODUCE_ORDER,
        kafka_dead_letters,
    )
    from pubsub_connect.pipelines.writer_schemas import message_schema_definitions, written_schema_ids

    conversion = KafkaOutboxConversion(check_settings(config), with_message=True,
                                       schema_ids=written_schema_ids(config),
                                       message_schemas=message_schema_definitions(config))

    def split(converted: DataFrame) -> tuple[DataFrame, DataFrame]:
        return (converted.filter(F.col("error_class").isNull()).select(*OUTBOX_COLUMNS),
                kafka_dead_letters(converted))

    shape = SourceShape(PRODUCE_ORDER, PRODUCE_ORDER, PUBSUB_DLQ, PRODUCE_DEAD_LETTERS)
    return SourceReplay(ctx, config, shape, conversion.apply, split)


def _lite_source(ctx: PipelineContext, config: ConnectorConfig) -> SourceReplay:
    from pubsub_connect.model.schemas import LITE_SOURCE_DLQ
    from pubsub_connect.pipelines.lite_source import (
        PRODUCE_DEAD_LETTERS,
        PRODUCE_ORDER,
        kafka_partition_count,
        lite_to_kafka_outbox,
        source_converters,
    )

    converters = source_converters(config)
    partitions = kafka_partition_count(ctx.worker, str(config.get("kafka.topic")))

    def convert(rows: DataFrame, converted_before: int) -> DataFrame:
        # every Lite message makes a record: nothing fails here (Kafka may still refuse one)
        return (lite_to_kafka_outbox(rows, partitions, converted_before, converters)
                .withColumn("error_class", F.lit(None).cast("string")))

    def split(converted: DataFrame) -> tuple[DataFrame, DataFrame]:
        return converted.drop("error_class"), converted.limit(0)

    shape = SourceShape(("partition", "offset"), PRODUCE_ORDER, LITE_SOURCE_DLQ, PRODUCE_DEAD_LETTERS)
    return SourceReplay(ctx, config, shape, convert, split)
