"""The Lite sink's convert stage as Spark column expressions, for byte-array and string keys and
values: the same rows :func:`~pubsub_connect.model.lite.arrow.sink_outbox_batch` builds per record
in Python, computed in the JVM.

Why only those converters: their Connect value is the record's bytes (ByteArrayConverter) or
their UTF-8 text (StringConverter, malformed sequences replaced by U+FFFD), whose encoding is the
bytes themselves or that text's UTF-8, both plain Spark functions. Other converters build Connect
values (JSON, numbers as Java prints them) and keep the per-record reference.

The attributes are built with plain map functions for a record without headers, the common case
(code-generated, where the higher-order ``filter``/``transform`` functions are interpreted row by
row); only a record with headers pays for grouping them by name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pubsub_connect.model.converters import BYTE_ARRAY_CONVERTER, STRING_CONVERTER
from pubsub_connect.model.frames import utf8_bytes
from pubsub_connect.model.lite.encoding import LiteEncodingError
from pubsub_connect.model.lite.sink import (
    KAFKA_EVENT_TIME_TYPE_ATTRIBUTE,
    KAFKA_OFFSET_ATTRIBUTE,
    KAFKA_PARTITION_ATTRIBUTE,
    KAFKA_TOPIC_ATTRIBUTE,
    MAX_TIMESTAMP_MS,
    TIMESTAMP_TYPE_NAMES,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: Converters whose output :func:`converted_columns` maps without Python.
COLUMN_CONVERTERS = (BYTE_ARRAY_CONVERTER, STRING_CONVERTER)

_ATTRIBUTES = "map<string,array<binary>>"


def uses_columns(key_converter: str, value_converter: str) -> bool:
    """True when :func:`converted_columns` maps these converters' records."""
    return key_converter in COLUMN_CONVERTERS and value_converter in COLUMN_CONVERTERS


def _encoded(column: Column, converter: str) -> Column:
    """A key or value as the bytes Google's sink publishes: empty for null; a string converter's
    text re-encoded (so malformed UTF-8 becomes U+FFFD, as Connect decodes it)."""
    from pyspark.sql import functions as F

    body = utf8_bytes(F.make_valid_utf8(column.cast("string"))) if converter == STRING_CONVERTER else column
    return F.coalesce(body, F.expr("X''"))


def converted_columns(bronze_df: DataFrame, key_converter: str, value_converter: str) -> DataFrame:
    """Bronze rows (Spark's Kafka source columns) → the Lite convert stage's rows: the outbox
    columns, then ``error_class``/``error_message`` and the raw key and value of a record that
    cannot be mapped (whose outbox columns are null). Builds the expressions for this one call; a
    stage builds a :class:`LiteColumnConversion` once instead."""
    return LiteColumnConversion(key_converter, value_converter).apply(bronze_df)


class LiteColumnConversion:
    """:func:`converted_columns`'s mapping, its expressions built once and applied to every
    micro-batch: each PySpark function call is Py4J round trips to the driver's JVM, which a
    stage then does not pay again per micro-batch."""

    def __init__(self, key_converter: str, value_converter: str) -> None:
        from pyspark.sql import functions as F

        col = F.col
        empty = F.create_map().cast(_ATTRIBUTES)

        ms = F.unix_millis(col("timestamp"))
        has_time = ms.isNotNull() & (ms >= 0)
        timestamp_type = F.coalesce(col("timestampType"), F.lit(0))
        type_name = F.lit(None).cast("string")
        for type_id, name in TIMESTAMP_TYPE_NAMES.items():
            type_name = F.when(timestamp_type == type_id, F.lit(name)).otherwise(type_name)
        error_message = (
            F.when(has_time & (ms > MAX_TIMESTAMP_MS), F.format_string("timestamp %d ms is after year 9999", ms))
            .when(has_time & type_name.isNull(), F.format_string("unknown Kafka timestamp type %d", timestamp_type))
        )
        # Attribute order as Google's sink builds its multimap: headers (grouped under a name's first
        # occurrence), then topic, partition, offset and the event-time type.
        topic = (KAFKA_TOPIC_ATTRIBUTE, utf8_bytes(col("topic")))
        partition_offset = [(KAFKA_PARTITION_ATTRIBUTE, utf8_bytes(col("partition").cast("string"))),
                            (KAFKA_OFFSET_ATTRIBUTE, utf8_bytes(F.coalesce(col("offset"), F.lit(0)).cast("string")))]
        time_type = (KAFKA_EVENT_TIME_TYPE_ATTRIBUTE, utf8_bytes(type_name))

        def attribute_map(entries: list[tuple[str, Column]]) -> Column:
            return F.create_map(*[c for name, value in entries for c in (F.lit(name), F.array(value))])

        # One map where a record has every coordinate (any record read from Kafka), else the parts
        # it has, concatenated.
        coordinates = F.when(
            col("topic").isNotNull() & col("partition").isNotNull() & has_time,
            attribute_map([topic, *partition_offset, time_type]),
        ).otherwise(F.map_concat(
            F.when(col("topic").isNotNull(), attribute_map([topic])).otherwise(empty),
            F.when(col("partition").isNotNull(), attribute_map(partition_offset)).otherwise(empty),
            F.when(has_time, attribute_map([time_type])).otherwise(empty),
        ))
        self._staged = [
            "key", "value", "topic", "partition", "offset",
            # null-valued headers are skipped; the (interpreted) filter runs only where there are headers
            F.when(F.size(col("headers")) > 0, F.filter(col("headers"), lambda h: h["value"].isNotNull()))
            .alias("_headers"),
            coordinates.alias("_coordinates"),
            F.when(has_time, F.timestamp_millis(ms)).alias("_event_time"),
            error_message.alias("_error"),
        ]

        # A name that is both a header and a coordinate attribute gathers the header values first,
        # as a multimap does.
        entries = F.concat(
            col("_headers"),
            F.transform(F.map_entries(col("_coordinates")),
                        lambda e: F.struct(e["key"].alias("key"), F.element_at(e["value"], 1).alias("value"))),
        )
        names = F.array_distinct(F.transform(entries, lambda e: e["key"]))
        grouped = F.map_from_arrays(names, F.transform(
            names, lambda name: F.transform(F.filter(entries, lambda e: e["key"] == name), lambda e: e["value"])))
        attributes = F.when(F.coalesce(F.size(col("_headers")), F.lit(0)) > 0, grouped).otherwise(col("_coordinates"))

        good = col("_error").isNull()

        def when_good(column: Column) -> Column:
            return F.when(good, column)

        def when_bad(column: Column) -> Column:
            return F.when(~good, column)

        self._converted = [
            when_good(_encoded(col("key"), key_converter)).alias("key"),
            when_good(_encoded(col("value"), value_converter)).alias("data"),
            when_good(attributes).alias("attributes"),
            when_good(col("_event_time")).alias("event_time"),
            col("topic").cast("string").alias("topic"),
            col("partition").cast("int").alias("partition"),
            col("offset").cast("long").alias("offset"),
            when_bad(F.lit(LiteEncodingError.error_class)).alias("error_class"),
            col("_error").alias("error_message"),
            when_bad(col("key").cast("binary")).alias("raw_key"),
            when_bad(col("value").cast("binary")).alias("raw_value"),
        ]

    def apply(self, bronze_df: DataFrame) -> DataFrame:
        """See :func:`converted_columns`."""
        return bronze_df.select(*self._staged).select(*self._converted)
