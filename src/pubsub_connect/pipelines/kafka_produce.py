"""The produce stage shared by the source connectors: ``outbox/<name>`` → ``kafka.topic``.

Why shared: the Cloud Pub/Sub source and the Lite source end the same way — each micro-batch of
the outbox goes to Kafka in one transaction with its marker (:mod:`pubsub_connect.io.kafka.transactions`),
so ``read_committed`` consumers see every record once. They differ only in the order records
must keep. The batch is brought into one Spark partition in that order and written by one
executor task; the driver only collects the written count.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from pubsub_connect.config.loader import ConnectorConfig
from pubsub_connect.io.kafka.transactions import RECORD_COLUMNS, TransactionalPartitionWriter
from pubsub_connect.io.tables import OUTBOX, TableRef
from pubsub_connect.pipelines.context import ConnectorError, PipelineContext

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

STAGE = "produce"


def producer_config(ctx: PipelineContext, config: ConnectorConfig) -> dict[str, str]:
    """confluent-kafka producer settings: worker ``producer.*`` then ``producer.override.*``."""
    return ctx.librdkafka_client("producer", config)


def transactional_id(config: ConnectorConfig) -> str:
    return f"pubsub-connect-{config.name}-produce"


def record_rows(batch: DataFrame, order: Sequence[str]) -> DataFrame:
    """The batch as :data:`RECORD_COLUMNS` in one partition, in ``order`` (deterministic, so a
    replayed batch is the same sequence of records)."""
    return (batch.repartition(1).sortWithinPartitions(*order)
            .select("key", "value", "headers", "partition",
                    F.unix_millis("timestamp").alias("timestamp_ms"))
            .select(*RECORD_COLUMNS))


def produce_batch(ctx: PipelineContext, config: ConnectorConfig, batch: DataFrame, batch_id: int,
                  order: Sequence[str]) -> int:
    """Write one micro-batch in one transaction; returns the records written (-1: a replay that
    had committed, 0: nothing to write)."""
    writer = TransactionalPartitionWriter(
        client_config=tuple(sorted(producer_config(ctx, config).items())),
        transactional_id=transactional_id(config),
        topic=str(config.get("kafka.topic")),
        marker_topic=str(ctx.worker.get("pipeline.offsets.topic")),
        sequence=ctx.batch_app_id(config, STAGE),
        batch_id=batch_id,
    )
    rows = record_rows(batch, order).mapInArrow(writer, "written long").collect()
    return sum(int(row.written) for row in rows) if rows else 0


def produce_stage(ctx: PipelineContext, config: ConnectorConfig, outbox_schema: StructType,
                  order: Sequence[str]) -> StreamingQuery:
    ctx.check_kafka("producer", config)
    outbox = TableRef(OUTBOX, config.name)
    ctx.store.ensure(outbox, outbox_schema)
    topic = config.get("kafka.topic")

    def process(batch: DataFrame, batch_id: int) -> None:
        try:
            written = produce_batch(ctx, config, batch, batch_id, order)
        except Exception as exc:
            raise ConnectorError(f"produce of batch {batch_id} to {topic} failed: {exc}") from exc
        log.info("%s produce batch %d: %s", config.name, batch_id,
                 "already committed, skipped" if written < 0 else f"{written} records")

    return ctx.start_batches(ctx.read_table_stream(outbox), config, STAGE, process)
