"""Each connector's ingest and convert stages as datasets of a Lakeflow Declarative Pipeline.

Why a second shape of the same stages: Databricks users build Kafka → bronze → silver flows as
declarative pipelines (formerly Delta Live Tables), and want the connector's tables to be
pipeline datasets they can watch, refresh and extend. The datasets are defined over the very
functions the jobs' stages call (``to_outbox``, ``split_pubsub_outbox``, ``converted_rows``,
``split_lite_outbox``, ``bronze_rows``, ``kafka_read_options``), so the data model exists once.

What a pipeline holds, per connector kind (registered in :data:`DEFINERS`):

- **sinks** (Cloud Pub/Sub, Lite): ``bronze_<name>`` (a streaming table over Spark's ``kafka``
  source), a temporary view of the converted rows, ``outbox_<name>`` and ``dlq_<name>``
  (streaming tables of the rows that convert, and of those that do not, with the reason);
- **Cloud Pub/Sub source**: the pull stage stays a job task (Pub/Sub cannot be replayed by
  offset, so it is no Spark source); the pipeline streams its bronze table, drops redeliveries
  within :data:`REDELIVERY_WINDOW`, and defines ``outbox_<name>`` and ``dlq_<name>``;
- **Lite source**: likewise after the job's pull task (which commits Lite cursors only once the
  messages are in bronze), ``outbox_<name>``.

Records without a key that the jobs spread round-robin (a counter carried from one micro-batch
to the next) are spread by a hash of the message's identity instead: a streaming table has no
such counter.

Publishing stays outside the pipeline, in the job task that follows it (the jobs' own
``publish``/``produce`` stage on ``outbox_<name>``): open-source pipelines have no
``foreach_batch_sink``, and only that stage gives the jobs' guarantees (a micro-batch commits
after every publish succeeded; one Kafka transaction with its marker per micro-batch).

``errors.tolerance=none``: the first record that cannot be converted fails the outbox and the
dead-letter flows with the jobs' one-line message (``raise_error``), so nothing after it is
written. Where the runtime has expectations (Databricks), the converted view also carries
``expect``/``expect_or_fail`` on ``error_class IS NULL``, so the pipeline's event log counts
the records that failed conversion.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from pubsub_connect.config import loader as cfg
from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.keys import CPS_SINK, CPS_SOURCE, LITE_SINK, LITE_SOURCE
from pubsub_connect.io.tables import BRONZE, DLQ, OUTBOX, TableRef, table_basename
from pubsub_connect.model.converters import REGISTRY_CONVERTERS
from pubsub_connect.model.schemas import (
    KAFKA_DLQ,
    KAFKA_OUTBOX,
    LITE_KAFKA_OUTBOX,
    LITE_OUTBOX,
    PUBSUB_DLQ,
    PUBSUB_OUTBOX,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from pubsub_connect.io.tables import TableStore

#: Redelivered Pub/Sub messages (a puller that died between its bronze commit and its ack) are
#: dropped when they reach bronze within this long of the first delivery; the state kept for
#: that is bounded by it. Leases are 20 s, so redeliveries come within seconds to minutes.
REDELIVERY_WINDOW = "1 hour"

#: The tables each connector kind's pipeline defines (and so owns). The sinks read Kafka into a
#: bronze table of their own; the sources convert the bronze table their job's pull task writes.
#: The Lite source converts every message (no dead letters), as its job does; the records Kafka
#: refuses in its produce task go to that task's ``dlq/<name>``, a job table.
MANAGED: dict[str, frozenset[str]] = {
    CPS_SINK: frozenset({BRONZE, OUTBOX, DLQ}),
    LITE_SINK: frozenset({BRONZE, OUTBOX, DLQ}),
    CPS_SOURCE: frozenset({OUTBOX, DLQ}),
    LITE_SOURCE: frozenset({OUTBOX}),
}


def managed_kinds(kind: str) -> frozenset[str]:
    """The tables a connector kind's pipeline defines (and so owns)."""
    return MANAGED[kind]


def dataset_name(kind: str, connector: str) -> str:
    """The pipeline dataset (table) name of a connector's table: the jobs' catalog name."""
    return table_basename(TableRef(kind, connector))


class Graph:
    """The ``pyspark.pipelines`` decorators of this runtime, with what the open-source and the
    Databricks runtimes differ in smoothed over, and the worker the datasets read Kafka with.
    ``shaded_kafka``: the runtime's Java Kafka client is Databricks' relocated one, so Kafka's
    class names in the client options are relocated too (``spark_client_options``)."""

    def __init__(self, spark: SparkSession, dp: Any, worker: cfg.WorkerConfig, *, shaded_kafka: bool):
        self.spark = spark
        self.dp = dp
        self.worker = worker
        self.shaded_kafka = shaded_kafka

    @property
    def has_expectations(self) -> bool:
        return hasattr(self.dp, "expect") and hasattr(self.dp, "expect_or_fail")

    def table(self, name: str, comment: str, query: Callable[[], DataFrame]) -> None:
        """A streaming table, in the runtime's default format: Delta on Databricks, and locally
        too (the local runner sets ``spark.sql.sources.default``; an explicit ``format`` would
        make the second update try to alter the table's reserved ``provider`` property)."""
        self.dp.table(name=name, comment=comment)(query)

    def view(self, name: str, query: Callable[[], DataFrame], expectation: tuple[str, str, bool] | None = None) -> None:
        """A temporary view; ``expectation`` = (name, condition, fail) where the runtime has them."""
        if expectation and self.has_expectations:
            label, condition, fail = expectation
            query = (self.dp.expect_or_fail if fail else self.dp.expect)(label, condition)(query)
        self.dp.temporary_view(name=name)(query)

    def stream(self, name: str) -> DataFrame:
        return self.spark.readStream.table(name)


