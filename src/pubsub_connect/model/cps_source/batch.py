"""Cloud Pub/Sub bronze → Kafka outbox as Spark column expressions: what the convert stage runs
(behaviour and batch specifics: see the package docstring).

Why one module of this length: it is one contract, the reference's rules as expressions, built
together by :class:`KafkaOutboxConversion` once per stage start. The expression helpers (Java's
hashes, Jackson's JSON text, the converters' envelopes) serve only these staged selects, and the
stages depend on each other's helper columns, so a split would separate a column from the select
that reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from pubsub_connect.model.avro.writer import SchemaIds
from pubsub_connect.model.connect import BYTES, OPTIONAL_STRING, Schema
from pubsub_connect.model.converters import (
    BOOLEAN_CONVERTER,
    JSON_CONVERTER,
    NUMBER_CONVERTER_TYPES,
    schema_to_json,
)
from pubsub_connect.model.cps_source.arrow_hashes import java_bytes_hash_array
from pubsub_connect.model.cps_source.reference import check_value_converter
from pubsub_connect.model.cps_source.registry_columns import RegistryColumns
from pubsub_connect.model.cps_source.settings import (
    ATTRIBUTE_FIELD_SCHEMA,
    ATTRIBUTES_TYPE,
    HASH_KEY,
    HASH_VALUE,
    HEADERS_TYPE,
    INT_MIN,
    LONG_SQL_RE,
    MAX_TIMESTAMP_MS,
    MESSAGE_FIELD,
    NO_TIMESTAMP,
    ORDERING_KEY,
    ORDERING_KEY_ATTRIBUTE,
    ROUND_ROBIN,
    CpsSourceSettings,
    DuplicateFieldError,
    InvalidTimestampError,
    KeyConverterError,
    MessageSchemas,
    StructConverterError,
    UnsupportedConverterError,
    duplicate_field_message,
    key_converter_message,
    struct_converter_message,
    timestamp_error_message,
    unicode_digits,
)
from pubsub_connect.model.frames import utf8_bytes
from pubsub_connect.model.json_columns import jackson_base64, jackson_escapes, jackson_string, json_inner

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

# ---------------------------------------------------------------------------------------------
# Batch implementation (Spark column expressions)
# ---------------------------------------------------------------------------------------------


def java_string_hash_col(s: Column) -> Column:
    """Spark expression equal to Java ``String.hashCode`` (as bigint in the int32 range).

    Exact and JVM-only: the string is encoded to UTF-16BE (surrogate pairs become two units, as
    in Java), hex-encoded, split into 4-hex-digit code units and folded with ``31*h + unit``
    modulo 2**32. Keys are short, so the per-character arrays are cheap. Null → null.
    """
    from pyspark.sql import functions as F

    units = F.regexp_extract_all(F.hex(F.encode(s, "UTF-16BE")), F.lit("(.{4})"), 1)
    folded = F.aggregate(
        units,
        F.lit(0).cast("bigint"),
        lambda acc, unit: F.pmod(acc * 31 + F.conv(unit, 16, 10).cast("bigint"), F.lit(1 << 32)),
    )
    signed = F.when(folded >= F.lit(1 << 31), folded - F.lit(1 << 32)).otherwise(folded)
    return F.when(s.isNotNull(), signed)


def partition_for_hash_col(h: Column, count: int) -> Column:
    """:func:`partition_for_hash` as a Spark expression over a bigint hash column (same divergence)."""
    from pyspark.sql import functions as F

    return F.when(h == F.lit(INT_MIN), F.lit(0)).otherwise(F.abs(h) % F.lit(count)).cast("int")


def deduplicate_messages(bronze_df: DataFrame) -> DataFrame:
    """One row per ``message_id``: the earliest ``ingest_time`` (then lowest delivery attempt).

    Pub/Sub delivers at least once; two deliveries of one message carry the same content, so
    which copy wins only matters for determinism.
    """
    return _deduplication()(bronze_df)


def _deduplication() -> Callable[[DataFrame], DataFrame]:
    """:func:`deduplicate_messages` with its expressions built once."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    window = Window.partitionBy("message_id").orderBy(
        F.col("ingest_time").asc_nulls_last(), F.col("delivery_attempt").asc_nulls_last()
    )
    rank = F.row_number().over(window).alias("_dedupe_rank")
    everything, first = F.col("*"), F.col("_dedupe_rank") == 1

    def apply(bronze_df: DataFrame) -> DataFrame:
        return bronze_df.select(everything, rank).where(first).drop("_dedupe_rank")

    return apply


