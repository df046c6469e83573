"""Kafka bronze → Pub/Sub outbox for the convert stage: Spark column expressions where the
converters allow, else the reference mapper over Arrow batches (see the package docstring). A
schemaless JSON value takes the column expressions for every record whose compact JSON Spark
writes exactly as the reference does, and the reference for the others.

Why one module of this length: it is one contract, the reference's rules as a batch mapping,
built together by :class:`CpsSinkConversion` once per stage start; the column stages, the JSON
classification and the Arrow fallback each read the others' column names, so apart they would
only import each other.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from typing import TYPE_CHECKING

from pubsub_connect.model.connect import DataError, Type
from pubsub_connect.model.converters import (
    BOOLEAN_CONVERTER,
    BYTE_ARRAY_CONVERTER,
    JSON_CONVERTER,
    NUMBER_CONVERTER_TYPES,
    REGISTRY_CONVERTERS,
    REGISTRY_JSON_SCHEMA_CONVERTERS,
    STRING_CONVERTER,
)
from pubsub_connect.model.cps_sink.reference import CpsSinkMapper, quote_name
from pubsub_connect.model.cps_sink.settings import (
    AVRO_BODY,
    CONNECT_BODY,
    KEY_ATTRIBUTE,
    MAX_ATTRIBUTE_KEY_BYTES,
    MAX_ATTRIBUTE_VALUE_BYTES,
    MAX_ATTRIBUTES,
    MAX_MESSAGE_BYTES,
    MAX_ORDERING_KEY_BYTES,
    OFFSET_ATTRIBUTE,
    PARTITION_ATTRIBUTE,
    TIMESTAMP_ATTRIBUTE,
    TOPIC_ATTRIBUTE,
    BodySchemaCheck,
    CpsSinkSettings,
    PubsubLimitError,
    TopicSchemaError,
)
from pubsub_connect.model.frames import utf8_bytes

if TYPE_CHECKING:
    from collections.abc import Callable

    import pyarrow as pa
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

    from pubsub_connect.model.avro.batch import AvroOutcome

    #: A writer schema's text by id (the registry): raises for an id it does not know.
    SchemaLookup = Callable[[int], str]

#: Converters whose output :func:`to_outbox` maps with Spark column expressions alone (a Schema
#: Registry converter only beside another of these: the two share one column mapping).
COLUMN_KEY_CONVERTERS = (BYTE_ARRAY_CONVERTER, STRING_CONVERTER, *REGISTRY_CONVERTERS)
COLUMN_VALUE_CONVERTERS = (
    BYTE_ARRAY_CONVERTER,
    STRING_CONVERTER,
    BOOLEAN_CONVERTER,
    *NUMBER_CONVERTER_TYPES,
    *REGISTRY_CONVERTERS,
)

# --------------------------------------------------------------------------------------------
# Batch implementation
# --------------------------------------------------------------------------------------------


def uses_column_path(settings: CpsSinkSettings) -> bool:
    """True when :func:`to_outbox` needs no Python at all (byte/string keys, non-JSON values)."""
    return settings.key_converter in COLUMN_KEY_CONVERTERS and settings.value_converter in COLUMN_VALUE_CONVERTERS


def uses_compact_json_path(settings: CpsSinkSettings) -> bool:
    """True when :func:`to_outbox` maps schemaless JSON values with column expressions, leaving
    the reference only the records whose JSON Spark may write differently (byte/string keys)."""
    return (
        settings.key_converter in COLUMN_KEY_CONVERTERS
        and settings.key_converter not in REGISTRY_CONVERTERS
        and settings.value_converter == JSON_CONVERTER
        and not settings.value_schemas_enable
    )


def converted_schema(with_skipped_headers: bool = False) -> StructType:
    """Column contract of the rows :func:`to_outbox` returns: the outbox table's columns, then the
    raw key and value and why a row failed (``skipped_headers int`` appended when asked for).
    Given to ``mapInArrow`` as a type, not DDL text, since a Spark Connect client (a declarative
    pipeline's) must ask the server to parse DDL, which a pipeline's query function may not do."""
    from pyspark.sql.types import IntegerType, StructField, StructType

    from pubsub_connect.model.schemas import ERROR_FIELDS, PUBSUB_OUTBOX, RAW_BYTES_FIELDS

    fields = [*PUBSUB_OUTBOX.fields, *RAW_BYTES_FIELDS, *ERROR_FIELDS]
    if with_skipped_headers:
        fields.append(StructField("skipped_headers", IntegerType()))
    return StructType(fields)


def to_outbox(
    bronze_df: DataFrame, settings: CpsSinkSettings, *, with_skipped_headers: bool = False, classified: bool = False
) -> DataFrame:
    """Bronze rows (Spark's Kafka source columns) -> outbox rows (:func:`converted_schema`).

    Good rows: ``data``/``attributes``/``ordering_key`` set, ``key``/``value``/``error_*`` null.
    Bad rows: ``error_class``/``error_message`` set, ``key``/``value`` carry the raw bytes, the
    message columns null. Nothing to publish: message and error columns all null. ``topic``,
    ``partition``, ``offset`` are always the source coordinates.

    ``classified``: ``bronze_df`` is :func:`classify`'s output (a caller that persists it saves
    the second pass over the JSON text). Said, not looked up: asking a DataFrame for its columns
    is an analysis, which a declarative pipeline's query function may not run.

    Builds the mapping's expressions for this one call; a stage that converts micro-batch after
    micro-batch builds a :class:`CpsSinkConversion` once instead.
    """
    return CpsSinkConversion(settings, with_skipped_headers=with_skipped_headers).to_outbox(
        bronze_df, classified=classified)


def outbox_and_cache(bronze_df: DataFrame, settings: CpsSinkSettings) -> tuple[DataFrame, DataFrame | None]:
    """A micro-batch's outbox rows (:func:`to_outbox`) and the frame worth persisting while they
    are read more than once, or None (see :meth:`CpsSinkConversion.outbox_and_cache`)."""
    return CpsSinkConversion(settings).outbox_and_cache(bronze_df)


#: Columns :func:`classify` adds: Jackson's compact text where it differs from the value's, and
#: whether it is exactly the reference's body.
_JSON_REWRITTEN = "_json_rewritten"
_JSON_EXACT = "_json_exact"


def classify(bronze_df: DataFrame, settings: CpsSinkSettings) -> DataFrame:
    """The bronze rows (with :func:`uses_compact_json_path` settings) with what the schemaless
    JSON path decides per record, computed once: whether Spark's compact JSON text is exactly the
    reference's body (else the record goes to the reference), and that text where it is not the
    value itself (compact input, the common case, stores nothing twice).

    :func:`to_outbox` reads the rows twice (one pass keeps the exact records, one the others), so
    a batch persists this first (:func:`outbox_and_cache`); a streaming view cannot and pays the
    JSON pass twice.
    """
    return bronze_df.select(*_classified_columns(settings))


def _classified_columns(settings: CpsSinkSettings) -> list[Column | str]:
    """:func:`classify`'s columns: the bronze columns the mapping reads, then the two it decides."""
    from pyspark.sql import functions as F

    from pubsub_connect.model.compact_json import jackson_compact, same_as_reference

    text = F.col("value").cast("string")
    compact = jackson_compact(text)
    return [
        *_mapped_columns(settings),  # all the mapping reads: a persisted copy holds no more
        F.when(compact != text, compact).alias(_JSON_REWRITTEN),
        (F.col("value").isNull() | same_as_reference(text, compact)).alias(_JSON_EXACT),
    ]


class CpsSinkConversion:
    """The convert stage's mapping for one connector's settings, its Spark expressions built once
    and applied to every micro-batch.

    Why built once: each PySpark function call is several Py4J round trips to the driver's JVM
    (more with PySpark's call-site capture on), and the column mapping makes hundreds of them.
    Rebuilding it for every micro-batch took about 0.9 s of a convert micro-batch's 2.3 s on two
    busy cores; applying prebuilt expressions is a handful of calls per step.
    """

    def __init__(self, settings: CpsSinkSettings, *, with_skipped_headers: bool = False,
                 schemas: SchemaLookup | None = None, body_schemas: BodySchemaCheck | None = None) -> None:
        """``schemas``: the writer schemas by id, for the Schema Registry converters;
        ``body_schemas``: with ``messageBodyFormat=avro``, which writer schemas the topic takes."""
        from pyspark.sql import functions as F

        self.settings = settings
        self._with_skipped_headers = with_skipped_headers
        self._columns: _ColumnOutbox | None = None
        self._classified: list[Column | str] = []
        self._exact: Column | None = None
        self._registry = _RegistryColumns(settings, schemas, with_skipped_headers, body_schemas) \
            if uses_registry(settings) else None
        if self._registry is None and (uses_column_path(settings) or uses_compact_json_path(settings)):
            self._columns = _ColumnOutbox(settings, with_skipped_headers)
        if uses_compact_json_path(settings):
            self._classified = _classified_columns(settings)
            self._exact = F.col(_JSON_EXACT)

    def to_outbox(self, bronze_df: DataFrame, *, classified: bool = False) -> DataFrame:
        """See :func:`to_outbox`."""
        if self._registry is not None:
            return self._registry.outbox(bronze_df)
        if self._columns is None:
            return self._reference(bronze_df)
        if self._exact is None:
            return self._columns.apply(bronze_df)
        rows = bronze_df if classified else bronze_df.select(*self._classified)
        in_columns = self._columns.apply(rows.filter(self._exact))
        return in_columns.unionByName(self._reference(rows.filter(~self._exact)))

    def outbox_and_cache(self, bronze_df: DataFrame) -> tuple[DataFrame, DataFrame | None]:
        """A micro-batch's outbox rows and the frame worth persisting while they are read more
        than once (a count, then an append), or None.

        The column path is cheaper to compute twice (a count reads only the error and emptiness
        columns) than to copy every payload into a cache. Schemaless JSON caches its classified
        rows: the JSON pass is the cost, and both halves of the mapping read them. The reference
        path runs Python per record, so its result is cached.
        """
        if self._registry is not None or (self._columns is not None and self._exact is None):  # the column path
            return self.to_outbox(bronze_df), None
        if self._exact is not None:  # schemaless JSON
            classified = bronze_df.select(*self._classified)
            return self.to_outbox(classified, classified=True), classified
        converted = self.to_outbox(bronze_df)
        return converted, converted

    def _reference(self, bronze_df: DataFrame) -> DataFrame:
        """The reference mapper over the bronze rows' Arrow batches."""
        from pubsub_connect.model.frames import map_in_arrow, schema_of
        from pubsub_connect.model.schemas import KAFKA_BRONZE

        columns = _mapped_columns(self.settings)
        return map_in_arrow(bronze_df.select(*columns), _ArrowMapper(self.settings, self._with_skipped_headers),
                            converted_schema(self._with_skipped_headers), schema_of(KAFKA_BRONZE, columns))


def uses_registry(settings: CpsSinkSettings) -> bool:
    """True when a key or value converter is a Schema Registry one (their mapping needs the schemas)."""
    return settings.key_converter in REGISTRY_CONVERTERS or settings.value_converter in REGISTRY_CONVERTERS


class _RegistryColumns:
    """The column mapping of the Schema Registry converters, whose expressions depend on the
    writer schemas a batch holds: their ids are read from the batch first (one small job), each
    unseen one looked up once, and the mapping built once per set of ids (kept while later
    batches bring no new one)."""

    def __init__(self, settings: CpsSinkSettings, schemas: SchemaLookup | None, with_skipped_headers: bool,
                 body_schemas: BodySchemaCheck | None = None):
        if schemas is None:
            raise ValueError("the Schema Registry converters need the writer schemas' lookup")
        if not uses_column_path(settings):
            raise ValueError(f"a Schema Registry converter maps in columns: key.converter={settings.key_converter} and "
                             f"value.converter={settings.value_converter} cannot share that mapping")
        self.settings = settings
        self.lookup = schemas
        self.with_skipped_headers = with_skipped_headers
        self.known: dict[int, str | Exception] = {}
        #: The ids the mapping was built for, and the mapping.
        self.built: tuple[tuple[int, ...], _ColumnOutbox] | None = None
        self.sides = [side for side, name in (("key", settings.key_converter), ("value", settings.value_converter))
                      if name in REGISTRY_CONVERTERS]
        self.body_schemas = body_schemas if settings.message_body_format == AVRO_BODY else None

    def outbox(self, bronze_df: DataFrame) -> DataFrame:
        from pubsub_connect.model.avro.batch import framed_outcome, schema_ids

        ids = schema_ids(bronze_df, self.sides)
        for schema_id in ids:
            if schema_id not in self.known:
                self.known[schema_id] = self._writer_schema(schema_id)
        wanted = tuple(sorted(self.known))
        if self.built is None or self.built[0] != wanted:
            from pyspark.sql import functions as F

            body_name = self.settings.message_body_name
            whole = None if self.settings.message_body_format == CONNECT_BODY else self.settings.message_body_format
            outcomes = {side: framed_outcome(F.col(side), self._bodies() if whole and side == "value" else self.known,
                                             body_name, f"_avro_{side}", _replaced_attributes(self.settings),
                                             as_key=side == "key", whole=whole if side == "value" else None,
                                             json_schema=self.converter(side) in REGISTRY_JSON_SCHEMA_CONVERTERS)
                        for side in self.sides}
            columns = _ColumnOutbox(self.settings, self.with_skipped_headers, outcomes.get("key"),
                                    outcomes.get("value"))
            self.built = (wanted, columns)
        return self.built[1].apply(bronze_df.select(*_mapped_columns(self.settings)))

    def converter(self, side: str) -> str:
        return self.settings.key_converter if side == "key" else self.settings.value_converter

    def _bodies(self) -> dict[int, str | Exception]:
        """The writer schemas as message bodies: one the topic's schema refuses is why its
        records are dead letters."""
        if self.body_schemas is None:
            return self.known
        out: dict[int, str | Exception] = {}
        for schema_id, writer in self.known.items():
            refused = self.body_schemas(writer) if isinstance(writer, str) else None
            out[schema_id] = TopicSchemaError(f"writer schema {schema_id}: {refused}") if refused else writer
        return out

    def _writer_schema(self, schema_id: int) -> str | Exception:
        """The schema's text; an id the registry does not know is the records' fault (kept as the
        reason they are dead-lettered). A registry that cannot be reached raises: transient."""
        from pubsub_connect.model.connect import DataError

        try:
            return self.lookup(schema_id)
        except DataError as exc:
            return exc


def _entries_map(fields: Column, maps: list[Column]) -> Column:
    """A record's field entries and the small maps of the attributes after them as one map, built
    once (each map a row builds checks its keys; joining maps builds them again)."""
    from pyspark.sql import functions as F

    from pubsub_connect.model.avro.batch import ENTRIES

    return F.map_from_entries(F.concat(F.coalesce(fields, F.array().cast(ENTRIES)),
                                       *[F.map_entries(m) for m in maps]))


def _replaced_attributes(settings: CpsSinkSettings) -> dict[str, Column]:
    """The attributes the mapping sets after a record's fields, with when it does: a field of that
    name is replaced (the original writes them into the same map afterwards)."""
    from pyspark.sql import functions as F

    replaced = {KEY_ATTRIBUTE: F.col("key").isNotNull()}
    if settings.metadata_publish:
        ts_ms = F.unix_millis(F.col("timestamp"))
        replaced |= {TOPIC_ATTRIBUTE: F.lit(True), PARTITION_ATTRIBUTE: F.lit(True), OFFSET_ATTRIBUTE: F.lit(True),
                     TIMESTAMP_ATTRIBUTE: ts_ms.isNotNull() & (ts_ms >= 0)}
    return replaced


def _mapped_columns(settings: CpsSinkSettings) -> list[str]:
    """The bronze columns the mapping reads."""
    columns = ["key", "value", "topic", "partition", "offset", "timestamp"]
    return [*columns, "headers"] if settings.headers_publish else columns


class _ColumnOutbox:
    """The mapping as column expressions, in stages: each stage's columns are computed once and
    referenced by name later (one big expression would repeat sub-trees such as the attribute map
    many times, and Spark does not share work across lambda functions). The expressions are built
    here, once, and :meth:`apply` selects them stage by stage from a frame."""

    def __init__(self, s: CpsSinkSettings, with_skipped_headers: bool, key_avro: AvroOutcome | None = None,
                 value_avro: AvroOutcome | None = None) -> None:
        """``key_avro``/``value_avro``: the Schema Registry converters' columns of the key/value."""
        from pyspark.sql import functions as F

        from pubsub_connect.model.schemas import KAFKA_HEADERS

        col = F.col
        key, value = col("key"), col("value")

        # Stage 0 (Schema Registry converters): each writer schema's decoded value, then what the
        # mapping reads of it, each computed once (later stages refer to it more than once).
        self._decoded = [c for outcome in (key_avro, value_avro) if outcome is not None for c in outcome.decoded]
        self._outcomes: list[Column] = []
        if key_avro is not None:  # a key is its text (the "key" attribute)
            key_avro = self._materialized("_avro_key", key_avro, ("text", "error", "error_class"))
        if value_avro is not None:  # a value is the body and the attributes
            value_avro = self._materialized("_avro_value", value_avro, ("body", "attributes", "error", "error_class",
                                                                        "attribute_bytes", "limit_error"))

        # Stage 1: key text, body, value-converter errors, attributes before headers.
        key_text = key_avro.text if key_avro else F.make_valid_utf8(key.cast("string"))
        value_error: Column = F.lit(None).cast("string")
        value_error_class: Column = F.lit("ConverterError")
        # Number converters produce the same big-endian bytes they read: their body is the input
        # once its length is right.
        if value_avro is not None:
            body = value_avro.body
            value_error = F.concat(F.lit("value: "), value_avro.error)
            value_error_class = value_avro.error_class
        elif s.value_converter == STRING_CONVERTER:
            body = utf8_bytes(F.make_valid_utf8(value.cast("string")))
        elif s.value_converter == JSON_CONVERTER:  # schemaless, records whose compact text is exact
            body = F.coalesce(F.encode(col(_JSON_REWRITTEN), "UTF-8"), value)
        else:
            body = value
        if s.value_converter in NUMBER_CONVERTER_TYPES:
            width = {Type.INT16: 2, Type.INT32: 4, Type.INT64: 8, Type.FLOAT32: 4, Type.FLOAT64: 8}[
                NUMBER_CONVERTER_TYPES[s.value_converter]
            ]
            short = s.value_converter.rsplit(".", 1)[-1]
            value_error = F.when(
                value.isNotNull() & (F.octet_length(value) != width),
                F.format_string(f"value: {short}: expected {width} bytes, got %d", F.octet_length(value)),
            )
        elif s.value_converter == BOOLEAN_CONVERTER:
            value_error = F.when(
                value.isNotNull() & (F.octet_length(value) != 1),
                F.format_string("value: BooleanConverter: expected 1 byte, got %d", F.octet_length(value)),
            ).when(
                value.isNotNull() & ~F.hex(value).isin("00", "01"),
                F.format_string("value: BooleanConverter: expected byte 00 or 01, got %s", F.lower(F.hex(value))),
            )

        if key_avro is not None:  # the key's converter fails first, as in Connect
            value_error = F.coalesce(F.concat(F.lit("key: "), key_avro.error), value_error)
            value_error_class = F.when(key_avro.error.isNotNull(), key_avro.error_class).otherwise(value_error_class)

        # The attributes before headers, as plain map functions (code-generated; the higher-order
        # filter/aggregate functions are interpreted per row): a map per condition, concatenated.
        # Their names are distinct, so the concatenation never overwrites. ``_base_bytes`` is their
        # keys' and values' UTF-8 size, known without walking the map.
        string_map = "map<string,string>"
        no_attributes = F.create_map().cast(string_map)
        maps = [F.when(key.isNotNull(), F.create_map(F.lit(KEY_ATTRIBUTE), key_text)).otherwise(no_attributes)]
        sizes = [F.when(key.isNotNull(), len(KEY_ATTRIBUTE) + F.octet_length(key_text)).otherwise(0)]
        if value_avro is not None:  # a record's fields first, without those the attributes below replace
            sizes.insert(0, value_avro.attribute_bytes)
        if s.metadata_publish:
            ts_ms = F.unix_millis(col("timestamp"))
            has_ts = ts_ms.isNotNull() & (ts_ms >= 0)
            metadata = [
                (TOPIC_ATTRIBUTE, col("topic")),
                (PARTITION_ATTRIBUTE, col("partition").cast("string")),
                (OFFSET_ATTRIBUTE, col("offset").cast("string")),
            ]
            maps.append(F.create_map(*[c for name, text in metadata for c in (F.lit(name), text)]))
            maps.append(F.when(has_ts, F.create_map(F.lit(TIMESTAMP_ATTRIBUTE), ts_ms.cast("string")))
                        .otherwise(no_attributes))
            sizes += [len(name) + F.octet_length(text) for name, text in metadata]
            sizes.append(F.when(has_ts, len(TIMESTAMP_ATTRIBUTE) + F.octet_length(ts_ms.cast("string"))).otherwise(0))
        base_bytes = sizes[0]
        for size_part in sizes[1:]:
            base_bytes = base_bytes + size_part
        stage1 = [
            col("topic"),
            col("partition").cast("int").alias("partition"),
            col("offset").cast("long").alias("offset"),
            key,
            value,
            key_text.alias("_key_text"),
            F.coalesce(body, F.expr("X''")).alias("_data"),
            value_error.alias("_value_error"),
            value_error_class.alias("_value_error_class"),
            (value_avro.limit_error if value_avro else F.lit(None).cast("string")).alias("_fields_limit"),
            (_entries_map(value_avro.attributes, maps) if value_avro else
             maps[0] if len(maps) == 1 else F.map_concat(*maps)).alias("_base"),
            base_bytes.cast("long").alias("_base_bytes"),
        ]
        if s.headers_publish:
            headers = F.coalesce(col("headers"), F.array().cast(KAFKA_HEADERS))
            stage1.append(F.size(headers).alias("_header_count"))
            # A header value's text is its UTF-8 decoding, each malformed byte sequence replaced by
            # U+FFFD (as Connect's header converters decode it); the size limit applies to that text.
            texts = F.transform(
                F.filter(headers, lambda h: h["key"].isNotNull() & h["value"].isNotNull()),
                lambda h: F.struct(h["key"].alias("key"), F.make_valid_utf8(h["value"].cast("string")).alias("value")),
            )
            stage1.append(
                F.filter(
                    texts,
                    lambda h: (
                        (F.octet_length(h["key"]) <= MAX_ATTRIBUTE_KEY_BYTES)
                        & (F.octet_length(h["value"]) <= MAX_ATTRIBUTE_VALUE_BYTES)
                    ),
                ).alias("_valid")
            )
        self._stage1 = stage1

        # Stage 2: headers. The sequential rule (apply a header when its name is already an attribute
        # or while there are fewer than 100; later headers overwrite) as set logic: the applied names
        # are the attribute names that also appear in headers plus the first new header names that
        # fit under the cap, each taking the value of its last valid occurrence. Records without
        # valid headers (the common case) skip all of it: their ``_admitted`` is null.
        if s.headers_publish:
            base_keys = F.map_keys(col("_base"))
            header_keys = F.transform(col("_valid"), lambda h: h["key"])
            room = F.greatest(F.lit(MAX_ATTRIBUTES) - F.size(col("_base")), F.lit(0))
            self._admitted = F.when(
                F.size(col("_valid")) > 0,
                F.concat(
                    F.filter(base_keys, lambda k: F.array_contains(header_keys, k)),
                    F.slice(F.array_except(header_keys, base_keys), F.lit(1), room),
                ),
            )
            admitted = col("_admitted")
            header_map = F.map_from_entries(
                F.transform(
                    admitted,
                    lambda k: F.struct(
                        k.alias("key"),
                        F.element_at(F.filter(col("_valid"), lambda h: h["key"] == k), -1)["value"].alias("value"),
                    ),
                )
            )
            attributes = F.when(admitted.isNull(), col("_base")).otherwise(
                F.map_concat(F.map_filter(col("_base"), lambda k, v: ~F.array_contains(admitted, k)), header_map)
            )
            applied = F.size(F.filter(col("_valid"), lambda h: F.array_contains(admitted, h["key"])))
            skipped = col("_header_count") - F.when(admitted.isNull(), F.lit(0)).otherwise(applied)
            attribute_bytes = F.when(admitted.isNull(), col("_base_bytes")).otherwise(
                F.aggregate(
                    F.map_entries(attributes),
                    F.lit(0).cast("long"),
                    lambda acc, e: acc + F.octet_length(e["key"]) + F.octet_length(e["value"]),
                )
            )
        else:
            self._admitted = None
            attributes = col("_base")
            skipped = F.lit(0)
            attribute_bytes = col("_base_bytes")

        if s.ordering_key_source == "key":
            ordering = F.when(key.isNotNull() & (col("_key_text") != ""), col("_key_text")).otherwise(F.lit(""))
        elif s.ordering_key_source == "partition":
            ordering = col("partition").cast("string")
        else:
            ordering = F.lit("")
        self._stage2 = [
            "topic",
            "partition",
            "offset",
            "key",
            "value",
            "_data",
            "_value_error",
            "_value_error_class",
            "_fields_limit",
            attributes.alias("_attributes"),
            attribute_bytes.alias("_attribute_bytes"),
            ordering.alias("_ordering"),
            skipped.cast("int").alias("_skipped"),
        ]

        # Stage 3: nothing to publish, and Pub/Sub's limits. Without a record's fields as attributes
        # only the "key" attribute can break one here: metadata values are short, header names and
        # values are filtered, and there are at most 5 attributes besides the capped headers.
        data, attrs, ordering_col = col("_data"), col("_attributes"), col("_ordering")
        publishable = (F.octet_length(data) > 0) | (F.size(attrs) > 0)
        key_value_bytes = F.octet_length(F.element_at(attrs, F.lit(KEY_ATTRIBUTE)))
        size = F.octet_length(data) + col("_attribute_bytes") + F.octet_length(ordering_col)
        too_many = F.when(F.size(attrs) > MAX_ATTRIBUTES, F.format_string(
            f"message has %d attributes; Pub/Sub allows at most {MAX_ATTRIBUTES}", F.size(attrs)))
        limit_error = F.coalesce(too_many, col("_fields_limit"), (
            F.when(
                key_value_bytes > MAX_ATTRIBUTE_VALUE_BYTES,
                F.format_string(
                    f"attribute {quote_name(KEY_ATTRIBUTE)} value is %d bytes; "
                    f"Pub/Sub allows at most {MAX_ATTRIBUTE_VALUE_BYTES}",
                    key_value_bytes,
                ),
            )
            .when(
                F.octet_length(ordering_col) > MAX_ORDERING_KEY_BYTES,
                F.format_string(
                    f"ordering key is %d bytes; Pub/Sub allows at most {MAX_ORDERING_KEY_BYTES}",
                    F.octet_length(ordering_col),
                ),
            )
            .when(
                size > MAX_MESSAGE_BYTES,
                F.format_string(
                    "message is %d bytes (data, attribute keys and values, ordering key); "
                    f"Pub/Sub accepts at most {MAX_MESSAGE_BYTES}",
                    size,
                ),
            )
        ))
        self._publishable = publishable
        self._limit_error = F.when(col("_value_error").isNull() & col("_publishable"), limit_error)

        error_message = F.coalesce(col("_value_error"), col("_limit_error"))
        error_class = F.when(col("_value_error").isNotNull(), col("_value_error_class")).when(
            col("_limit_error").isNotNull(), F.lit(PubsubLimitError.error_class)
        )
        ok = error_message.isNull() & col("_publishable")
        failed = error_message.isNotNull()
        out = [
            F.when(ok, data).alias("data"),
            F.when(ok, attrs).alias("attributes"),
            F.when(ok, ordering_col).alias("ordering_key"),
            col("topic"),
            col("partition"),
            col("offset"),
            F.when(failed, key).alias("key"),
            F.when(failed, value).alias("value"),
            error_class.alias("error_class"),
            error_message.alias("error_message"),
        ]
        if with_skipped_headers:
            out.append(col("_skipped").alias("skipped_headers"))
        self._out = out

    def _materialized(self, prefix: str, outcome: AvroOutcome, used: tuple[str, ...]) -> AvroOutcome:
        """The ``used`` columns of ``outcome`` added to stage 0 under ``prefix``; the outcome of
        their names (the others are never read)."""
        from dataclasses import replace

        from pyspark.sql import functions as F

        named = {}
        for part in used:
            self._outcomes.append(getattr(outcome, part).alias(f"{prefix}_{part}"))
            named[part] = F.col(f"{prefix}_{part}")
        return replace(outcome, decoded=(), **named)

    def apply(self, df: DataFrame) -> DataFrame:
        """Bronze rows (the columns the mapping reads) -> outbox rows (:func:`converted_schema`)."""
        if self._decoded:
            from pyspark.sql import functions as F

            for decoded in self._decoded:  # one projection each: a later one may read an earlier one
                df = df.select(F.col("*"), decoded)
            df = df.select(F.col("*"), *self._outcomes)
        staged = df.select(*self._stage1)
        if self._admitted is not None:
            staged = staged.withColumn("_admitted", self._admitted)
        staged = staged.select(*self._stage2)
        staged = staged.withColumn("_publishable", self._publishable)
        return staged.withColumn("_limit_error", self._limit_error).select(*self._out)


class _ArrowMapper:
    """``mapInArrow`` function: each Arrow batch mapped with the reference implementation.

    A module-level class (not a closure) so Spark pickles it by reference; workers import this
    module, hence the editable/wheel install requirement.
    """

    def __init__(self, settings: CpsSinkSettings, with_skipped_headers: bool) -> None:
        self.settings = settings
        self.with_skipped_headers = with_skipped_headers

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        mapper = CpsSinkMapper(self.settings)
        for batch in batches:
            yield map_arrow_batch(mapper, batch, self.with_skipped_headers)


@lru_cache(maxsize=2)
def _arrow_schema(with_skipped_headers: bool) -> pa.Schema:
    from pubsub_connect.model.schemas import to_arrow

    return to_arrow(converted_schema(with_skipped_headers))


def map_arrow_batch(mapper: CpsSinkMapper, batch: pa.RecordBatch, with_skipped_headers: bool = False) -> pa.RecordBatch:
    """Map one Arrow batch of bronze columns to an outbox batch (columns converted once per batch)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = batch.num_rows
    names = batch.schema.names
    keys = batch.column("key").to_pylist()
    values = batch.column("value").to_pylist()
    topic_col = batch.column("topic")
    partition_col = batch.column("partition")
    offset_col = batch.column("offset")
    topics = topic_col.to_pylist()
    partitions = partition_col.to_pylist()
    offsets = offset_col.to_pylist()
    ts_col = batch.column("timestamp")
    if pa.types.is_timestamp(ts_col.type):
        micros = pc.cast(pc.cast(ts_col, pa.timestamp("us", tz=ts_col.type.tz)), pa.int64()).to_pylist()
        timestamps = [None if t is None else t // 1000 for t in micros]
    else:  # already epoch milliseconds
        timestamps = ts_col.to_pylist()
    header_lists = batch.column("headers").to_pylist() if "headers" in names else [None] * n

    data: list[bytes | None] = [None] * n
    attributes: list[list[tuple[str, str]] | None] = [None] * n
    ordering: list[str | None] = [None] * n
    out_keys: list[bytes | None] = [None] * n
    out_values: list[bytes | None] = [None] * n
    error_class: list[str | None] = [None] * n
    error_message: list[str | None] = [None] * n
    skipped: list[int] = [0] * n
    for i in range(n):
        hdrs = header_lists[i]
        try:
            result = mapper.map_values(
                keys[i],
                values[i],
                topics[i],
                partitions[i],
                offsets[i],
                timestamps[i],
                [(h["key"], h["value"]) for h in hdrs] if hdrs else None,
            )
        except DataError as e:
            error_class[i] = e.error_class
            error_message[i] = str(e)
            out_keys[i] = keys[i]
            out_values[i] = values[i]
            continue
        skipped[i] = result.skipped_headers
        message = result.message
        if message is not None:
            data[i] = message.data
            attributes[i] = list(message.attributes.items())
            ordering[i] = message.ordering_key
    arrays = [
        pa.array(data, pa.binary()),
        pa.array(attributes, pa.map_(pa.string(), pa.string())),
        pa.array(ordering, pa.string()),
        topic_col.cast(pa.string()),
        partition_col.cast(pa.int32()),
        offset_col.cast(pa.int64()),
        pa.array(out_keys, pa.binary()),
        pa.array(out_values, pa.binary()),
        pa.array(error_class, pa.string()),
        pa.array(error_message, pa.string()),
    ]
    if with_skipped_headers:
        arrays.append(pa.array(skipped, pa.int32()))
    return pa.RecordBatch.from_arrays(arrays, schema=_arrow_schema(with_skipped_headers))
