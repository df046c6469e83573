"""Which Kafka format a session reads and writes: Spark's native ``kafka``, or the fallback's Python
data source (:mod:`pubsub_connect.io.kafka.datasource`).

Why a module of its own: :mod:`~pubsub_connect.io.kafka.reader` and
:mod:`~pubsub_connect.io.kafka.writer` are on the native path and must import on every supported
Spark, while the fallback's data source needs the Python streaming API of a newer PySpark than
the oldest the product supports; so the fallback is imported here only when a session chooses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pubsub_connect.io.spark import Capabilities, capabilities

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Spark's own Kafka source and sink.
NATIVE_FORMAT = "kafka"


def spark_format(spark: SparkSession, caps: Capabilities | None) -> str:
    """``kafka`` when the JVM has Spark's connector, else the fallback's data source (registered)."""
    caps = caps or capabilities(spark)
    if caps.native_kafka:
        return NATIVE_FORMAT
    from pubsub_connect.io.kafka.datasource import register

    return register(spark)