def _append_data_hash(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: append ``_data_hash`` = ``Arrays.hashCode(_data)`` to every batch."""
    import pyarrow as pa

    for batch in batches:
        hashes = java_bytes_hash_array(batch.column(batch.schema.get_field_index("_data")))
        yield pa.RecordBatch.from_arrays(
            [*batch.columns, pa.array(hashes, type=pa.int32())],
            names=[*batch.schema.names, "_data_hash"],
        )


#: A JSON string token as Jackson writes it (escapes are a backslash plus one character, or \uXXXX
#: whose hex digits are ordinary characters). Unrolled and possessive: no backtracking.
_JSON_STRING_RE = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"'


def _json_envelope_col(schema: Schema, payload: Column, schemas: bool) -> Column:
    """JsonConverter bytes of a value with a fixed ``schema`` from its JSON ``payload`` text."""
    from pyspark.sql import functions as F

    if not schemas:
        return utf8_bytes(payload)
    return utf8_bytes(F.concat(F.lit(f'{{"schema":{schema_to_json(schema)},"payload":'), payload, F.lit("}")))


def key_col(key: Column, settings: CpsSourceSettings) -> Column:
    """:func:`serialize_key` as a Spark expression over the string key (without its error case:
    a number/boolean converter's key is checked separately)."""

    if settings.key_converter == JSON_CONVERTER:
        payload = jackson_string(key)
        return _json_envelope_col(OPTIONAL_STRING, payload, settings.key_schemas_enable)
    return utf8_bytes(key)


def bytes_value_col(data: Column, settings: CpsSourceSettings) -> Column:
    """:func:`serialize_bytes_value` as a Spark expression over the binary data."""
    from pyspark.sql import functions as F

    if settings.value_converter == JSON_CONVERTER:
        payload = F.concat(F.lit('"'), jackson_base64(data), F.lit('"'))
        return _json_envelope_col(BYTES, payload, settings.value_schemas_enable)
    return data


def _struct_json_col(entries: Column, made: Column, ordering_key: Column, data: Column, schemas: bool) -> Column:
    """JsonConverter bytes of the STRUCT value, from the sorted carried attribute ``entries``.

    Spark's ``to_json`` is Jackson, like Kafka's JsonConverter, so every JSON string here (names
    and values) is escaped exactly as Kafka would. The per-row schema varies with the attribute
    names, so the envelope is concatenated from fixed text and ``to_json`` pieces rather than
    built as one Spark struct: measured ~2x faster than higher-order functions, which Spark runs
    interpreted. Assembling text also means a dead-letter row's clashing names (``message``,
    ``orderingKey``) can never raise a duplicate-map-key error for the whole batch.
    """
    from pyspark.sql import functions as F

    def attribute_field(json_name: str) -> str:
        type_, optional = ATTRIBUTE_FIELD_SCHEMA.type.value, str(ATTRIBUTE_FIELD_SCHEMA.optional).lower()
        return f'{{"type":"{type_}","optional":{optional},"field":{json_name}}}'

    b64 = jackson_base64(data)
    has_attributes = F.size(entries) > 0
    attributes = F.when(
        has_attributes,
        F.concat(F.lit(","), jackson_escapes(json_inner(F.to_json(F.map_from_entries(entries))))),
    ).otherwise(F.lit(""))
    ordering = F.when(
        made,
        F.concat(
            F.lit(f',"{ORDERING_KEY_ATTRIBUTE}":'),
            jackson_string(ordering_key),
        ),
    ).otherwise(F.lit(""))
    payload = F.concat(F.lit(f'{{"{MESSAGE_FIELD}":"'), b64, F.lit('"'), attributes, ordering, F.lit("}"))
    if not schemas:
        return utf8_bytes(payload)
    # to_json(names) is ["n1","n2",…]; wrap every string token into its field schema object.
    fields = F.when(
        has_attributes,
        F.concat(
            F.lit(","),
            json_inner(
                F.regexp_replace(
                    jackson_escapes(F.to_json(entries["key"])), _JSON_STRING_RE, attribute_field("$0")
                )
            ),
        ),
    ).otherwise(F.lit(""))
    ordering_field = F.when(made, F.lit("," + attribute_field(f'"{ORDERING_KEY_ATTRIBUTE}"'))).otherwise(F.lit(""))
    message_field = f'{{"type":"bytes","optional":false,"field":"{MESSAGE_FIELD}"}}'
    envelope = F.concat(
        F.lit('{"schema":{"type":"struct","fields":[' + message_field),
        fields,
        ordering_field,
        F.lit('],"optional":false},"payload":'),
        payload,
        F.lit("}"),
    )
    return utf8_bytes(envelope)


def _staged_input() -> StructType:
    """The columns `_staged` selects first (the Arrow hash step is told them, see `frames`)."""
    from pyspark.sql.types import BinaryType, LongType, MapType, StringType, StructField, StructType, TimestampType

    attributes = MapType(StringType(), StringType())
    return StructType([
        StructField("message_id", StringType()), StructField("_publish_time", TimestampType()),
        StructField("_attributes", attributes), StructField("_subscription", StringType()),
        StructField("_data", BinaryType()), StructField("_attrs", attributes), StructField("_ok", StringType()),
        StructField("_publish_ms", LongType()),
    ])


def _staged(settings: CpsSourceSettings, registry: RegistryColumns | None = None) -> Callable[[DataFrame], DataFrame]:
    """Rows of unique messages → the same rows with every output column computed except the
    round-robin partition.

    The column expressions are built here once and the returned function only selects them: a
    convert stage applies them to every micro-batch, and building them costs some two thousand
    Py4J calls (about a quarter of a second) each time.

    Helper columns: ``_rr`` (row takes the round-robin counter), ``_publish_ms`` and
    ``message_id`` (its order), ``_partition_fixed`` (partition of the other schemes), and
    ``_publish_time``, ``_attributes``, ``_subscription`` carried through for the outbox and the
    dead letters of a streaming conversion. With a Schema Registry converter, ``registry``
    frames keys and values and its per-batch columns (see :mod:`.registry_columns`) are added
    between the checks and the classification.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, StructField, StructType

    s = settings
    struct_mode = not s.kafka_record_headers
    first = [
        F.col("message_id"),
        F.col("publish_time").alias("_publish_time"),
        F.col("attributes").alias("_attributes"),
        F.col("subscription").alias("_subscription"),
        F.coalesce(F.col("data"), F.lit(b"")).alias("_data"),
        F.coalesce(F.col("attributes"), F.create_map().cast(ATTRIBUTES_TYPE)).alias("_attrs"),
        F.coalesce(F.col("ordering_key"), F.lit("")).alias("_ok"),
        F.unix_millis(F.col("publish_time")).alias("_publish_ms"),
    ]
    input_schema = _staged_input()
    with_hash = StructType([*input_schema.fields, StructField("_data_hash", IntegerType(), nullable=False)])
    data, attrs, ok = F.col("_data"), F.col("_attrs"), F.col("_ok")

    # Computed in stages so that the expensive array expressions are materialised once per row
    # (Spark does not collapse a projection whose non-trivial column is referenced repeatedly).
    if s.kafka_key_attribute == ORDERING_KEY_ATTRIBUTE:
        key = ok
    elif s.kafka_key_attribute is None:
        key = F.lit(None).cast("string")
    else:
        key = F.try_element_at(attrs, F.lit(s.kafka_key_attribute))
    if s.kafka_timestamp_attribute is not None:
        digits, ascii_digits, _ = unicode_digits()
        raw_ts = F.translate(F.try_element_at(attrs, F.lit(s.kafka_timestamp_attribute)), digits, ascii_digits)
        parsed_ts = F.when(raw_ts.rlike(LONG_SQL_RE), raw_ts.try_cast("bigint"))
    else:
        parsed_ts = F.lit(None).cast("bigint")
    # sort_array, not array_sort: Spark 4 gives array_sort an interpreted comparator lambda.
    entries = F.sort_array(F.map_entries(attrs))
    if s.kafka_key_attribute is not None:
        key_attribute = s.kafka_key_attribute
        entries = F.filter(entries, lambda e: e["key"] != F.lit(key_attribute))
    keyed = [
        key.alias("_key"),
        parsed_ts.alias("_parsed_ts"),
        (F.lit(s.make_ordering_key_attribute) & (ok != F.lit(""))).alias("_made"),
        entries.alias("_entries"),
    ]

    parsed, made, entries = F.col("_parsed_ts"), F.col("_made"), F.col("_entries")
    standard = sorted(s.standard_attributes)
    custom = (F.exists(F.map_keys(attrs), lambda k: ~k.isin(*standard)) if standard else F.size(attrs) > 0) | made
    clash = F.when(F.exists(entries, lambda e: e["key"] == F.lit(MESSAGE_FIELD)), F.lit(MESSAGE_FIELD)).when(
        made & F.exists(entries, lambda e: e["key"] == F.lit(ORDERING_KEY_ATTRIBUTE)),
        F.lit(ORDERING_KEY_ATTRIBUTE),
    )
    checked = [
        custom.alias("_custom"),
        (parsed.isNotNull() & ((parsed < NO_TIMESTAMP) | (parsed > F.lit(MAX_TIMESTAMP_MS)))).alias("_bad_ts"),
        (clash if struct_mode else F.lit(None).cast("string")).alias("_clash"),
    ]
    if registry is not None:
        names = F.transform(entries, lambda e: e["key"])
        names = F.when(made, F.concat(names, F.array(F.lit(ORDERING_KEY_ATTRIBUTE)))).otherwise(names)
        checked.append(registry.signature(names, custom & F.lit(struct_mode) & clash.isNull(), attrs).alias("_sig"))

    bad_ts, duplicate, clash = (
        F.col("_bad_ts"),
        F.col("_custom") & F.col("_clash").isNotNull(),
        F.col("_clash"),
    )
    ts_prefix, ts_suffix = timestamp_error_message(s.kafka_timestamp_attribute or "", "\0").split("\0")
    dup_parts = duplicate_field_message("\0").split("\0")
    key_unwritable = s.key_converter in NUMBER_CONVERTER_TYPES or s.key_converter == BOOLEAN_CONVERTER
    bad_key = F.col("_key").isNotNull() & F.lit(key_unwritable)
    # A STRUCT value that only JsonConverter can write (see check_value_converter).
    unwritable = F.col("_custom") & F.lit(struct_mode and s.value_converter != JSON_CONVERTER and not s.registry_value)
    error_class = (
        F.when(bad_ts, F.lit(InvalidTimestampError.error_class))
        .when(duplicate, F.lit(DuplicateFieldError.error_class))
        .when(bad_key, F.lit(KeyConverterError.error_class))
        .when(unwritable, F.lit(StructConverterError.error_class))
    )
    error_message = (
        F.when(bad_ts, F.concat(F.lit(ts_prefix), parsed.cast("string"), F.lit(ts_suffix)))
        .when(duplicate, F.concat(F.lit(dup_parts[0]), clash, F.lit(dup_parts[1]), clash, F.lit(dup_parts[2])))
        .when(bad_key, F.lit(key_converter_message(s.key_converter)))
        .when(unwritable, F.lit(struct_converter_message(s.value_converter)))
    )
    written = ~(bad_ts | duplicate | bad_key | unwritable)
    if registry is not None:  # a schema the registry (or Avro) refused, after the reasons above
        error_class = error_class.otherwise(F.col("_schema_error_class"))
        error_message = error_message.otherwise(F.col("_schema_error"))
    classified = [
        F.when(parsed != F.lit(NO_TIMESTAMP), parsed).when(parsed.isNull(), F.col("_publish_ms")).alias("_ts_ms"),
        error_class.alias("error_class"),
        error_message.alias("error_message"),
    ]
    ok_error = F.col("error_class").isNull()


    empty_headers = F.array().cast(HEADERS_TYPE)
    if struct_mode:
        headers = empty_headers
        needs_struct = F.col("_custom") & ok_error
        if registry is not None and s.registry_value:
            json_struct = _struct_json_col(F.col("_entries"), F.col("_made"), ok, data, False) \
                if s.json_schema("value") else None
            value = registry.value(needs_struct, data, F.col("_entries"), F.col("_made"), ok, json_struct)
        else:
            struct_value = _struct_json_col(F.col("_entries"), F.col("_made"), ok, data, s.value_schemas_enable)
            value = F.when(needs_struct, struct_value).otherwise(bytes_value_col(data, s))
    else:
        value = bytes_value_col(data, s) if registry is None or not s.registry_value else \
            registry.value(F.lit(False), data, F.col("_entries"), F.col("_made"), ok)
        carried = F.transform(
            F.col("_entries"),
            lambda e: F.struct(e["key"].alias("key"), utf8_bytes(e["value"]).alias("value")),
        )
        ordering_header = F.array(
            F.struct(F.lit(ORDERING_KEY_ATTRIBUTE).alias("key"), utf8_bytes(ok).alias("value"))
        )
        with_ok = F.when(F.col("_made"), F.concat(carried, ordering_header)).otherwise(carried)
        headers = F.when(F.col("_custom") & ok_error, with_ok.cast(HEADERS_TYPE)).otherwise(empty_headers)

    scheme, count = s.partition_scheme, s.partition_count
    if scheme == HASH_KEY:
        fixed = F.when(F.col("_key").isNull(), F.lit(0)).otherwise(
            partition_for_hash_col(java_string_hash_col(F.col("_key")), count)
        )
    elif scheme == HASH_VALUE:
        fixed = partition_for_hash_col(F.col("_data_hash").cast("bigint"), count)
    elif scheme == ORDERING_KEY:
        fixed = F.when(ok != F.lit(""), partition_for_hash_col(java_string_hash_col(ok), count))
    else:
        fixed = F.lit(None)
    if scheme == ROUND_ROBIN:
        rr = ok_error
    elif scheme == ORDERING_KEY:
        rr = ok_error & (ok == F.lit(""))
    else:
        rr = F.lit(False)

    written_key = registry.key(F.col("_key")) if registry is not None and s.registry_key else key_col(F.col("_key"), s)
    final = [
        # Dead-letter rows keep the key's UTF-8 and the raw data, whatever the converters.
        F.when(ok_error, written_key).otherwise(utf8_bytes(F.col("_key"))).alias("key"),
        F.when(ok_error, value).otherwise(data).alias("value"),
        headers.alias("headers"),
        F.when(ok_error, fixed).cast("int").alias("_partition_fixed"),
        F.timestamp_millis(F.when(ok_error, F.col("_ts_ms"))).alias("timestamp"),
        F.col("message_id"),
        F.col("error_class"),
        F.col("error_message"),
        rr.alias("_rr"),
        F.col("_publish_ms"),
        F.col("_publish_time"),
        F.col("_attributes"),
        F.col("_subscription"),
    ]
    hash_value = s.partition_scheme == HASH_VALUE
    everything = F.col("*")

    def apply(messages: DataFrame) -> DataFrame:
        df = messages.select(*first)
        if hash_value:
            from pubsub_connect.model.frames import map_in_arrow

            df = map_in_arrow(df, _append_data_hash, with_hash, input_schema)
        for added in (keyed, checked):
            df = df.select(everything, *added)
        if registry is not None:
            df = registry.annotate(df, written)
        return df.select(everything, *classified).select(*final)

    return apply


def to_kafka_outbox(bronze_df: DataFrame, settings: CpsSourceSettings, start_counter: int = 0, *,
                    with_message: bool = False, schema_ids: SchemaIds | None = None) -> DataFrame:
    """Pub/Sub bronze rows → Kafka outbox rows (:data:`OUTBOX_COLUMNS`), one per ``message_id``:
    :class:`KafkaOutboxConversion` applied once (a stage builds that once and applies it to
    every micro-batch)."""
    conversion = KafkaOutboxConversion(settings, with_message=with_message, schema_ids=schema_ids)
    return conversion.apply(bronze_df, start_counter)


class KafkaOutboxConversion:
    """Pub/Sub bronze rows → Kafka outbox rows (:data:`OUTBOX_COLUMNS`), one per ``message_id``.

    ``with_message`` adds :func:`_message_columns`, so that a stage joins nothing back to its input.

    Pure Spark expressions (JsonConverter envelopes included: Spark's ``to_json`` escapes strings
    like Kafka's Jackson), except ``hash_value``, which appends ``Arrays.hashCode`` of the data in
    one vectorised Arrow/numpy pass per batch (``mapInArrow``; the package must be importable on
    workers). The expressions are built when the conversion is, for every :meth:`apply`.

    The input must be a static DataFrame (window functions): in a streaming query apply this to
    the micro-batch inside ``foreachBatch``. De-duplication is within the batch only; a message
    redelivered in a later batch (crash between the bronze commit and the ack) must be filtered
    by the caller, e.g. with an anti-join on the outbox's ``message_id``.

    Round robin: the i-th counter-taking row in (publish time ms, message_id) order gets partition
    ``(start_counter + i) % count``. The convert stage passes the outbox's row count, so the
    numbering continues from one micro-batch to the next and is the same when one is replayed.
    Raises :class:`UnsupportedConverterError` for a converter that cannot write the struct values
    (see :func:`check_value_converter`). A Schema Registry converter gets its ids from
    ``schema_ids`` (registering, or looking up, as the connector's converter settings say);
    with ``messageBodyFormat=avro``, the schema revisions messages name from ``message_schemas``.
    """

    def __init__(self, settings: CpsSourceSettings, *, with_message: bool = False,
                 schema_ids: SchemaIds | None = None, message_schemas: MessageSchemas | None = None):
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        check_value_converter(settings)
        self._deduplicate = _deduplication()
        registry = None
        if settings.registry_key or settings.registry_value:
            if schema_ids is None:
                raise ValueError("a Schema Registry converter needs its registry (schema_ids)")
            registry = RegistryColumns(settings, schema_ids, message_schemas)
        self._staged = _staged(settings, registry)
        self._count = settings.partition_count
        self._slot: Column | None = None
        if settings.partition_scheme in (ROUND_ROBIN, ORDERING_KEY):
            # A global order needs one partition: every row passes through one task here. Joining
            # back slots computed on (message_id, publish ms) alone was measured slower (second scan
            # and de-duplication of the input, plus the join) for 1 KB messages.
            order = Window.partitionBy("_rr").orderBy(
                F.col("_publish_ms").asc_nulls_first(), F.col("message_id").asc_nulls_first()
            )
            self._slot = F.row_number().over(order) - 1
        self._fixed = F.col("_partition_fixed")
        self._taker = F.col("_rr")
        self._extra = _message_columns() if with_message else []

    def apply(self, bronze_df: DataFrame, start_counter: int = 0) -> DataFrame:
        """The outbox rows of ``bronze_df``, the round-robin counter starting at ``start_counter``."""
        from pyspark.sql import functions as F

        partition = self._fixed
        if self._slot is not None:
            slot = F.pmod(self._slot + F.lit(start_counter % self._count), F.lit(self._count))
            partition = F.when(self._taker, slot).otherwise(partition)
        staged = self._staged(self._deduplicate(bronze_df))
        return staged.select(*_outbox_columns(partition), *self._extra)


def _outbox_columns(partition: Column) -> list[Any]:
    """:data:`OUTBOX_COLUMNS` of a staged frame, the partition given."""
    from pyspark.sql import functions as F

    return ["key", "value", "headers", partition.cast("int").alias("partition"), "timestamp", "message_id",
            F.col("error_class").cast("string"), F.col("error_message").cast("string")]


def _message_columns() -> list[Column]:
    """Of a staged frame: ``publish_time`` (for the outbox), and ``data``, ``attributes``,
    ``subscription`` (for the dead letters: the message as received; a dead letter's ``value``
    is its data, never converted)."""
    from pyspark.sql import functions as F

    return [F.col("_publish_time").alias("publish_time"), F.col("value").alias("data"),
            F.col("_attributes").alias("attributes"), F.col("_subscription").alias("subscription")]


def to_kafka_outbox_stream(messages: DataFrame, settings: CpsSourceSettings) -> DataFrame:
    """Pub/Sub bronze rows → Kafka outbox rows for a *streaming* conversion (a declarative
    pipeline's streaming table), where neither a window over the batch nor a counter carried
    from one micro-batch to the next exists.

    ``messages`` must already hold one row per ``message_id`` (e.g. through
    ``dropDuplicatesWithinWatermark``). Every column is computed as in :func:`to_kafka_outbox`,
    except the partition of a row that takes the round-robin path (``round_robin``, and
    ``ordering_key`` without an ordering key): ``pmod(xxhash64(message_id), kafka.partition.count)``,
    an even spread on average that depends on nothing outside the row.

    Columns: :data:`OUTBOX_COLUMNS` plus ``publish_time`` (for the outbox), and ``data``,
    ``attributes``, ``subscription`` (for the dead letters: the message as received).
    """
    from pyspark.sql import functions as F

    check_value_converter(settings)
    if settings.registry_key or settings.registry_value:
        raise UnsupportedConverterError("the Schema Registry converters register a record's schema before it is "
                                        "written, which a streaming table's query cannot do; use a connector job")
    staged = _staged(settings)(messages)
    spread = F.pmod(F.xxhash64(F.col("message_id")), F.lit(settings.partition_count))
    partition = F.when(F.col("_rr"), spread).otherwise(F.col("_partition_fixed"))
    return staged.select(*_outbox_columns(partition), *_message_columns())
