"""Pub/Sub Lite sink connector: Kafka → bronze → outbox → Pub/Sub Lite.

The stages (each a streaming query with its own checkpoint, each runnable alone), as the Cloud
Pub/Sub sink's:

1. ``ingest``  — Kafka ``topics``/``topics.regex`` → ``bronze/<name>`` (the shared Kafka ingest);
2. ``convert`` — bronze → ``outbox/<name>``: Google's Lite data model (``model.lite``: key, data,
   multi-valued attributes with the ``x-goog-pubsublite-source-kafka-*`` coordinates, event
   time) as Spark column expressions for ByteArray and String converters
   (``model.lite.columns``), else in Arrow batches inside Spark tasks; records that cannot be
   encoded → ``dlq/<name>``, or with ``errors.tolerance=none`` the connector stops naming the
   first of them;
3. ``publish`` — outbox → the Lite topic with the official client. Rows of one Kafka partition
   go to one task in offset order; each task publishes to the Lite partitions its rows route to
   and the micro-batch (hence the checkpoint) commits only when every message was acknowledged
   with an offset: at-least-once, no loss, per-key order kept.

Routing (``pubsublite.ordering.mode``): ``DEFAULT`` is the official publisher's policy (SHA-256
of the key modulo the partition count, empty keys round-robin); ``KAFKA`` publishes Kafka
partition *n* to Lite partition *n*, so the Lite topic needs at least as many partitions as the
Kafka topics: checked when the ingest and publish stages start (one-line error) and again for
every row.

With ``pipeline.mode=fused`` one query does all three (:mod:`.fused_sink`): ``FUSED_STAGES``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StructField, StructType

from pubsub_connect.config.loader import ConnectorConfig
from pubsub_connect.io.kafka.admin import partition_counts
from pubsub_connect.io.pubsublite.admin import topic_partition_count
from pubsub_connect.io.pubsublite.connection import LiteConnection, LiteIOError
from pubsub_connect.io.pubsublite.publisher import LitePublishError, PartitionPublisher, default_router
from pubsub_connect.io.tables import BRONZE, DLQ, OUTBOX, TableRef
from pubsub_connect.model.converters import BYTE_ARRAY_CONVERTER
from pubsub_connect.model.frames import map_in_arrow, schema_of
from pubsub_connect.model.lite.arrow import outbox_messages, sink_outbox_batch
from pubsub_connect.model.lite.columns import LiteColumnConversion, uses_columns
from pubsub_connect.model.schemas import ERROR_FIELDS, KAFKA_BRONZE, KAFKA_DLQ, LITE_OUTBOX
from pubsub_connect.pipelines.context import ConnectorError, PipelineContext, Stage
from pubsub_connect.pipelines.dead_letters import DeadLetterRows, append_converted
from pubsub_connect.pipelines.fused_sink import SinkPublishing, start_fused_sink
from pubsub_connect.pipelines.kafka_ingest import ingest as kafka_ingest
from pubsub_connect.pipelines.modes import convert_start, hand_back_to_staged
from pubsub_connect.pipelines.publish_stage import start_publishing
from pubsub_connect.pipelines.pubsub_settings import lite_connection

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

DEFAULT = "DEFAULT"
KAFKA = "KAFKA"

#: Output of the convert function: outbox columns, then why a row failed and its raw bytes. A
#: type, not DDL text: a Spark Connect client (a declarative pipeline's) would have to ask the
#: server to parse DDL, which a pipeline's query function may not do.
CONVERTED = StructType([*LITE_OUTBOX.fields, *ERROR_FIELDS, StructField("raw_key", BinaryType()),
                        StructField("raw_value", BinaryType())])
BRONZE_INPUT = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")


@dataclass(frozen=True)
class LiteSinkSettings:
    """The sink keys as primitives (pickled into tasks)."""

    connection: LiteConnection
    topic_path: str
    ordering_mode: str = DEFAULT

    @classmethod
    def from_connector(cls, config: ConnectorConfig) -> LiteSinkSettings:
        conn = lite_connection(config)
        return cls(conn, conn.topic_path(str(config.get("pubsublite.topic"))),
                   str(config.get("pubsublite.ordering.mode")).upper())


# --------------------------------------------------------------------------------------------
# Start-up check (ordering mode KAFKA)
# --------------------------------------------------------------------------------------------


def kafka_partition_counts(ctx: PipelineContext, config: ConnectorConfig) -> dict[str, int]:
    """Partitions of the Kafka topics the connector reads (``topics`` or ``topics.regex``),
    for those that exist now."""
    listed = config.get("topics")
    pattern = None if listed else str(config.get("topics.regex"))
    return partition_counts(ctx.librdkafka_client("consumer", config), listed or (), pattern)


def check_partitions(ctx: PipelineContext, config: ConnectorConfig, settings: LiteSinkSettings) -> int:
    """The Lite topic's partition count; with ordering mode KAFKA a one-line error when it has
    fewer partitions than a Kafka topic the connector reads."""
    try:
        count = topic_partition_count(settings.connection, settings.topic_path)
    except LiteIOError as exc:  # unreachable endpoint, missing topic: the user's to fix
        raise ConnectorError(f"{config.name}: {exc}") from None
    if settings.ordering_mode == KAFKA:
        counts = kafka_partition_counts(ctx, config)
        if counts:
            topic, needed = max(sorted(counts.items()), key=lambda item: item[1])
            if needed > count:
                raise ConnectorError(
                    f"{config.name}: pubsublite.ordering.mode=KAFKA publishes Kafka partition N to Lite partition "
                    f"N, but Kafka topic {topic} has {needed} partitions and Lite topic {settings.topic_path} has "
                    f"only {count}: add Lite partitions or use pubsublite.ordering.mode=DEFAULT")
    return count


def ingest(ctx: PipelineContext, config: ConnectorConfig) -> StreamingQuery:
    """The shared Kafka ingest, after the start-up check (so a misconfigured connector fails
    before it lands anything) and a hand-back from the fused mode when that mode ran last."""
    ctx.check_kafka("consumer", config)
    check_partitions(ctx, config, LiteSinkSettings.from_connector(config))
    hand_back_to_staged(ctx, config, fused)
    return kafka_ingest(ctx, config)


# --------------------------------------------------------------------------------------------
# Stage 2: convert
# --------------------------------------------------------------------------------------------


class ConvertPartition:
    """``mapInArrow`` function: Kafka bronze batches → Lite outbox rows plus failed rows."""

    def __init__(self, key_converter: str, key_schemas: bool, value_converter: str, value_schemas: bool):
        self.key_converter = (key_converter, key_schemas)
        self.value_converter = (value_converter, value_schemas)

    @staticmethod
    def _make(spec: tuple[str, bool]) -> Any:
        from pubsub_connect.model.converters import make_converter

        name, schemas = spec
        return None if name == BYTE_ARRAY_CONVERTER else make_converter(name, schemas)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        key_converter, value_converter = self._make(self.key_converter), self._make(self.value_converter)
        schema = converted_arrow_schema()
        for batch in batches:
            outbox, failures, _skipped = sink_outbox_batch(batch, key_converter=key_converter,
                                                           value_converter=value_converter)
            n = outbox.num_rows
            columns = [column.cast(schema.field(i).type) for i, column in enumerate(outbox.columns)]
            good = pa.RecordBatch.from_arrays(
                [*columns, pa.nulls(n, pa.string()), pa.nulls(n, pa.string()), pa.nulls(n, pa.binary()),
                 pa.nulls(n, pa.binary())], schema=schema)
            yield good
            if failures:
                yield _failed_rows(batch, failures, schema)


def converted_arrow_schema() -> pa.Schema:
    """The Arrow form of :data:`CONVERTED` (built without a SparkSession: runs in tasks)."""
    from pubsub_connect.model.schemas import to_arrow

    return to_arrow(CONVERTED)


def _failed_rows(bronze: pa.RecordBatch, failures: list[Any], schema: pa.Schema) -> pa.RecordBatch:
    index = pa.array([f.index for f in failures], pa.int64())
    n = len(failures)
    columns = {name: bronze.column(name) for name in bronze.schema.names}
    arrays = [pa.nulls(n, schema.field(name).type) for name in ("key", "data", "attributes", "event_time")]
    arrays += [columns["topic"].take(index).cast(pa.string()), columns["partition"].take(index).cast(pa.int32()),
               columns["offset"].take(index).cast(pa.int64()),
               pa.array([f.error.error_class for f in failures], pa.string()),
               pa.array([" ".join(str(f.error).split()) for f in failures], pa.string()),
               columns["key"].take(index).cast(pa.binary()), columns["value"].take(index).cast(pa.binary())]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def converts_in_columns(config: ConnectorConfig) -> bool:
    """Whether the connector's converters map as Spark column expressions (no Python per record)."""
    return uses_columns(str(config.get("key.converter")), str(config.get("value.converter")))


