"""Table schemas: the contract between stages, notebooks and users' own queries.

Why in ``model``: they are pure data definitions; every stage and every backend (native Delta or
delta-rs) creates and reads the tables with exactly these columns.
"""

from __future__ import annotations

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

KAFKA_HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))

#: Spark's Kafka source columns (with headers), as the ingest stage reads them.
KAFKA_RECORD_FIELDS = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
    StructField("headers", KAFKA_HEADERS),
]

#: bronze/<name> of the sink connectors: Kafka records verbatim plus when we ingested them.
KAFKA_BRONZE = StructType([*KAFKA_RECORD_FIELDS, StructField("ingest_time", TimestampType())])

#: outbox/<name> of the Cloud Pub/Sub sink: one row per message to publish, with its source
#: coordinates (tracing, and dedupe by a consumer if it wants exactly-once).
PUBSUB_OUTBOX = StructType([
    StructField("data", BinaryType()),
    StructField("attributes", MapType(StringType(), StringType())),
    StructField("ordering_key", StringType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
])

#: dlq/<name> of connectors fed by Kafka: the record's coordinates and raw bytes plus why it failed.
KAFKA_DLQ = StructType([
    StructField("stage", StringType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("error_class", StringType()),
    StructField("error_message", StringType()),
    StructField("failed_at", TimestampType()),
])


#: bronze/<name> of the Pub/Sub source: messages as pulled (redeliveries included).
PUBSUB_BRONZE = StructType([
    StructField("message_id", StringType()),
    StructField("data", BinaryType()),
    StructField("attributes", MapType(StringType(), StringType())),
    StructField("ordering_key", StringType()),
    StructField("publish_time", TimestampType()),
    StructField("delivery_attempt", IntegerType()),
    StructField("subscription", StringType()),
    StructField("ingest_time", TimestampType()),
])

#: outbox/<name> of the source connectors: the Kafka sink's input columns plus the source
#: message id (one row per message id) and its publish time (bounds the dedupe look-up).
KAFKA_OUTBOX = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("headers", KAFKA_HEADERS),
    StructField("partition", IntegerType()),
    StructField("timestamp", TimestampType()),
    StructField("message_id", StringType()),
    StructField("publish_time", TimestampType()),
])

#: dlq/<name> of the Pub/Sub source: the message and why it could not be converted.
PUBSUB_DLQ = StructType([
    StructField("stage", StringType()),
    StructField("message_id", StringType()),
    StructField("subscription", StringType()),
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("attributes", MapType(StringType(), StringType())),
    StructField("error_class", StringType()),
    StructField("error_message", StringType()),
    StructField("failed_at", TimestampType()),
])


# Pub/Sub Lite. Same columns as ``model.lite``'s Arrow schemas / DDL, all nullable so
# that Spark DataFrames and Arrow batches append alike.

#: Lite's multi-valued attributes: name → values in order.
LITE_ATTRIBUTES = MapType(StringType(), ArrayType(BinaryType()))

#: outbox/<name> of the Lite sink: one row per Lite message, with its Kafka source coordinates
#: (tracing, and the partition for ``pubsublite.ordering.mode=KAFKA``).
LITE_OUTBOX = StructType([
    StructField("key", BinaryType()),
    StructField("data", BinaryType()),
    StructField("attributes", LITE_ATTRIBUTES),
    StructField("event_time", TimestampType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
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

#: outbox/<name> of the Lite source: the Kafka record (explicit partition) and its Lite origin.
LITE_KAFKA_OUTBOX = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("headers", KAFKA_HEADERS),
    StructField("partition", IntegerType()),
    StructField("timestamp", TimestampType()),
    StructField("lite_partition", LongType()),
    StructField("lite_offset", LongType()),
])
