"""Cloud Pub/Sub sink connector: Kafka → bronze → outbox → Pub/Sub.

The stages (each a streaming query with its own checkpoint, each runnable alone):

1. ``ingest``  — Kafka ``topics``/``topics.regex`` → ``bronze/<name>`` (shared Kafka ingest);
2. ``convert`` — bronze → ``outbox/<name>``: Google's data model (``model.cps_sink``) as column
   expressions / Arrow batches; records that cannot be converted → ``dlq/<name>``, or, with
   ``errors.tolerance=none``, the connector stops naming the first such record;
3. ``publish`` — outbox → Pub/Sub (``BatchPublisher.publish_batches``: encoded requests without
   ordering keys, the official publisher with them). A micro-batch (and so the checkpoint)
   commits only after every message was accepted: at-least-once, no loss.

With ``pipeline.mode=fused`` one query does all three (:mod:`.fused_sink`): ``FUSED_STAGES``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pubsub_connect.config.loader import ConnectorConfig
from pubsub_connect.io.pubsub.publisher import PublisherConfig
from pubsub_connect.io.pubsub.publisher_pool import discard_publisher, shared_publisher
from pubsub_connect.io.tables import BRONZE, DLQ, OUTBOX, TableRef
from pubsub_connect.model.cps_sink.batch import CpsSinkConversion
from pubsub_connect.model.cps_sink.settings import CpsSinkSettings
from pubsub_connect.model.schemas import KAFKA_BRONZE, KAFKA_DLQ, PUBSUB_OUTBOX
from pubsub_connect.pipelines.context import PipelineContext, Stage
from pubsub_connect.pipelines.dead_letters import DeadLetterRows, append_converted
from pubsub_connect.pipelines.fused_sink import SinkPublishing, start_fused_sink
from pubsub_connect.pipelines.kafka_ingest import ingest
from pubsub_connect.pipelines.modes import convert_start, hand_back_to_staged
from pubsub_connect.pipelines.publish_stage import start_publishing
from pubsub_connect.pipelines.pubsub_settings import cps_publisher_config
from pubsub_connect.pipelines.writer_schemas import body_schema_check, writer_schema_lookup

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)


def sink_settings(config: ConnectorConfig) -> CpsSinkSettings:
    """The properties that shape messages, as the pure model's settings."""
    return CpsSinkSettings(
        message_body_name=str(config.get("messageBodyName")),
        metadata_publish=bool(config.get("metadata.publish")),
        headers_publish=bool(config.get("headers.publish")),
        ordering_key_source=str(config.get("orderingKeySource")),
        key_converter=str(config.get("key.converter")),
        value_converter=str(config.get("value.converter")),
        key_schemas_enable=bool(config.get("key.converter.schemas.enable")),
        value_schemas_enable=bool(config.get("value.converter.schemas.enable")),
        message_body_format=str(config.get("messageBodyFormat")),
    )


#: The outbox table's columns, in its order.
OUTBOX_COLUMNS = [f.name for f in PUBSUB_OUTBOX.fields]


def split_pubsub_outbox(converted: DataFrame) -> tuple[DataFrame, DataFrame]:
    """``to_outbox`` rows of a bronze micro-batch → (outbox rows, dead-letter rows)."""
    good = converted.filter(F.col("error_class").isNull() & F.col("data").isNotNull()).select(*OUTBOX_COLUMNS)
    return good, DeadLetterRows().of(converted)


def report_empty_records(config: ConnectorConfig, converted: DataFrame) -> None:
    """Records with a null value and no attributes publish nothing, as in the original (Pub/Sub
    refuses a message with neither); like the original, they leave a warning naming them (the
    first ten of a micro-batch)."""
    empty = converted.filter(F.col("error_class").isNull() & F.col("data").isNull())
    for row in empty.select("topic", "partition", "offset").orderBy("topic", "partition", "offset").limit(10).collect():
        log.warning("%s: record %s/%d@%d has no value and no attributes: not published", config.name, row.topic,
                    row.partition, row.offset)