def lite_conversion(config: ConnectorConfig) -> Callable[[DataFrame], DataFrame]:
    """The connector's mapping of bronze micro-batches to converted rows (:data:`CONVERTED`), split
    by :func:`split_lite_outbox`: column expressions for byte-array and string converters, else the
    per-record reference over Arrow batches. Built once, so that a stage applying it to every
    micro-batch decides the path and builds its expressions once (each PySpark call is Py4J
    round trips)."""
    key_converter, value_converter = str(config.get("key.converter")), str(config.get("value.converter"))
    if uses_columns(key_converter, value_converter):
        return LiteColumnConversion(key_converter, value_converter).apply
    fn = ConvertPartition(key_converter, bool(config.get("key.converter.schemas.enable")),
                          value_converter, bool(config.get("value.converter.schemas.enable")))
    input_schema = schema_of(KAFKA_BRONZE, BRONZE_INPUT)

    def by_reference(bronze_batch: DataFrame) -> DataFrame:
        return map_in_arrow(bronze_batch.select(*BRONZE_INPUT), fn, CONVERTED, input_schema)

    return by_reference


def converted_rows(bronze_batch: DataFrame, config: ConnectorConfig) -> DataFrame:
    """One bronze micro-batch → converted rows: :func:`lite_conversion` built for this one call."""
    return lite_conversion(config)(bronze_batch)


