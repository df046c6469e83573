"""The ingest stage shared by every connector that reads Kafka: Kafka → ``bronze/<name>``.

Why shared: the Pub/Sub sink and the Lite sink both start by landing Kafka records verbatim; the
Kafka source's offsets live in this stage's checkpoint (the Connect offsets of the original),
each micro-batch is appended exactly once (app id ``<name>/ingest``), and its end is
committed to consumer group ``connect-<name>`` as Connect would (:mod:`.kafka_position`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pubsub_connect.config.loader import ConnectorConfig, WorkerConfig
from pubsub_connect.io import checkpoints
from pubsub_connect.io.kafka.reader import read_kafka
from pubsub_connect.io.tables import BRONZE, TableRef
from pubsub_connect.model.schemas import KAFKA_BRONZE
from pubsub_connect.pipelines.context import PipelineContext, kafka_client_options, spark_text_reader
from pubsub_connect.pipelines.kafka_position import (
    GroupCommitter,
    auto_offset_reset,
    new_sink_start,
    offsets_json_positions,
)

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

STAGE = "ingest"


def kafka_read_options(worker: WorkerConfig, config: ConnectorConfig, *, shaded_kafka: bool) -> dict[str, str]:
    """Spark Kafka source options for a sink connector's ``topics`` / ``topics.regex``.

    Like a Connect sink's consumer, a new connector starts at ``consumer.auto.offset.reset``
    (Connect's default ``earliest``); afterwards the checkpoint decides. (:func:`ingest` first
    looks for the offsets of consumer group ``connect-<name>``.) Worker ``consumer.*`` keys and
    the connector's ``consumer.override.*`` keys reach the Kafka client as ``kafka.*`` options,
    Kafka's class names relocated where the client is (``shaded_kafka``: on Databricks).
    """
    options = kafka_client_options(worker, "consumer.", config, shaded_kafka=shaded_kafka)
    # Spark takes the start as startingOffsets and refuses the client's own reset policy
    reset = auto_offset_reset(worker, config)
    options.pop("kafka.auto.offset.reset", None)
    topics = config.get("topics")
    if topics:
        options["subscribe"] = ",".join(topics)
    else:
        options["subscribePattern"] = str(config.get("topics.regex"))
    options.update({
        "startingOffsets": "latest" if reset == "latest" else "earliest",
        "includeHeaders": "true",
        "failOnDataLoss": "true",
        "maxOffsetsPerTrigger": str(worker.get("pipeline.max.records.per.batch")),
    })
    return options


def bronze_rows(records: DataFrame) -> DataFrame:
    """Spark's Kafka source rows as bronze rows: its columns verbatim plus ``ingest_time``."""
    return records.select(*[F.col(f.name) for f in KAFKA_BRONZE.fields if f.name != "ingest_time"],
                          F.current_timestamp().alias("ingest_time"))


class KafkaLanding:
    """What lands a sink connector's Kafka records in ``bronze/<name>``: the stream of bronze rows,
    the once-per-batch append and the consumer group's commit after it. The ``ingest`` stage is
    this alone; a fused query (:mod:`.fused_sink`) lands each batch while it publishes it, on the
    same checkpoint, so both modes keep one position and one set of bronze marks.

    Opening it checks the brokers and, for a connector without a checkpoint, picks the start
    (consumer group ``connect-<name>``: a cut-over from Kafka Connect, or offsets moved by the
    offsets tools); ``shown_as``: the stage its progress lines name (the query that runs it).
    """

    def __init__(self, ctx: PipelineContext, config: ConnectorConfig, shown_as: str = STAGE):
        ctx.check_kafka("consumer", config)
        self.ctx = ctx
        self.config = config
        self.bronze = TableRef(BRONZE, config.name)
        ctx.store.ensure(self.bronze, KAFKA_BRONZE)
        options = kafka_read_options(ctx.worker, config, shaded_kafka=ctx.caps.databricks)
        client = ctx.librdkafka_client("consumer", config)
        self.checkpoint = ctx.store.checkpoint(config.name, STAGE)
        if not checkpoints.started(self.checkpoint):
            options["startingOffsets"], why = new_sink_start(ctx.worker, config, client, options)
            ctx.progress(f"[{config.name}.{shown_as}] {why}")
        #: The bronze rows of each micro-batch.
        self.rows = bronze_rows(read_kafka(ctx.spark, options, caps=ctx.caps))
        self._group = GroupCommitter(client, config.name, ctx.progress)
        ctx.closers.append(self._group.close)  # when the stage stops
        self._remote = spark_text_reader(ctx.spark)

    def append(self, batch: DataFrame, batch_id: int) -> None:
        """The batch into bronze, once per batch id (app id ``<name>/ingest``)."""
        self.ctx.store.append_batch(self.bronze, batch, self.ctx.batch_app_id(self.config, STAGE), batch_id)

    def commit_group(self, batch_id: int) -> None:
        """The batch is done: the group may show it as consumed (its end offsets, from the checkpoint)."""
        self._group.commit(offsets_json_positions(checkpoints.batch_offsets(self.checkpoint, batch_id, self._remote)))


def ingest(ctx: PipelineContext, config: ConnectorConfig) -> StreamingQuery:
    """Kafka → bronze; each batch's end is committed to consumer group ``connect-<name>`` once
    the batch is in bronze."""
    landing = KafkaLanding(ctx, config)

    def append(batch: DataFrame, batch_id: int) -> None:
        landing.append(batch, batch_id)
        landing.commit_group(batch_id)

    return ctx.start_batches(landing.rows, config, STAGE, append)
