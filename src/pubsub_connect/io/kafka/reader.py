"""Kafka DataFrames for the pipelines: Spark's native ``kafka`` source, or the fallback engine's.

Pipelines call :func:`read_kafka` only; it picks the native ``kafka`` format when the JVM has it
and otherwise the Python data source (:mod:`pubsub_connect.io.kafka.datasource`), with the same
options, the same output schema and the same offset semantics, so a pipeline cannot tell which one
ran. The writing side is :mod:`pubsub_connect.io.kafka.writer`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pubsub_connect.io.kafka.datasource import SOURCE_NAME, spark_format
from pubsub_connect.io.kafka.read_options import KafkaReadOptions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pubsub_connect.io.spark import Capabilities


def read_kafka(spark: SparkSession, options: dict[str, str], *, streaming: bool = True,
               caps: Capabilities | None = None) -> DataFrame:
    """A Kafka DataFrame with Spark's Kafka schema, from the native connector or the Python data source.

    Options are validated here for both implementations, so a mistake fails the same way
    wherever the pipeline runs.
    """
    fmt = spark_format(spark, caps)
    KafkaReadOptions.parse(options, streaming=streaming, python_client=fmt == SOURCE_NAME)
    reader = spark.readStream if streaming else spark.read
    return reader.format(fmt).options(**options).load()