#: The outbox table's columns, in its order.
LITE_OUTBOX_COLUMNS = [f.name for f in LITE_OUTBOX.fields]


def split_lite_outbox(converted: DataFrame) -> tuple[DataFrame, DataFrame]:
    """Converted rows → (outbox rows, ``KAFKA_DLQ``-shaped dead-letter rows)."""
    good = converted.filter(F.col("error_class").isNull()).select(*LITE_OUTBOX_COLUMNS)
    return good, DeadLetterRows("raw_key", "raw_value").of(converted)


def convert(ctx: PipelineContext, config: ConnectorConfig) -> StreamingQuery:
    start = convert_start(ctx, config)
    bronze, outbox, dlq = (TableRef(kind, config.name) for kind in (BRONZE, OUTBOX, DLQ))
    ctx.store.ensure(bronze, KAFKA_BRONZE)
    ctx.store.ensure(outbox, LITE_OUTBOX)
    ctx.store.ensure(dlq, KAFKA_DLQ)

    in_columns = converts_in_columns(config)
    stops = config.get("errors.tolerance") == "none"
    conversion = lite_conversion(config)  # built once, applied to every micro-batch
    dead_letters = DeadLetterRows("raw_key", "raw_value")
    keep = F.lit(True)

    def process(batch: DataFrame, batch_id: int) -> None:
        # With errors.tolerance=all the dead letters are read again after the append: the Python
        # conversion is then persisted so that it runs once. The column expressions cost less to
        # compute again than copying every payload into a cache.
        converted = conversion(batch)
        cached = not (in_columns or stops)
        if cached:
            converted.persist()
        try:
            append_converted(ctx, config, partial(ctx.store.append_batch, outbox), dlq, converted,
                             dead_letters.of(converted), batch_id, LITE_OUTBOX_COLUMNS, keep)
        finally:
            if cached:
                converted.unpersist()

    return ctx.start_batches(ctx.read_table_stream(bronze, start), config, "convert", process)


# --------------------------------------------------------------------------------------------
# Stage 3: publish
# --------------------------------------------------------------------------------------------


