"""The produce stage shared by the source connectors: ``outbox/<name>`` → ``kafka.topic``.

Why shared: the Cloud Pub/Sub source and the Lite source end the same way — each micro-batch of
the outbox goes to Kafka in one transaction with its marker (:mod:`pubsub_connect.io.kafka.transactions`),
so ``read_committed`` consumers see every record once. They differ only in the order records
must keep. The batch is brought into one Spark partition in that order and written by one
executor task; the driver only collects the outcome: the written count, and the row indices and
error codes of records Kafka refused for good, which become dead letters or a one-line stop
(:mod:`pubsub_connect.pipelines.produce_rejects`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from pubsub_connect.config.loader import ConnectorConfig
from pubsub_connect.io.kafka.transactions import OUTCOME_SCHEMA, RECORD_COLUMNS, TransactionalPartitionWriter
from pubsub_connect.io.tables import DLQ, OUTBOX, TableRef
from pubsub_connect.pipelines.context import ConnectorError, PipelineContext
from pubsub_connect.pipelines.produce_rejects import ROW_INDEX, ProduceDeadLetters, ProduceOutcome, apply_tolerance

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

STAGE = "produce"


def producer_config(ctx: PipelineContext, config: ConnectorConfig) -> dict[str, str]:
    """confluent-kafka producer settings: worker ``producer.*`` then ``producer.override.*``."""
    return ctx.librdkafka_client("producer", config)


def transactional_id(config: ConnectorConfig, stage: str = STAGE) -> str:
    """The ``transactional.id`` of a connector's stage that writes Kafka transactions (the produce
    stage, or a fused mode)."""
    return f"pubsub-connect-{config.name}-{stage}"


def in_produce_order(batch: DataFrame, order: Sequence[str]) -> DataFrame:
    """The batch in one partition, in ``order``: the order its records are produced in.
    ``order`` must be unique per row (deterministic, so a replayed batch is the same sequence
    of records, and a row index found by the writer names the same row when read again)."""
    return batch.repartition(1).sortWithinPartitions(*order)


def record_rows(batch: DataFrame, order: Sequence[str]) -> DataFrame:
    """The batch as :data:`RECORD_COLUMNS`, in produce order."""
    return (in_produce_order(batch, order)
            .select("key", "value", "headers", "partition", F.unix_millis("timestamp").alias("timestamp_ms"))
            .select(*RECORD_COLUMNS))


def indexed_rows(batch: DataFrame, order: Sequence[str]) -> DataFrame:
    """The batch with :data:`~pubsub_connect.pipelines.produce_rejects.ROW_INDEX`, the row's
    place in produce order (the writer's index): in one partition ``monotonically_increasing_id``
    counts the rows from 0 in the order they come out of the sort."""
    return in_produce_order(batch, order).withColumn(ROW_INDEX, F.monotonically_increasing_id())


def produce_batch(ctx: PipelineContext, config: ConnectorConfig, batch: DataFrame, batch_id: int,
                  order: Sequence[str], identity: tuple[str, str] | None = None) -> ProduceOutcome:
    """Write one micro-batch in one transaction. ``written`` in the outcome: the records written
    (-1: a replay that had committed, 0: nothing to write); ``rejected``: the (row index, code)
    of each record Kafka refused for good; ``committed`` False when such a record kept the batch
    from committing (``errors.tolerance=none``). ``identity``: the ``transactional.id`` and the
    markers' sequence, when the batches are not the produce stage's (the fused source's)."""
    transactional, sequence = identity or (transactional_id(config), ctx.batch_app_id(config, STAGE))
    writer = TransactionalPartitionWriter(
        client_config=tuple(sorted(producer_config(ctx, config).items())),
        transactional_id=transactional,
        topic=str(config.get("kafka.topic")),
        marker_topic=str(ctx.worker.get("pipeline.offsets.topic")),
        sequence=sequence,
        batch_id=batch_id,
        commit_rejects=config.get("errors.tolerance") != "none",
    )
    rows = record_rows(batch, order).mapInArrow(writer, OUTCOME_SCHEMA).collect()
    if not rows:
        return ProduceOutcome(0, True)
    (row,) = rows
    return ProduceOutcome(int(row.written), bool(row.committed),
                          tuple((int(r["index"]), str(r["code"])) for r in row.rejected or ()))


def produce_stage(ctx: PipelineContext, config: ConnectorConfig, outbox_schema: StructType,
                  order: Sequence[str], dead_letters: ProduceDeadLetters) -> StreamingQuery:
    ctx.check_kafka("producer", config)
    outbox, dlq = TableRef(OUTBOX, config.name), TableRef(DLQ, config.name)
    ctx.store.ensure(outbox, outbox_schema)  # the dead letters' table only once Kafka refuses a record
    topic = config.get("kafka.topic")

    def process(batch: DataFrame, batch_id: int) -> None:
        try:
            outcome = produce_batch(ctx, config, batch, batch_id, order)
        except Exception as exc:
            raise ConnectorError(f"produce of batch {batch_id} to {topic} failed: {exc}") from exc
        dead = apply_tolerance(ctx, config, dlq, dead_letters, outcome, lambda: indexed_rows(batch, order), batch_id)
        log.info("%s produce batch %d: %s%s", config.name, batch_id,
                 "already committed, skipped" if outcome.written < 0 else f"{outcome.written} records",
                 f"; {dead} refused by Kafka, dead-lettered" if dead else "")

    return ctx.start_batches(ctx.read_table_stream(outbox), config, STAGE, process)
