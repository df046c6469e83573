"""The fallback engine as Spark sees it: the Python data source ``pubsub_connect_kafka``
(:mod:`pubsub_connect.io.kafka.engine` chooses between it and Spark's native ``kafka`` format).

Why this module exists: locally the product loads Spark's own Kafka connector from Maven Central
and Databricks has it built in; a machine without an artifact repository has neither and runs
this data source instead, with the same options, output schema and offset semantics.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from pubsub_connect.io.kafka.options import KafkaOptionsError, lower_keys, parse_bool
from pubsub_connect.io.kafka.python_sink import KafkaBatchWriter, KafkaStreamWriter
from pubsub_connect.io.kafka.python_source import KafkaBatchReader, KafkaStreamReader
from pubsub_connect.io.kafka.read_options import KAFKA_SCHEMA, KAFKA_SCHEMA_NO_HEADERS, KafkaReadOptions
from pubsub_connect.io.kafka.write_options import KafkaWriteOptions

#: Short name of the Python data source; distinct from Spark's built-in ``kafka``.
SOURCE_NAME = "pubsub_connect_kafka"

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter


class KafkaDataSource(DataSource):
    """``spark.read[Stream].format("pubsub_connect_kafka")`` and the matching sink."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return KAFKA_SCHEMA if parse_bool(lower_keys(self.options), "includeHeaders", False) else (
            KAFKA_SCHEMA_NO_HEADERS
        )

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBatchReader(KafkaReadOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(KafkaReadOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise KafkaOptionsError("the Kafka sink only appends: use mode('append')")
        return KafkaBatchWriter(KafkaWriteOptions.parse(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return KafkaStreamWriter(KafkaWriteOptions.parse(self.options, schema))


_REGISTERED: weakref.WeakSet[Any] = weakref.WeakSet()


def register(spark: SparkSession) -> str:
    """Register the Python Kafka data source on ``spark``, once per session (Spark would
    accept a re-registration but logs a warning each time); returns its format name."""
    if spark not in _REGISTERED:
        spark.dataSource.register(KafkaDataSource)
        _REGISTERED.add(spark)
    return SOURCE_NAME

