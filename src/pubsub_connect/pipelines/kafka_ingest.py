"""The ingest stage shared by every connector that reads Kafka: Kafka → ``bronze/<name>``.

Why shared: the Pub/Sub sink, the Lite sink and the archive all start by landing Kafka records
verbatim; the Kafka source's offsets live in this stage's checkpoint (the Connect offsets of the
original), and each micro-batch is appended exactly once (Delta txn ``<name>/ingest``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pubsub_connect.config import ConnectorConfig, WorkerConfig
from pubsub_connect.io.kafka_source import read_kafka
from pubsub_connect.io.tables import BRONZE, TableRef
from pubsub_connect.model.schemas import KAFKA_BRONZE
from pubsub_connect.pipelines.base import PipelineContext, kafka_client_options

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

STAGE = "ingest"


def kafka_read_options(worker: WorkerConfig, config: ConnectorConfig) -> dict[str, str]:
    """Spark Kafka source options for a sink connector's ``topics`` / ``topics.regex``.

    Like a Connect sink's consumer (``auto.offset.reset=earliest``), a new connector starts at
    the earliest offset; afterwards the checkpoint decides. Worker ``consumer.*`` keys and the
    connector's ``consumer.override.*`` keys reach the Kafka client as ``kafka.*`` options.
    """
    options = kafka_client_options(worker, "consumer.")
    for key, value in config.passthrough.items():
        if key.startswith("consumer.override."):
            options["kafka." + key[len("consumer.override."):]] = value
    topics = config.get("topics")
    if topics:
        options["subscribe"] = ",".join(topics)
    else:
        options["subscribePattern"] = str(config.get("topics.regex"))
    options.update({
        "startingOffsets": "earliest",
        "includeHeaders": "true",
        "failOnDataLoss": "true",
        "maxOffsetsPerTrigger": str(worker.get("pipeline.max.records.per.batch")),
    })
    return options


def bronze_rows(records: DataFrame) -> DataFrame:
    """Spark's Kafka source rows as bronze rows: its columns verbatim plus ``ingest_time``."""
    return records.select(*[F.col(f.name) for f in KAFKA_BRONZE.fields if f.name != "ingest_time"],
                          F.current_timestamp().alias("ingest_time"))


def ingest(ctx: PipelineContext, config: ConnectorConfig) -> StreamingQuery:
    ctx.check_kafka("consumer", config)
    bronze = TableRef(BRONZE, config.name)
    ctx.store.ensure(bronze, KAFKA_BRONZE)
    landed = bronze_rows(read_kafka(ctx.spark, kafka_read_options(ctx.worker, config), caps=ctx.caps))

    def append(batch, batch_id: int) -> None:
        ctx.store.append_batch(bronze, batch, ctx.batch_app_id(config, STAGE), batch_id)

    return ctx.start_batches(landed, config, STAGE, append)
