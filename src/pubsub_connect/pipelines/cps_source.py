"""Cloud Pub/Sub source connector: Pub/Sub → bronze → outbox → Kafka.

1. ``pull`` — subscription → ``bronze/<name>``. Pub/Sub cannot replay a range, so this stage is
   not a Spark streaming source: ``tasks.max`` puller threads each pull a batch, keep its leases
   extended while it is written, append it to Delta, and only then ack. A crash before the commit
   means redelivery, never loss; a crash after the commit but before the ack means a redelivered
   duplicate in bronze, removed by the next stage. That is also why the appends carry no Delta
   transaction id: it could not prevent more duplicates than that, and costs a rebuild of the
   table's transaction state per append.
2. ``convert`` — bronze → ``outbox/<name>``: Google's message → record model
   (``model.cps_source``), one row per ``message_id`` (within the batch and against what the
   outbox already holds); bad messages → ``dlq/<name>``.
3. ``produce`` — outbox → ``kafka.topic`` in one Kafka transaction per micro-batch, with a
   marker that makes a replayed batch a no-op: no duplicates in Kafka for ``read_committed``
   consumers (:mod:`pubsub_connect.pipelines.kafka_produce`). A record Kafka refuses for good (a
   timestamp too far off, a record too large) is a ``dlq/<name>`` row with ``stage`` ``produce``
   under ``errors.tolerance=all``, and stops the connector naming its message under ``none``.

With ``pipeline.mode=fused`` one loop does all three per pulled window (:mod:`.fused_source`):
``FUSED_STAGES``.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pubsub_connect.config.loader import ConnectorConfig
from pubsub_connect.io.tables import DLQ, OUTBOX, TableRef
from pubsub_connect.model.cps_source.batch import KafkaOutboxConversion
from pubsub_connect.model.schemas import KAFKA_OUTBOX, PUBSUB_DLQ
from pubsub_connect.pipelines.context import PipelineContext, Stage
from pubsub_connect.pipelines.cps_pull import PullLoop, check_settings, ensure_bronze
from pubsub_connect.pipelines.dead_letters import append_converted
from pubsub_connect.pipelines.fused_source import SourceProducing, start_fused_source
from pubsub_connect.pipelines.kafka_produce import produce_stage
from pubsub_connect.pipelines.modes import convert_start, hand_back_to_staged
from pubsub_connect.pipelines.outbox_count import OutboxRowCount
from pubsub_connect.pipelines.produce_rejects import ProduceDeadLetters
from pubsub_connect.pipelines.pubsub_settings import cps_subscriber_config
from pubsub_connect.pipelines.writer_schemas import message_schema_definitions, written_schema_ids

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------
# Stage 1: pull
# --------------------------------------------------------------------------------------------


def pull(ctx: PipelineContext, config: ConnectorConfig) -> PullLoop:
    """The ``pull`` stage (:mod:`.cps_pull`), after a hand-back from the fused mode when that
    mode ran last."""
    check_settings(config)
    hand_back_to_staged(ctx, config, fused, first_stage="pull", source="the subscription")
    return PullLoop(ctx, config).start()


# --------------------------------------------------------------------------------------------
# Stage 2: convert
# --------------------------------------------------------------------------------------------


#: The outbox's columns, in its schema's order.
OUTBOX_COLUMNS = tuple(field.name for field in KAFKA_OUTBOX.fields)


def kafka_dead_letters(converted: DataFrame) -> DataFrame:
    """The dead-letter rows of a ``KafkaOutboxConversion(..., with_message=True)``'s rows (the outbox
    rows are the others, :data:`OUTBOX_COLUMNS` of them)."""
    return (converted.filter(F.col("error_class").isNotNull())
            .select(F.lit("convert").alias("stage"), "message_id", "subscription",
                    F.lit(None).cast("binary").alias("key"),
                    F.col("data").alias("value"), "attributes", "error_class", "error_message",
                    F.current_timestamp().alias("failed_at")))


def _seen_ids(ctx: PipelineContext, outbox: TableRef, dlq: TableRef, batch: DataFrame) -> DataFrame:
    """Message ids already converted, looked up only around the batch's publish times (a
    redelivered message keeps its publish time, so the range bounds the look-up)."""
    bounds = batch.agg(F.min("publish_time").alias("lo"), F.max("publish_time").alias("hi")).first()
    ids = []
    for table in (outbox, dlq):
        rows = ctx.store.read(table)
        time_column = "publish_time" if "publish_time" in rows.columns else None
        if time_column and bounds is not None and bounds.lo is not None:
            rows = rows.filter(F.col(time_column).between(bounds.lo, bounds.hi))
        ids.append(rows.select("message_id"))
    return ids[0].unionByName(ids[1]).distinct()


def convert(ctx: PipelineContext, config: ConnectorConfig) -> Any:
    settings = check_settings(config)
    bronze = ensure_bronze(ctx, config)
    outbox, dlq = (TableRef(kind, config.name) for kind in (OUTBOX, DLQ))
    ctx.store.ensure(outbox, KAFKA_OUTBOX)
    ctx.store.ensure(dlq, PUBSUB_DLQ)
    outbox_rows = OutboxRowCount(ctx.store, outbox)
    conversion = KafkaOutboxConversion(settings, with_message=True, schema_ids=written_schema_ids(config),
                                       message_schemas=message_schema_definitions(config))

    def process(batch: DataFrame, batch_id: int) -> None:
        batch = batch.persist()  # read by the look-up's time bounds, then by the conversion
        try:
            seen = _seen_ids(ctx, outbox, dlq, batch)
            fresh = batch.join(seen, "message_id", "left_anti")
            # the rows carry what the outbox and the dead letters need of the message, so
            # nothing joins back to the input; one job converts, appends and counts
            converted = conversion.apply(fresh, outbox_rows.current())
            append_converted(ctx, config, outbox_rows.append_batch, dlq, converted, kafka_dead_letters(converted),
                             batch_id, OUTBOX_COLUMNS, F.lit(True))
        finally:
            batch.unpersist()

    start = convert_start(ctx, config, first_stage="pull")
    return ctx.start_batches(ctx.read_table_stream(bronze, start), config, "convert", process)


# --------------------------------------------------------------------------------------------
# Stage 3: produce
# --------------------------------------------------------------------------------------------


def _produce_dead_letter_columns(config: ConnectorConfig) -> list[Any]:
    """A refused record's ``PUBSUB_DLQ`` columns: its message id, the connector's subscription,
    the record's key and value as they were to be produced, and its headers (the message's
    attributes, UTF-8, when ``kafka.record.headers`` put them there) as attributes."""
    attributes = F.map_from_entries(F.transform(
        "headers", lambda h: F.struct(h["key"].alias("key"), F.decode(h["value"], "UTF-8").alias("value"))))
    return ["message_id", F.lit(cps_subscriber_config(config).subscription_path).alias("subscription"),
            "key", "value", attributes.alias("attributes")]


#: The Cloud Pub/Sub source's dead letters of records Kafka refuses.
PRODUCE_DEAD_LETTERS = ProduceDeadLetters(PUBSUB_DLQ, _produce_dead_letter_columns, ("message_id",))


#: The order records are produced in: publish order, then message id (deterministic on replay:
#: one row per message id).
PRODUCE_ORDER = ("publish_time", "message_id")


def produce(ctx: PipelineContext, config: ConnectorConfig) -> Any:
    return produce_stage(ctx, config, KAFKA_OUTBOX, PRODUCE_ORDER, PRODUCE_DEAD_LETTERS)


def fused(ctx: PipelineContext, config: ConnectorConfig) -> PullLoop:
    """``pipeline.mode=fused``: each pulled window to bronze and, beside it, through the data
    model to Kafka in one transaction (:mod:`.fused_source`)."""
    producing = SourceProducing(columns=OUTBOX_COLUMNS, order=PRODUCE_ORDER, dead_letters=kafka_dead_letters,
                                rejects=PRODUCE_DEAD_LETTERS)
    return start_fused_source(ctx, config, producing, drain=(convert, produce))


STAGES = [Stage("pull", pull), Stage("convert", convert), Stage("produce", produce)]
FUSED_STAGES = [Stage("fused", fused, takes_over=("pull", "convert", "produce"))]
