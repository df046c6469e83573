"""Pub/Sub Lite source connector: Pub/Sub Lite → bronze → outbox → Kafka.

1. ``pull`` — the subscription's partitions → ``bronze/<name>``. Lite is replayable, so this
   stage is a Spark streaming query over the Lite data source (:mod:`pubsub_connect.io.
   lite_source`): each micro-batch is a set of per-partition offset ranges recorded in the
   checkpoint before it is read, appended exactly once (app id ``<name>/pull``), and only
   then are the ranges' ends committed to Lite as the subscription's cursors. A crash before
   the append replays the same ranges; after it, the replayed append is skipped and the cursor
   commit repeated. So bronze holds every message exactly once, and the cursors (which
   Google's tools and a fresh checkpoint start from) never pass what is durable.
2. ``convert`` — bronze → ``outbox/<name>``: Google's message → record mapping
   (``model.lite``: empty key → null, attributes → repeated bytes headers, event time else
   publish time), serialized like Connect's worker does (``key.converter``, ``value.converter``,
   ``header.converter``: Base64 header text by default), with an explicit Kafka partition: same
   serialized key → same partition (Kafka's murmur2), null keys round-robin, continuing across
   batches. The mapping is total (every Lite message makes a Kafka record), so this stage has
   no dead letters.
3. ``produce`` — outbox → ``kafka.topic`` in one Kafka transaction per micro-batch with a marker
   that makes a replayed batch a no-op (``io.kafka.transactions``): exactly once for ``read_committed``
   consumers. A record Kafka refuses for good (an event time too far off, a record too large)
   is a ``dlq/<name>`` row (``LITE_SOURCE_DLQ``) under ``errors.tolerance=all``, and stops the
   connector naming its Lite partition and offset under ``none``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from pubsub_connect.config.loader import ConnectorConfig, WorkerConfig
from pubsub_connect.io import checkpoints
from pubsub_connect.io.checkpoints import lite_start_path
from pubsub_connect.io.kafka.admin import partition_count
from pubsub_connect.io.pubsublite.connection import LiteIOError
from pubsub_connect.io.pubsublite.data_source import read_lite
from pubsub_connect.io.pubsublite.offsets import OffsetClient
from pubsub_connect.io.pubsublite.read_options import LiteReadOptions
from pubsub_connect.io.tables import BRONZE, OUTBOX, TableRef
from pubsub_connect.model.frames import map_in_arrow
from pubsub_connect.model.lite.arrow import kafka_outbox_batch
from pubsub_connect.model.lite.source import (
    DEFAULT_SOURCE_CONVERTERS,
    LiteSourceConverters,
    UnsupportedLiteSourceConverter,
)
from pubsub_connect.model.schemas import (
    LITE_BRONZE,
    LITE_KAFKA_OUTBOX,
    LITE_MESSAGE_FIELDS,
    LITE_SOURCE_DLQ,
    to_arrow,
)
from pubsub_connect.pipelines.context import ConnectorError, PipelineContext, Stage, librdkafka_client
from pubsub_connect.pipelines.kafka_produce import produce_stage
from pubsub_connect.pipelines.outbox_count import OutboxRowCount
from pubsub_connect.pipelines.produce_rejects import ProduceDeadLetters
from pubsub_connect.pipelines.pubsub_settings import lite_connection

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

_MESSAGE_COLUMNS = [f.name for f in LITE_MESSAGE_FIELDS]


# --------------------------------------------------------------------------------------------
# Stage 1: pull
# --------------------------------------------------------------------------------------------


def resume_floor(ctx: PipelineContext, bronze: TableRef) -> dict[int, int]:
    """``{partition: 1 + highest offset in bronze}``: where a *new* checkpoint must start at the
    earliest, so that losing the pull checkpoint does not land messages in bronze twice."""
    if ctx.store.row_count(bronze) == 0:
        return {}
    rows = ctx.store.read(bronze).groupBy("partition").agg(F.max("offset").alias("last")).collect()
    return {int(r.partition): int(r["last"]) + 1 for r in rows}


def read_options(ctx: PipelineContext, config: ConnectorConfig, floor: dict[int, int]) -> LiteReadOptions:
    conn = lite_connection(config)
    return LiteReadOptions(
        connection=conn,
        subscription=conn.subscription_path(str(config.get("pubsublite.subscription"))),
        flow_messages=int(config.get("pubsublite.partition_flow_control.messages")),
        flow_bytes=int(config.get("pubsublite.partition_flow_control.bytes")),
        max_messages_per_trigger=int(ctx.worker.get("pipeline.max.records.per.batch")),
        starting=floor,
        until_heads=ctx.once,
    )


def batch_ends(batch: DataFrame) -> dict[int, int]:
    """``{partition: next offset}`` after a micro-batch (Lite offsets are dense): one small
    aggregate per partition is all that reaches the driver."""
    rows = batch.groupBy("partition").agg(F.max("offset").alias("last")).collect()
    return {int(r.partition): int(r["last"]) + 1 for r in rows}


def pull(ctx: PipelineContext, config: ConnectorConfig) -> StreamingQuery:
    bronze = TableRef(BRONZE, config.name)
    ctx.store.ensure(bronze, LITE_BRONZE)
    checkpoint = ctx.store.checkpoint(config.name, "pull")
    moved = lite_start_path(checkpoint) if "://" not in checkpoint else None
    if checkpoints.started(checkpoint):
        floor: dict[int, int] = {}
        if moved is not None:
            moved.unlink(missing_ok=True)  # the checkpoint has taken over from the moved start
    elif moved is not None and moved.is_file():
        # offsets moved by the offsets tools (the cursors are committed there): start exactly
        # there, even behind what bronze holds, as the user asked
        floor = {}
        ctx.progress(f"[{config.name}.pull] starting from the moved offsets {moved.read_text()}")
    else:
        floor = resume_floor(ctx, bronze)
    opts = read_options(ctx, config, floor)
    cursors = OffsetClient(opts.connection, opts.subscription)
    landed = read_lite(ctx.spark, opts).select(
        *[F.col(f.name).cast(f.dataType) for f in LITE_MESSAGE_FIELDS],
        F.current_timestamp().alias("ingest_time"))

    def process(batch: DataFrame, batch_id: int) -> None:
        # Persisted: the Lite read (bounded by flow control and pipeline.max.records.per.batch)
        # runs once in the executors, for both the cursor positions and the append.
        batch = batch.persist()
        try:
            ends = batch_ends(batch)
            if not ends:
                return
            ctx.store.append_batch(bronze, batch, ctx.batch_app_id(config, "pull"), batch_id)
        finally:
            batch.unpersist()
        try:  # durable in bronze: only now may the subscription's cursors move
            cursors.commit(ends)
        except LiteIOError as exc:  # the checkpoint, not the cursor, is where this stage resumes
            log.warning("%s pull batch %d: %s (retried with the next batch)", config.name, batch_id, exc)

    return ctx.start_batches(landed, config, "pull", process)


# --------------------------------------------------------------------------------------------
# Stage 2: convert
# --------------------------------------------------------------------------------------------


def kafka_partition_count(worker: WorkerConfig, topic: str) -> int:
    """Partitions of ``kafka.topic`` now (explicit partitions need the count)."""
    count = partition_count(librdkafka_client(worker, "producer"), topic)
    if count is None:
        raise ConnectorError(f"Kafka topic {topic} (kafka.topic) does not exist: create it first")
    return count


@dataclass(frozen=True)
class OutboxPartition:
    """``mapInArrow`` function: a whole micro-batch of bronze rows (one Spark partition, in Lite
    partition/offset order) → Kafka outbox rows. The round-robin counter of null keys runs from
    ``round_robin_start`` through the batch in that order, so a replayed batch maps the same."""

    num_partitions: int
    round_robin_start: int
    converters: LiteSourceConverters = DEFAULT_SOURCE_CONVERTERS

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        counter = self.round_robin_start
        schema = to_arrow(LITE_KAFKA_OUTBOX)
        for chunk in batches:
            if chunk.num_rows == 0:
                continue
            out, counter = kafka_outbox_batch(chunk, num_partitions=self.num_partitions, round_robin_start=counter,
                                              converters=self.converters)
            yield pa.Table.from_batches([out]).cast(schema).to_batches()[0]


def lite_to_kafka_outbox(bronze_rows: DataFrame, num_partitions: int, round_robin_start: int,
              converters: LiteSourceConverters = DEFAULT_SOURCE_CONVERTERS) -> DataFrame:
    """Bronze rows → Kafka outbox rows (``LITE_KAFKA_OUTBOX``), computed in one executor task."""
    ordered = bronze_rows.select(*_MESSAGE_COLUMNS).repartition(1).sortWithinPartitions("partition", "offset")
    return ordered.mapInArrow(OutboxPartition(num_partitions, round_robin_start, converters), LITE_KAFKA_OUTBOX)


def lite_to_kafka_outbox_stream(bronze_rows: DataFrame, num_partitions: int,
                     converters: LiteSourceConverters = DEFAULT_SOURCE_CONVERTERS) -> DataFrame:
    """Bronze rows → Kafka outbox rows for a *streaming* conversion (a declarative pipeline's
    streaming table), which has no order over a micro-batch and no counter carried from one to
    the next: as :func:`lite_to_kafka_outbox`, except that a record without a key goes to partition
    ``pmod(xxhash64(lite_partition, lite_offset), num_partitions)`` instead of the next one in
    round-robin order: as even a spread, and the same on every replay."""
    rows = map_in_arrow(bronze_rows.select(*_MESSAGE_COLUMNS), OutboxPartition(num_partitions, 0, converters),
                        LITE_KAFKA_OUTBOX, StructType(LITE_MESSAGE_FIELDS))
    spread = F.pmod(F.xxhash64("lite_partition", "lite_offset"), F.lit(num_partitions)).cast("int")
    return rows.withColumn("partition", F.when(F.col("key").isNull(), spread).otherwise(F.col("partition")))


def source_converters(config: ConnectorConfig) -> LiteSourceConverters:
    """The connector's ``key.converter``, ``value.converter`` and ``header.converter``, checked:
    one that cannot serialize Lite's bytes stops the connector at start-up, not per record."""
    converters = LiteSourceConverters(
        key_converter=str(config.get("key.converter")),
        key_schemas_enable=bool(config.get("key.converter.schemas.enable")),
        value_converter=str(config.get("value.converter")),
        value_schemas_enable=bool(config.get("value.converter.schemas.enable")),
        header_converter=str(config.get("header.converter")),
    )
    try:
        converters.check()
    except UnsupportedLiteSourceConverter as exc:
        raise ConnectorError(f"{config.name}: {exc}") from None
    return converters