class LitePublishPartition:
    """``mapInArrow`` function: publishes one Spark partition of outbox rows (sorted by Kafka
    partition and offset) and yields how many were published. Raises — failing the task, hence
    the batch — unless every message was acknowledged."""

    def __init__(self, settings: LiteSinkSettings, partition_count: int):
        self.settings = settings
        self.partition_count = partition_count

    def route(self) -> Any:
        count = self.partition_count
        if self.settings.ordering_mode != KAFKA:
            router = default_router(count)
            return lambda kafka_partition, key: router(key)

        def same_partition(kafka_partition: int | None, _key: bytes) -> int:
            if kafka_partition is None or not 0 <= kafka_partition < count:
                raise LitePublishError(
                    f"pubsublite.ordering.mode=KAFKA: Kafka partition {kafka_partition} has no Lite partition in "
                    f"{self.settings.topic_path} ({count} partitions)")
            return kafka_partition

        return same_partition

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        route = self.route()
        with PartitionPublisher(self.settings.connection, self.settings.topic_path) as publisher:
            for batch in batches:
                for kafka_partition, message in outbox_messages(batch):
                    publisher.publish(route(kafka_partition, message.key), message.to_proto())
            stats = publisher.wait()
        yield pa.RecordBatch.from_pydict({"published": pa.array([stats.messages], pa.int64())})


def publish_to_lite(outbox_batch: DataFrame, settings: LiteSinkSettings, partition_count: int, tasks: int) -> int:
    """Publish a micro-batch; returns how many messages Lite acknowledged.

    Rows of one Kafka partition go to one task in offset order: a key's messages (one Kafka
    partition, one Lite partition in either mode) are published in Kafka order, and batches one
    after the other, so the order holds across micro-batches too.
    """
    rows = outbox_batch.repartition(tasks, "topic", "partition").sortWithinPartitions("topic", "partition", "offset")
    counts = rows.mapInArrow(LitePublishPartition(settings, partition_count), "published long").collect()
    return sum(int(row.published) for row in counts)


def publish(ctx: PipelineContext, config: ConnectorConfig) -> StreamingQuery:
    outbox = TableRef(OUTBOX, config.name)
    ctx.store.ensure(outbox, LITE_OUTBOX)
    settings = LiteSinkSettings.from_connector(config)
    check_partitions(ctx, config, settings)
    tasks = int(config.get("tasks.max"))

    def publish_batch(batch: DataFrame) -> int:
        # per batch: partitions added to the Lite topic are used from the next batch on
        count = topic_partition_count(settings.connection, settings.topic_path)
        return publish_to_lite(batch, settings, count, tasks)

    return start_publishing(ctx, config, outbox, settings.topic_path, publish_batch)


def fused(ctx: PipelineContext, config: ConnectorConfig) -> StreamingQuery:
    """``pipeline.mode=fused``: Kafka → bronze and, beside it, Kafka → data model → Lite."""
    settings = LiteSinkSettings.from_connector(config)
    check_partitions(ctx, config, settings)
    tasks = int(config.get("tasks.max"))
    conversion = lite_conversion(config)
    # the Python conversion is read twice under errors.tolerance=all (publish, then dead letters)
    cached = not (converts_in_columns(config) or config.get("errors.tolerance") == "none")

    def publish_batch(rows: DataFrame, _shuffled: bool) -> int:
        # always through a shuffle (rows of a Kafka partition to one task); per batch: partitions
        # added to the Lite topic are used from the next batch on
        return publish_to_lite(rows, settings, topic_partition_count(settings.connection, settings.topic_path), tasks)

    def convert_batch(batch: DataFrame) -> tuple[DataFrame, DataFrame | None]:
        converted = conversion(batch)
        return converted, converted if cached else None

    sink = SinkPublishing(convert=convert_batch, columns=LITE_OUTBOX_COLUMNS, publishable=F.lit(True),
                          publish=publish_batch, target=settings.topic_path,
                          dead_letters=DeadLetterRows("raw_key", "raw_value"))
    return start_fused_sink(ctx, config, sink, drain=(convert, publish))


STAGES = [Stage("ingest", ingest), Stage("convert", convert), Stage("publish", publish)]
FUSED_STAGES = [Stage("fused", fused, takes_over=("ingest", "convert", "publish"))]
