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

With ``pipeline.mode=fused`` one streaming query does all three (:func:`fused`): ``FUSED_STAGES``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace
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
from pubsub_connect.io.tables import BRONZE, DLQ, OUTBOX, TableRef
from pubsub_connect.model.avro.writer import SchemaRegistrationError, avro_schema_text, schema_frame
from pubsub_connect.model.converters import REGISTRY_AVRO_CONVERTERS
from pubsub_connect.model.error_text import error_line
from pubsub_connect.model.frames import map_in_arrow
from pubsub_connect.model.lite.arrow import kafka_outbox_batch
from pubsub_connect.model.lite.source import (
    DEFAULT_SOURCE_CONVERTERS,
    SOURCE_KEY_SCHEMA,
    SOURCE_VALUE_SCHEMA,
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
from pubsub_connect.pipelines.fused_batch import fused_trigger, side_by_side
from pubsub_connect.pipelines.kafka_produce import indexed_rows, produce_batch, produce_stage, transactional_id
from pubsub_connect.pipelines.modes import FUSED, convert_start, hand_back_to_staged, take_over_from_staged
from pubsub_connect.pipelines.outbox_count import OutboxRowCount
from pubsub_connect.pipelines.produce_rejects import ProduceDeadLetters, apply_tolerance
from pubsub_connect.pipelines.pubsub_settings import lite_connection
from pubsub_connect.pipelines.writer_schemas import written_schema_ids

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


def batch_ends(batch: DataFrame) -> tuple[dict[int, int], int]:
    """``{partition: next offset}`` after a micro-batch (Lite offsets are dense), and its row
    count: one small aggregate per partition is all that reaches the driver."""
    rows = batch.groupBy("partition").agg(F.max("offset").alias("last"), F.count("*").alias("rows")).collect()
    return {int(r.partition): int(r["last"]) + 1 for r in rows}, sum(int(r["rows"]) for r in rows)


@dataclass(frozen=True)
class LiteLanding:
    """What the ``pull`` stage and the fused mode share: the Lite read (its start chosen as
    :func:`pull` explains), the bronze table and the subscription's cursors."""

    rows: DataFrame
    bronze: TableRef
    cursors: OffsetClient

    def commit_cursors(self, config: ConnectorConfig, batch_id: int, ends: dict[int, int]) -> None:
        """Only once a batch is durable in bronze may the subscription's cursors move."""
        try:
            self.cursors.commit(ends)
        except LiteIOError as exc:  # the checkpoint, not the cursor, is where the stage resumes
            log.warning("%s pull batch %d: %s (retried with the next batch)", config.name, batch_id, exc)


def lite_landing(ctx: PipelineContext, config: ConnectorConfig, shown_as: str = "pull") -> LiteLanding:
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
        ctx.progress(f"[{config.name}.{shown_as}] starting from the moved offsets {moved.read_text()}")
    else:
        floor = resume_floor(ctx, bronze)
    opts = read_options(ctx, config, floor)
    rows = read_lite(ctx.spark, opts).select(
        *[F.col(f.name).cast(f.dataType) for f in LITE_MESSAGE_FIELDS],
        F.current_timestamp().alias("ingest_time"))
    return LiteLanding(rows, bronze, OffsetClient(opts.connection, opts.subscription))


def pull(ctx: PipelineContext, config: ConnectorConfig) -> StreamingQuery:
    """The ``pull`` stage, after a hand-back from the fused mode when that mode ran last."""
    hand_back_to_staged(ctx, config, fused, first_stage="pull", source="the subscription")
    landing = lite_landing(ctx, config)

    def process(batch: DataFrame, batch_id: int) -> None:
        # Persisted: the Lite read (bounded by flow control and pipeline.max.records.per.batch)
        # runs once in the executors, for both the cursor positions and the append.
        batch = batch.persist()
        try:
            ends, _ = batch_ends(batch)
            if not ends:
                return
            ctx.store.append_batch(landing.bronze, batch, ctx.batch_app_id(config, "pull"), batch_id)
        finally:
            batch.unpersist()
        landing.commit_cursors(config, batch_id, ends)

    return ctx.start_batches(landing.rows, config, "pull", process)


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
    return _with_registry_frames(config, converters)


def _with_registry_frames(config: ConnectorConfig, converters: LiteSourceConverters) -> LiteSourceConverters:
    """A Schema Registry converter's schemas (``["null","bytes"]`` keys, ``"bytes"`` values) resolved
    once, when the stage starts (so the executors need no registry): their frames. A subject the
    registry refuses stops the connector in one line; an unreachable registry restarts the stage."""
    schema_ids = written_schema_ids(config)
    if schema_ids is None:
        return converters
    topic = str(config.get("kafka.topic"))
    frames: dict[str, bytes] = {}
    for side, schema in (("key", SOURCE_KEY_SCHEMA), ("value", SOURCE_VALUE_SCHEMA)):
        if config.get(f"{side}.converter") not in REGISTRY_AVRO_CONVERTERS:
            continue
        strategy = str(config.get(f"{side}.converter.{side}.subject.name.strategy"))
        try:
            frames[side] = schema_frame(schema_ids, side, strategy, topic, avro_schema_text(schema))
        except SchemaRegistrationError as exc:
            raise ConnectorError(f"{config.name}: {side}.converter: {exc}") from None
    return replace(converters, key_frame=frames.get("key"), value_frame=frames.get("value"))


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

    start = convert_start(ctx, config, first_stage="pull")
    return ctx.start_batches(ctx.read_table_stream(bronze, start), config, "convert", process)


# --------------------------------------------------------------------------------------------
# Stage 3: produce
# --------------------------------------------------------------------------------------------


#: The Lite source's dead letters of records Kafka refuses: the record and its Lite origin.
PRODUCE_DEAD_LETTERS = ProduceDeadLetters(
    LITE_SOURCE_DLQ, lambda _config: ["lite_partition", "lite_offset", "key", "value", "headers"],
    ("lite_partition", "lite_offset"))


#: Outbox rows in Lite partition/offset order: each Lite partition's order is kept.
PRODUCE_ORDER = ("lite_partition", "lite_offset")


def produce(ctx: PipelineContext, config: ConnectorConfig) -> StreamingQuery:
    return produce_stage(ctx, config, LITE_KAFKA_OUTBOX, PRODUCE_ORDER, PRODUCE_DEAD_LETTERS)


# --------------------------------------------------------------------------------------------
# pipeline.mode=fused
# --------------------------------------------------------------------------------------------


def fused(ctx: PipelineContext, config: ConnectorConfig) -> StreamingQuery:
    """``pipeline.mode=fused``: one streaming query over Lite, on the ``pull`` checkpoint, that
    appends each micro-batch to bronze (the pull stage's append, its app id and marks: exactly
    once) while it maps the same rows to Kafka records and produces them in one transaction with
    its marker (the produce stage's writer: a replayed batch that had committed is skipped). The
    cursors move after both.

    No outbox: the round-robin counter of records without a key is bronze's row count before the
    batch (every Lite message makes one record, so that is the staged outbox's count too), asked
    of the store once and then moved by each batch."""
    take_over_from_staged(ctx, config, drain=(convert, produce), drained="convert and produce")
    ctx.check_kafka("producer", config)
    landing = lite_landing(ctx, config, shown_as=FUSED)
    topic = str(config.get("kafka.topic"))
    converters = source_converters(config)
    dlq = TableRef(DLQ, config.name)
    counted: dict[str, int] = {}

    def produce_batch_of(batch: DataFrame, batch_id: int, start: int) -> None:
        records = lite_to_kafka_outbox(batch, kafka_partition_count(ctx.worker, topic), start, converters)
        identity = (transactional_id(config, FUSED), ctx.batch_app_id(config, "pull", f"-{FUSED}"))
        try:
            outcome = produce_batch(ctx, config, records, batch_id, PRODUCE_ORDER, identity=identity)
        except Exception as exc:
            raise ConnectorError(f"produce of batch {batch_id} to {topic} failed: {error_line(exc)}") from exc
        apply_tolerance(ctx, config, dlq, PRODUCE_DEAD_LETTERS, outcome, lambda: indexed_rows(records, PRODUCE_ORDER),
                        batch_id, app_id=ctx.batch_app_id(config, "pull", f"-{FUSED}-dlq"))

    def process(batch: DataFrame, batch_id: int) -> None:
        batch = batch.persist()
        try:
            ends, size = batch_ends(batch)
            if not ends:
                return
            app_id = ctx.batch_app_id(config, "pull")
            if "rows" not in counted:  # a replayed batch whose append committed is in the count already
                appended = ctx.store.committed_version(landing.bronze, app_id)
                before = ctx.store.row_count(landing.bronze)
                counted["rows"] = before - size if appended is not None and appended >= batch_id else before
            start = counted["rows"]
            side_by_side(lambda: ctx.store.append_batch(landing.bronze, batch, app_id, batch_id),
                         lambda: produce_batch_of(batch, batch_id, start), f"{config.name} fused batch {batch_id}")
            counted["rows"] = start + size
        except BaseException:
            counted.clear()  # asked of the store again: the append may or may not have committed
            raise
        finally:
            batch.unpersist()
        landing.commit_cursors(config, batch_id, ends)

    return ctx.start_batches(landing.rows, config, FUSED, process, checkpoint_of="pull", trigger=fused_trigger(ctx))


STAGES = [Stage("pull", pull), Stage("convert", convert), Stage("produce", produce)]
FUSED_STAGES = [Stage("fused", fused, takes_over=("pull", "convert", "produce"))]
