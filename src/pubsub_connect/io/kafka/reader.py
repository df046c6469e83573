"""Kafka DataFrames for the pipelines: Spark's native ``kafka`` source, or the fallback engine's.

Pipelines call :func:`read_kafka` only; it picks the native ``kafka`` format when the JVM has it
and otherwise the Python data source (:mod:`pubsub_connect.io.kafka.datasource`, imported only then), with the same
options, the same output schema and the same offset semantics, so a pipeline cannot tell which one
ran. The writing side is :mod:`pubsub_connect.io.kafka.writer`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pubsub_connect.io.kafka.engine import NATIVE_FORMAT, spark_format
from pubsub_connect.io.kafka.read_options import KafkaReadOptions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pubsub_connect.io.spark import Capabilities


#: Consumer settings Spark's native source gets unless the user set them (``consumer.*``). The Java
#: client's defaults (1 MiB per partition and fetch, a 64 KiB socket buffer) make a consumer of
#: 1 KB records wait on a fetch round trip every thousand records; with these, reading a backlog
#: takes about a third less time (measured 4.1-5.5 s -> 3.5-3.7 s per million records on two
#: cores), at the cost of up to 4 MiB of fetched records held per consumer. The Python source
#: tunes librdkafka's own fetching and is left as it is.
NATIVE_CONSUMER_DEFAULTS = {
    "kafka.max.partition.fetch.bytes": str(4 << 20),
    "kafka.receive.buffer.bytes": str(4 << 20),
}


def read_kafka(spark: SparkSession, options: dict[str, str], *, streaming: bool = True,
               caps: Capabilities | None = None) -> DataFrame:
    """A Kafka DataFrame with Spark's Kafka schema, from the native connector or the Python data source.

    Options are validated here for both implementations, so a mistake fails the same way
    wherever the pipeline runs.
    """
    fmt = spark_format(spark, caps)
    KafkaReadOptions.parse(options, streaming=streaming, python_client=fmt != NATIVE_FORMAT)
    if fmt == NATIVE_FORMAT:
        options = {**NATIVE_CONSUMER_DEFAULTS, **options}
    reader = spark.readStream if streaming else spark.read
    return reader.format(fmt).options(**options).load()
