"""Table schemas: the contract between stages, notebooks and users' own queries.

Why in ``model``: they are pure data definitions; every stage and every backend (native Delta or
delta-rs) creates and reads the tables with exactly these columns.

The ``StructType``s here are the one definition of each table. Arrow schemas (``mapInArrow``
outputs, delta-rs batches) are derived from them with :func:`to_arrow`, and DDL text, where
Spark wants text, with ``StructType.simpleString()``; nothing else spells the columns out again.
Columns that several tables share are defined once as field lists below and spliced in, in the
same order as before, since column order is part of the contract.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterable
from typing import TYPE_CHECKING

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

if TYPE_CHECKING:
    import pyarrow as pa

KAFKA_HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))

#: Pub/Sub's attributes: name → value.
PUBSUB_ATTRIBUTES = MapType(StringType(), StringType())

#: Where a Kafka record came from (tracing, dedupe by a consumer, Lite's ``KAFKA`` ordering).
KAFKA_COORDINATE_FIELDS = [
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
]

#: A record's raw key and value bytes.
RAW_BYTES_FIELDS = [StructField("key", BinaryType()), StructField("value", BinaryType())]

#: Why a record could not be converted (exception class and message).
ERROR_FIELDS = [StructField("error_class", StringType()), StructField("error_message", StringType())]

#: Spark's Kafka source columns (with headers), as the ingest stage reads them.
KAFKA_RECORD_FIELDS = [
    *RAW_BYTES_FIELDS,
    *KAFKA_COORDINATE_FIELDS,
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
    StructField("headers", KAFKA_HEADERS),
]

#: The Kafka sink's input columns (explicit partition), which every outbox toward Kafka starts with.
KAFKA_PRODUCE_FIELDS = [
    *RAW_BYTES_FIELDS,
    StructField("headers", KAFKA_HEADERS),
    StructField("partition", IntegerType()),
    StructField("timestamp", TimestampType()),
]

#: bronze/<name> of the sink connectors: Kafka records verbatim plus when we ingested them.
KAFKA_BRONZE = StructType([*KAFKA_RECORD_FIELDS, StructField("ingest_time", TimestampType())])

#: outbox/<name> of the Cloud Pub/Sub sink: one row per message to publish, with its source
#: coordinates (tracing, and dedupe by a consumer if it wants exactly-once).
PUBSUB_OUTBOX = StructType([
    StructField("data", BinaryType()),
    StructField("attributes", PUBSUB_ATTRIBUTES),
    StructField("ordering_key", StringType()),
    *KAFKA_COORDINATE_FIELDS,
])

#: dlq/<name> of connectors fed by Kafka: the record's coordinates and raw bytes plus why it failed.
KAFKA_DLQ = StructType([
    StructField("stage", StringType()),
    *KAFKA_COORDINATE_FIELDS,
    *RAW_BYTES_FIELDS,
    *ERROR_FIELDS,
    StructField("failed_at", TimestampType()),
])


#: bronze/<name> of the Pub/Sub source: messages as pulled (redeliveries included).
PUBSUB_BRONZE = StructType([
    StructField("message_id", StringType()),
    StructField("data", BinaryType()),
    StructField("attributes", PUBSUB_ATTRIBUTES),
    StructField("ordering_key", StringType()),
    StructField("publish_time", TimestampType()),
    StructField("delivery_attempt", IntegerType()),
    StructField("subscription", StringType()),
    StructField("ingest_time", TimestampType()),
])

#: outbox/<name> of the source connectors: the Kafka sink's input columns plus the source
#: message id (one row per message id) and its publish time (bounds the dedupe look-up).
KAFKA_OUTBOX = StructType([
    *KAFKA_PRODUCE_FIELDS,
    StructField("message_id", StringType()),
    StructField("publish_time", TimestampType()),
])

#: dlq/<name> of the Pub/Sub source: the message and why it could not be converted.
PUBSUB_DLQ = StructType([
    StructField("stage", StringType()),
    StructField("message_id", StringType()),
    StructField("subscription", StringType()),
    *RAW_BYTES_FIELDS,
    StructField("attributes", PUBSUB_ATTRIBUTES),
    *ERROR_FIELDS,
    StructField("failed_at", TimestampType()),
])


# Pub/Sub Lite. All nullable so that Spark DataFrames and Arrow batches append alike; the Lite
# model's Arrow batches mark the columns it always fills as required (``to_arrow(required=…)``).

#: Lite's multi-valued attributes: name → values in order.
LITE_ATTRIBUTES = MapType(StringType(), ArrayType(BinaryType()))

#: outbox/<name> of the Lite sink: one row per Lite message, with its Kafka source coordinates
#: (tracing, and the partition for ``pubsublite.ordering.mode=KAFKA``).
LITE_OUTBOX = StructType([
    StructField("key", BinaryType()),
    StructField("data", BinaryType()),
    StructField("attributes", LITE_ATTRIBUTES),
    StructField("event_time", TimestampType()),
    *KAFKA_COORDINATE_FIELDS,
])

#: A message as read from a Lite partition (the Lite source's Spark schema).
LITE_MESSAGE_FIELDS = [
    StructField("partition", LongType()),
    StructField("offset", LongType()),
    StructField("key", BinaryType()),
    StructField("data", BinaryType()),
    StructField("attributes", LITE_ATTRIBUTES),
    StructField("event_time", TimestampType()),
    StructField("publish_time", TimestampType()),
]

#: bronze/<name> of the Lite source: messages as read, one row per (partition, offset).
LITE_BRONZE = StructType([*LITE_MESSAGE_FIELDS, StructField("ingest_time", TimestampType())])

#: Where a Lite source's Kafka record came from: its Lite message.
LITE_ORIGIN_FIELDS = [StructField("lite_partition", LongType()), StructField("lite_offset", LongType())]

#: outbox/<name> of the Lite source: the Kafka record (explicit partition) and its Lite origin.
LITE_KAFKA_OUTBOX = StructType([*KAFKA_PRODUCE_FIELDS, *LITE_ORIGIN_FIELDS])

#: dlq/<name> of the Lite source: its conversion takes every Lite message, so the only dead
#: letters are records Kafka refused (``stage`` ``produce``): the record as it was to be
#: produced, its Lite origin, and why.
LITE_SOURCE_DLQ = StructType([
    StructField("stage", StringType()),
    *LITE_ORIGIN_FIELDS,
    *RAW_BYTES_FIELDS,
    StructField("headers", KAFKA_HEADERS),
    *ERROR_FIELDS,
    StructField("failed_at", TimestampType()),
])


@functools.cache
def _arrow_schema_takes_timezone() -> bool:
    """PySpark 4.2 names the timestamps' zone (``timezone=``); 4.0 and 4.1 only had a flag for UTC,
    on by default. Asked of the installed function's signature, not of a version number."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return "timezone" in inspect.signature(to_arrow_schema).parameters


def _spark_arrow_schema(struct: StructType) -> pa.Schema:
    """Spark's own Spark-to-Arrow mapping with UTC timestamps, on every supported PySpark."""
    from pyspark.sql.pandas.types import to_arrow_schema

    if _arrow_schema_takes_timezone():
        return to_arrow_schema(struct, timezone="UTC")
    return to_arrow_schema(struct)  # timestamp_utc=True: the same UTC microseconds


def to_arrow(struct: StructType, *, required: Iterable[str] = ()) -> pa.Schema:
    """The Arrow schema of ``struct`` (timestamps as UTC microseconds, Spark's own mapping).

    ``required`` names the columns a producer of Arrow batches always fills, marked non-nullable
    in the result: the Spark schema stays all-nullable (DataFrames and batches append alike), while
    the batches keep saying which columns can never be null. Imports pyarrow only when called.
    """
    import pyarrow as pa

    schema = _spark_arrow_schema(struct)
    required = set(required)
    unknown = required - set(schema.names)
    if unknown:
        raise ValueError(f"required columns not in the schema: {sorted(unknown)}")
    return pa.schema([f.with_nullable(False) if f.name in required else f for f in schema])