def _coordinates(kind: str) -> Column:
    if kind == CPS_SOURCE:
        return F.concat(F.lit("message_id "), F.col("message_id"))
    return F.format_string("%s/%d@%d", F.col("topic"), F.col("partition"), F.col("offset"))


def tolerate(converted: DataFrame, config: cfg.ConnectorConfig) -> DataFrame:
    """``converted`` under ``errors.tolerance``: with ``none`` a row that failed conversion fails
    the flow, with the message the jobs' convert stage stops with."""
    if config.get("errors.tolerance") != "none":
        return converted
    message = F.concat(
        F.lit("record "), _coordinates(config.kind), F.lit(" cannot be converted: "), F.col("error_class"),
        F.lit(": "), F.col("error_message"),
        F.lit(" (errors.tolerance=none; set errors.tolerance=all to dead-letter such records)"))
    from pubsub_connect.pipelines.dead_letters import stop_at_unconvertible

    return stop_at_unconvertible(converted, F.lit(True), message)


def _expectation(config: cfg.ConnectorConfig) -> tuple[str, str, bool]:
    return "convertible", "error_class IS NULL", config.get("errors.tolerance") == "none"


def _typed(rows: DataFrame, schema: Any) -> DataFrame:
    """Rows with exactly the table contract's columns and types (what the job stages read)."""
    return rows.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in schema.fields])


def _define_kafka_bronze(graph: Graph, config: cfg.ConnectorConfig) -> str:
    from pubsub_connect.pipelines.kafka_ingest import bronze_rows, kafka_read_options

    name = dataset_name(BRONZE, config.name)
    options = kafka_read_options(graph.worker, config, shaded_kafka=graph.shaded_kafka)

    def bronze() -> DataFrame:
        return bronze_rows(graph.spark.readStream.format("kafka").options(**options).load())

    graph.table(name, f"{config.name}: Kafka records as read (Spark's Kafka columns, ingest_time)", bronze)
    return name


def _define_sink_tables(graph: Graph, config: cfg.ConnectorConfig, converted_view: str,
                        split: Callable[[DataFrame], tuple[DataFrame, DataFrame]], outbox_schema: Any) -> None:
    def outbox() -> DataFrame:
        return _typed(split(tolerate(graph.stream(converted_view), config))[0], outbox_schema)

    def dlq() -> DataFrame:
        return _typed(split(tolerate(graph.stream(converted_view), config))[1], KAFKA_DLQ)

    graph.table(dataset_name(OUTBOX, config.name), f"{config.name}: messages ready to publish", outbox)
    graph.table(dataset_name(DLQ, config.name), f"{config.name}: records that could not be converted", dlq)
    _define_dlq_topic(graph, config, KAFKA_DLQ)


def _define_dlq_topic(graph: Graph, config: cfg.ConnectorConfig, dlq_schema: StructType) -> None:
    """``errors.deadletterqueue.topic.name``: the rows of ``dlq_<name>`` also go to that Kafka
    topic, as Connect writes them (a Kafka sink of the pipeline, fed by an append flow)."""
    from pubsub_connect.pipelines.context import kafka_client_options
    from pubsub_connect.pipelines.dead_letters import dlq_topic_records

    topic = config.get("errors.deadletterqueue.topic.name")
    if not topic:
        return
    sink = f"dlq_topic_{dataset_name(DLQ, config.name)}"
    graph.dp.create_sink(name=sink, format="kafka",
                         options={**kafka_client_options(graph.worker, "producer.", shaded_kafka=graph.shaded_kafka),
                                  "topic": str(topic)})
    dlq = dataset_name(DLQ, config.name)
    columns = [f.name for f in dlq_schema.fields]
    graph.dp.append_flow(target=sink, name=f"{sink}_flow")(
        lambda: dlq_topic_records(graph.stream(dlq), config, columns))


def define_cps_sink(graph: Graph, config: cfg.ConnectorConfig, store: TableStore) -> None:
    from pubsub_connect.model.cps_sink.batch import to_outbox
    from pubsub_connect.pipelines.cps_sink import sink_settings, split_pubsub_outbox

    settings = sink_settings(config)
    bronze = _define_kafka_bronze(graph, config)
    view = f"converted_{dataset_name(OUTBOX, config.name)}"
    graph.view(view, lambda: to_outbox(graph.stream(bronze), settings), _expectation(config))
    _define_sink_tables(graph, config, view, split_pubsub_outbox, PUBSUB_OUTBOX)


