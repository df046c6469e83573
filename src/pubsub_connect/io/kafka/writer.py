"""Writing DataFrames to Kafka for the pipelines: Spark's native ``kafka`` sink, or the fallback
engine's (:mod:`pubsub_connect.io.kafka.python_sink`), with the same options and columns.

Both are at-least-once; exactly-once produce is :mod:`pubsub_connect.io.kafka.transactions`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pubsub_connect.io.kafka.engine import NATIVE_FORMAT, spark_format
from pubsub_connect.io.kafka.options import KafkaOptionsError
from pubsub_connect.io.kafka.write_options import KafkaWriteOptions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import StreamingQuery

    from pubsub_connect.io.spark import Capabilities


def write_kafka(df: DataFrame, options: dict[str, str], *, caps: Capabilities | None = None) -> None:
    """Write a batch DataFrame with the Kafka sink's columns (``key``, ``value``, optional
    ``topic``, ``partition``, ``headers``); returns once every record was acknowledged."""
    fmt = spark_format(df.sparkSession, caps)
    KafkaWriteOptions.parse(options, df.schema, python_client=fmt != NATIVE_FORMAT)
    df.write.format(fmt).mode("append").options(**options).save()


_TRIGGER_KEYS = ("processingTime", "once", "availableNow", "continuous")


def write_kafka_stream(df: DataFrame, options: dict[str, str], checkpoint_location: str, *,
                       caps: Capabilities | None = None, trigger: dict[str, Any] | None = None,
                       query_name: str | None = None) -> StreamingQuery:
    """Start a streaming write to Kafka (at-least-once, like Spark's sink).

    ``trigger`` takes the keyword form of ``DataStreamWriter.trigger``, e.g.
    ``{"availableNow": True}`` or ``{"processingTime": "1 second"}``.
    """
    fmt = spark_format(df.sparkSession, caps)
    KafkaWriteOptions.parse(options, df.schema, python_client=fmt != NATIVE_FORMAT)
    writer = df.writeStream.format(fmt).options(**options).option("checkpointLocation", checkpoint_location)
    if trigger:
        unknown = set(trigger) - set(_TRIGGER_KEYS)
        if unknown:
            raise KafkaOptionsError(f"unknown trigger {sorted(unknown)}; use one of {list(_TRIGGER_KEYS)}")
        writer = writer.trigger(**trigger)
    if query_name:
        writer = writer.queryName(query_name)
    return writer.start()