def convert(ctx: PipelineContext, config: ConnectorConfig) -> StreamingQuery:
    start = convert_start(ctx, config)
    bronze, outbox, dlq = (TableRef(kind, config.name) for kind in (BRONZE, OUTBOX, DLQ))
    ctx.store.ensure(bronze, KAFKA_BRONZE)
    ctx.store.ensure(outbox, PUBSUB_OUTBOX)
    ctx.store.ensure(dlq, KAFKA_DLQ)
    # built once, applied to every micro-batch
    conversion = CpsSinkConversion(sink_settings(config), schemas=writer_schema_lookup(config),
                                   body_schemas=body_schema_check(config))
    dead_letters = DeadLetterRows()
    publishable = F.col("data").isNotNull()
    empty = F.col("error_class").isNull() & F.col("data").isNull()

    def append_converted_batch(converted: DataFrame, batch_id: int) -> None:
        found = append_converted(ctx, config, partial(ctx.store.append_batch, outbox), dlq, converted,
                                 dead_letters.of(converted), batch_id, OUTBOX_COLUMNS, publishable, empty=empty)
        if found["empty"]:
            report_empty_records(config, converted)

    def process(batch: DataFrame, batch_id: int) -> None:
        converted, cached = conversion.outbox_and_cache(batch)
        if cached is not None:
            cached.persist()
        try:
            append_converted_batch(converted, batch_id)
        finally:
            if cached is not None:
                cached.unpersist()

    return ctx.start_batches(ctx.read_table_stream(bronze, start), config, "convert", process)


class PubSubPublishPartition:
    """``mapInArrow`` function: publishes one Spark partition of outbox rows and yields how many
    were published. Raises (failing the task, hence the batch) unless every publish succeeded.

    The publisher is the worker process's shared one (``publisher_pool``): built by the first
    task, reused by the later tasks and micro-batches, discarded when a batch fails."""

    def __init__(self, publisher_config: PublisherConfig):
        self.publisher_config = publisher_config

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        try:
            stats = shared_publisher(self.publisher_config).publish_batches(batches)
        except BaseException:
            discard_publisher(self.publisher_config)
            raise
        yield pa.RecordBatch.from_pydict({"published": pa.array([stats.messages], pa.int64())})


def publish_to_pubsub(outbox_batch: DataFrame, publisher_config: PublisherConfig, tasks: int,
                      shuffled: bool = False) -> int:
    """Publish a micro-batch; returns the number of messages Pub/Sub accepted.

    With ordering keys, rows of one key go to one task in Kafka order (``topic, partition,
    offset``), and the client publishes them in that order; batches are published one after the
    other, so the order holds across micro-batches too. Without them nothing is shuffled (unless
    ``shuffled``: see :class:`~pubsub_connect.pipelines.fused_sink.SinkPublishing`): the outbox
    files' partitions are merged down to ``tasks`` publishing tasks (``coalesce``), since moving
    every payload through a shuffle costs more than any spread of work it buys.
    """
    if publisher_config.enable_message_ordering:
        rows = outbox_batch.repartition(tasks, "ordering_key").sortWithinPartitions("topic", "partition", "offset")
    elif shuffled:
        rows = outbox_batch.repartition(tasks)
    else:
        rows = outbox_batch.coalesce(tasks)
    counts = (rows.select("data", "attributes", "ordering_key")
              .mapInArrow(PubSubPublishPartition(publisher_config), "published long")
              .collect())
    return sum(int(row.published) for row in counts)


def publish(ctx: PipelineContext, config: ConnectorConfig) -> StreamingQuery:
    outbox = TableRef(OUTBOX, config.name)
    ctx.store.ensure(outbox, PUBSUB_OUTBOX)
    publisher_config = cps_publisher_config(config)
    tasks = int(config.get("tasks.max"))
    return start_publishing(ctx, config, outbox, publisher_config.topic_path,
                            lambda batch: publish_to_pubsub(batch, publisher_config, tasks))


def staged_ingest(ctx: PipelineContext, config: ConnectorConfig) -> StreamingQuery:
    """The ``ingest`` stage, after a hand-back from the fused mode when that mode ran last."""
    hand_back_to_staged(ctx, config, fused)
    return ingest(ctx, config)


def fused(ctx: PipelineContext, config: ConnectorConfig) -> StreamingQuery:
    """``pipeline.mode=fused``: Kafka → bronze and, beside it, Kafka → data model → Pub/Sub."""
    publisher_config = cps_publisher_config(config)
    tasks = int(config.get("tasks.max"))
    conversion = CpsSinkConversion(sink_settings(config), schemas=writer_schema_lookup(config),
                                   body_schemas=body_schema_check(config))
    sink = SinkPublishing(
        convert=conversion.outbox_and_cache, columns=OUTBOX_COLUMNS, publishable=F.col("data").isNotNull(),
        publish=lambda rows, shuffled: publish_to_pubsub(rows, publisher_config, tasks, shuffled),
        target=publisher_config.topic_path,
        dead_letters=DeadLetterRows(), empty=F.col("error_class").isNull() & F.col("data").isNull(),
        report_empty=lambda converted: report_empty_records(config, converted))
    return start_fused_sink(ctx, config, sink, drain=(convert, publish))


STAGES = [Stage("ingest", staged_ingest), Stage("convert", convert), Stage("publish", publish)]
FUSED_STAGES = [Stage("fused", fused, takes_over=("ingest", "convert", "publish"))]