def convert(ctx: PipelineContext, config: ConnectorConfig) -> StreamingQuery:
    bronze, outbox = TableRef(BRONZE, config.name), TableRef(OUTBOX, config.name)
    ctx.store.ensure(bronze, LITE_BRONZE)
    ctx.store.ensure(outbox, LITE_KAFKA_OUTBOX)
    topic = str(config.get("kafka.topic"))
    converters = source_converters(config)
    outbox_rows = OutboxRowCount(ctx.store, outbox)

    def process(batch: DataFrame, batch_id: int) -> None:
        # the outbox size as round-robin start: deterministic when this batch is replayed
        out = lite_to_kafka_outbox(batch, kafka_partition_count(ctx.worker, topic), outbox_rows.current(),
                                   converters)
        outbox_rows.append_batch(out, ctx.batch_app_id(config, "convert"), batch_id)

    return ctx.start_batches(ctx.read_table_stream(bronze), config, "convert", process)


# --------------------------------------------------------------------------------------------
# Stage 3: produce
# --------------------------------------------------------------------------------------------


#: The Lite source's dead letters of records Kafka refuses: the record and its Lite origin.
PRODUCE_DEAD_LETTERS = ProduceDeadLetters(
    LITE_SOURCE_DLQ, lambda _config: ["lite_partition", "lite_offset", "key", "value", "headers"],
    ("lite_partition", "lite_offset"))


def produce(ctx: PipelineContext, config: ConnectorConfig) -> StreamingQuery:
    """Outbox rows in Lite partition/offset order: each Lite partition's order is kept."""
    return produce_stage(ctx, config, LITE_KAFKA_OUTBOX, ("lite_partition", "lite_offset"), PRODUCE_DEAD_LETTERS)


STAGES = [Stage("pull", pull), Stage("convert", convert), Stage("produce", produce)]