def define_lite_sink(graph: Graph, config: cfg.ConnectorConfig, store: TableStore) -> None:
    from pubsub_connect.pipelines.lite_sink import converted_rows, split_lite_outbox

    bronze = _define_kafka_bronze(graph, config)
    view = f"converted_{dataset_name(OUTBOX, config.name)}"
    graph.view(view, lambda: converted_rows(graph.stream(bronze), config), _expectation(config))
    _define_sink_tables(graph, config, view, split_lite_outbox, LITE_OUTBOX)


def define_cps_source(graph: Graph, config: cfg.ConnectorConfig, store: TableStore) -> None:
    from pubsub_connect.model.cps_source.batch import to_kafka_outbox_stream
    from pubsub_connect.pipelines.cps_source import check_settings

    settings = check_settings(config)
    bronze = TableRef(BRONZE, config.name)
    view = f"converted_{dataset_name(OUTBOX, config.name)}"

    def converted() -> DataFrame:
        # the pull stage's bronze table, written by the job task before the pipeline
        messages = (store.read_stream(bronze).withWatermark("ingest_time", REDELIVERY_WINDOW)
                    .dropDuplicatesWithinWatermark(["message_id"]))
        return to_kafka_outbox_stream(messages, settings)

    def outbox() -> DataFrame:
        rows = tolerate(graph.stream(view), config)
        return _typed(rows.filter(F.col("error_class").isNull()), KAFKA_OUTBOX)

    def dlq() -> DataFrame:
        rows = tolerate(graph.stream(view), config).filter(F.col("error_class").isNotNull())
        return _typed(rows.select(
            F.lit("convert").alias("stage"), "message_id", "subscription", F.lit(None).cast("binary").alias("key"),
            F.col("data").alias("value"), "attributes", "error_class", "error_message",
            F.current_timestamp().alias("failed_at")), PUBSUB_DLQ)

    graph.view(view, converted, _expectation(config))
    graph.table(dataset_name(OUTBOX, config.name), f"{config.name}: Kafka records ready to produce", outbox)
    graph.table(dataset_name(DLQ, config.name), f"{config.name}: messages that could not be converted", dlq)
    _define_dlq_topic(graph, config, PUBSUB_DLQ)


def define_lite_source(graph: Graph, config: cfg.ConnectorConfig, store: TableStore) -> None:
    from pubsub_connect.pipelines.lite_source import (
        kafka_partition_count,
        lite_to_kafka_outbox_stream,
        source_converters,
    )

    converters = source_converters(config)
    # explicit partitions need the topic's partition count: asked once, when the pipeline starts
    partitions = kafka_partition_count(graph.worker, str(config.get("kafka.topic")))
    bronze = TableRef(BRONZE, config.name)

    def outbox() -> DataFrame:
        # the pull stage's bronze table, written by the job task before the pipeline
        rows = lite_to_kafka_outbox_stream(store.read_stream(bronze), partitions, converters)
        return _typed(rows, LITE_KAFKA_OUTBOX)

    graph.table(dataset_name(OUTBOX, config.name), f"{config.name}: Kafka records ready to produce", outbox)


#: connector kind → the function that defines its datasets. The archive has none: its output is
#: the object store, which is also where it keeps its position, so it has no tables to declare.
DEFINERS: dict[str, Callable[[Graph, cfg.ConnectorConfig, TableStore], None]] = {
    CPS_SINK: define_cps_sink,
    CPS_SOURCE: define_cps_source,
    LITE_SINK: define_lite_sink,
    LITE_SOURCE: define_lite_source,
}


def check_declarable(config: cfg.ConnectorConfig) -> None:
    """One line for a connector that has no declarative variant, or a configuration that has
    none: the Schema Registry converters resolve their schemas per micro-batch (a sink's writer
    schemas, a source's registrations), which a streaming table's query cannot do before it runs."""
    if config.kind not in DEFINERS:
        kinds = ", ".join(sorted(DEFINERS))
        raise ConfigError(f"{config.source}: a {config.kind} connector has no declarative pipeline "
                              f"(connectors that have one: {kinds}); run it with `pubsub-connect run` or its job")
    if any(config.get(f"{side}.converter") in REGISTRY_CONVERTERS for side in ("key", "value")):
        raise ConfigError(f"{config.source}: the Schema Registry converters run in the connector's jobs "
                          "(pubsub-connect run, the bundle's jobs), not in a declarative pipeline")


def define(spark: SparkSession, dp: Any, run_config: cfg.RunConfig, store: TableStore) -> None:
    """Register the datasets of ``run_config``'s connector (exactly one) in the running pipeline.
    On Databricks (the runtime's environment tells) the Kafka datasets name Kafka's classes where
    its relocated client has them."""
    from pubsub_connect.io.spark import running_on_databricks

    if len(run_config.connectors) != 1:
        raise ConfigError(f"a pipeline runs one connector, got {len(run_config.connectors)}")
    config = run_config.connectors[0]
    check_declarable(config)
    graph = Graph(spark, dp, run_config.worker, shaded_kafka=running_on_databricks())
    DEFINERS[config.kind](graph, config, store)
