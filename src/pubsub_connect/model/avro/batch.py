"""Schema Registry Avro → what Google's sink publishes, as Spark column expressions: the JVM path
of :mod:`.reference` (same rules; tests hold the two to identical messages).

Per writer schema (the batch's distinct ids, looked up by the caller once per id), the framed
bytes are decoded by Spark's ``from_avro`` with that schema as the writer's and a reader schema
that is the same but for the logical types Connect does not convert (``timestamp-micros``,
``local-timestamp-*``, …) and those whose Spark type would lose the raw number (``date``,
``time-millis``, ``timestamp-millis``): those come out as the plain ints and longs Connect sees, and
their text is built from the number. Then, by the writer schema's Connect schema:

- the message body (``handleValue``): a record's ``messageBodyName`` field, or the value itself,
  as big-endian numbers, IEEE 754 floats, UTF-8 text or the raw bytes;
- the attributes: a record's other fields (null ones left out), or a map's entries, as Java's
  ``toString`` text (:func:`~pubsub_connect.model.converters.java_text`: numbers, ``BigDecimal``,
  ``java.util.Date`` in UTC, and compact JSON for arrays, maps and records);
- the error of a record Google's task fails on: a nested record, map or union among a record's
  fields (fixed per writer schema), a null array element (a logical value as the body is its base
  type's bytes, as JSON's are: README, "Differences"); and of
  bytes that are not framed, name an unknown id or do not decode (``from_avro`` in ``PERMISSIVE``
  mode: a record that does not decode comes out with its required fields null).

One ``CASE`` over the id picks the writer schema's expressions; every branch has the same Spark
types, so one projection serves a batch of several writer schemas (a topic whose schema evolved).

*Divergences of this path*: floats are printed by the JVM Spark runs on (Java 17's
``Float.toString`` prints a few values with more digits than the reference's, as Google's
connector does on Java 17); decimals of precision above 38 (Spark's limit) are dead-lettered
with that reason; a union of ``int`` and ``long`` (or ``float`` and ``double``) is widened by
Spark, so its Union struct names the wider branch.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from pubsub_connect.model.avro.reference import AvroDataError
from pubsub_connect.model.avro.schema import UNION_NAME, AvroSchemaError, AvroType, connect_schema, parse_schema
from pubsub_connect.model.avro.wire import (
    HEADER_BYTES,
    MAGIC_BYTE,
    UnknownSchemaIdError,
    WireFormatError,
    wire_format_message,
)
from pubsub_connect.model.connect import DATE, DATE_NAMES, DECIMAL, Schema, Type
from pubsub_connect.model.cps_sink.settings import (
    MAX_ATTRIBUTE_KEY_BYTES,
    MAX_ATTRIBUTE_VALUE_BYTES,
    UnsupportedValueError,
)
from pubsub_connect.model.frames import utf8_bytes

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: Spark's largest decimal precision.
MAX_SPARK_PRECISION = 38
#: The logical types the reader schema keeps (Spark decodes them to what the text needs).
_KEPT_LOGICAL = frozenset({"decimal"})
_DATE_TEXT = "EEE MMM dd HH:mm:ss 'UTC' y"
_EPOCH = datetime.datetime(1970, 1, 1)
UNKNOWN_SCHEMA = UnknownSchemaIdError.error_class


@dataclass(frozen=True)
class AvroOutcome:
    """The columns of one framed column (a record's key or value), for every writer schema:
    ``text`` (Java's text of the value, a key's attribute), ``body`` (the message data),
    ``attributes`` (the attributes as ``array<struct<key,value>>`` entries, in order, each name
    once: a caller adds its own before building the one map), ``error`` and ``error_class`` (null
    when it maps), ``attribute_bytes`` and ``limit_error``, and ``decoded`` (see below)."""

    text: Column
    body: Column
    attributes: Column
    error: Column
    error_class: Column
    #: The attributes' UTF-8 size (names and texts), and the first of Pub/Sub's per-attribute limits
    #: they break (null: none).
    attribute_bytes: Column
    limit_error: Column
    #: Columns to add in a projection before the others read them: each writer schema's decoded
    #: value, computed once per row (referenced by many expressions, ``from_avro`` inlined in each
    #: would decode the bytes once per attribute).
    decoded: tuple[Column, ...] = ()


def reader_schema(writer_text: str) -> str:
    """``writer_text`` with the logical types left out that Spark would decode to other values
    than Connect's raw numbers (all but ``decimal``)."""

    def strip(node: Any) -> Any:
        if isinstance(node, list):
            return [strip(n) for n in node]
        if not isinstance(node, dict):
            return node
        out = {k: strip(v) for k, v in node.items()}
        if out.get("logicalType") not in (None, *_KEPT_LOGICAL):
            del out["logicalType"]
        return out

    return json.dumps(strip(json.loads(writer_text)))


def schema_ids(frame: DataFrame, columns: list[str]) -> list[int]:
    """The writer schema ids of ``columns`` (framed bytes) in ``frame``: one small job whose
    result is the distinct ids, never the data."""
    from pyspark.sql import functions as F

    ids = [F.when(_framed_ok(F.col(c)), _schema_id(F.col(c))) for c in columns]
    found = frame.select(F.explode(F.array(*ids)).alias("id")).where(F.col("id").isNotNull()).distinct().collect()
    return sorted(int(row.id) for row in found)


def _framed_ok(framed: Column) -> Column:
    from pyspark.sql import functions as F

    return (F.octet_length(framed) >= HEADER_BYTES) & (F.substring(framed, 1, 1) == F.lit(bytes([MAGIC_BYTE])))


def _schema_id(framed: Column) -> Column:
    from pyspark.sql import functions as F

    return F.conv(F.hex(F.substring(framed, 2, 4)), 16, 10).cast("bigint")


def framed_outcome(framed: Column, schemas: Mapping[int, str | Exception], body_name: str,
                   name: str = "_avro", replaced: Mapping[str, Column] | None = None) -> AvroOutcome:
    """The :class:`AvroOutcome` of the framed bytes in ``framed``: ``schemas`` holds each id of the
    batch with its writer schema's text, or why it has none (an unknown id: the registry's error);
    ``name`` prefixes the decoded columns (one per writer schema); ``replaced``: the attribute
    names the caller sets after a record's fields, with when it does (a field of that name is then
    left out, as the original overwrites it)."""
    from pyspark.sql import functions as F

    first = F.substring(framed, 1, 1)
    framed_ok = _framed_ok(framed)
    prefix, suffix = wire_format_message(b"\xab").split("ab", 1)
    wire_error = F.when((F.octet_length(framed) == 0) | (first == F.lit(bytes([MAGIC_BYTE]))),
                        F.lit(wire_format_message(b""))) \
        .otherwise(F.concat(F.lit(prefix), F.lower(F.hex(first)), F.lit(suffix)))
    schema_id = _schema_id(framed)
    payload = F.substring(framed, HEADER_BYTES + 1, 2_147_483_647)
    mapping = _ValueMapping(body_name, replaced or {})
    outcomes = {k: _schema_outcome(payload, k, v, mapping, f"{name}_{k}",
                                   framed.isNotNull() & framed_ok & (schema_id == F.lit(k)))
                for k, v in sorted(schemas.items())}
    not_looked_up = F.concat(F.lit("no writer schema was looked up for id "), schema_id.cast("string"))
    unseen = _failure(not_looked_up, F.lit(UNKNOWN_SCHEMA))

    def pick(part: Callable[[AvroOutcome], Column]) -> Column:
        chosen = part(unseen)
        for k, outcome in reversed(list(outcomes.items())):
            chosen = F.when(schema_id == F.lit(k), part(outcome)).otherwise(chosen)
        return F.when(framed.isNotNull() & framed_ok, chosen)

    def failed(part: Callable[[AvroOutcome], Column], wire: Column) -> Column:
        return F.when(framed.isNotNull(), F.when(~framed_ok, wire).otherwise(pick(part)))

    return AvroOutcome(pick(lambda o: o.text), pick(lambda o: o.body), pick(lambda o: o.attributes),
                       failed(lambda o: o.error, wire_error),
                       failed(lambda o: o.error_class, F.lit(WireFormatError.error_class)),
                       F.coalesce(pick(lambda o: o.attribute_bytes), F.lit(0).cast("long")),
                       pick(lambda o: o.limit_error),
                       tuple(c for o in outcomes.values() for c in o.decoded))


def _schema_outcome(payload: Column, schema_id: int, writer: str | Exception, mapping: _ValueMapping,
                    decoded_name: str, chosen: Column) -> AvroOutcome:
    """One writer schema's outcome; its value is decoded into column ``decoded_name`` for the rows
    where ``chosen`` (their id is this schema's)."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    if isinstance(writer, Exception):
        return _failure(F.lit(str(writer)), F.lit(getattr(writer, "error_class", UNKNOWN_SCHEMA)))
    try:
        avro = parse_schema(writer)
        schema = connect_schema(avro)
        too_precise = _too_precise(avro)
        if too_precise:
            raise AvroSchemaError(f"decimal precision {too_precise} is above Spark's {MAX_SPARK_PRECISION}")
    except AvroSchemaError as exc:
        return _failure(F.lit(str(exc)), F.lit(AvroSchemaError.error_class))
    value = F.col(decoded_name)
    if avro.kind == "bytes":  # written as is after the header, not Avro-encoded
        decode, undecodable = payload, F.lit(False)
    elif avro.kind == "union" and schema.name == UNION_NAME:
        decode, undecodable = _top_level_union(payload, writer, avro)
    else:
        decode = from_avro(payload, writer, {"avroSchema": reader_schema(writer), "mode": "PERMISSIVE"})
        undecodable = _undecodable(avro, schema, value)
    body, attributes, error, attribute_bytes, limit_error = mapping.message(schema, value)
    return AvroOutcome(
        text=F.when(~undecodable, java_text_col(schema, value)),
        body=F.when(~undecodable, body),
        attributes=F.when(~undecodable, attributes),
        attribute_bytes=attribute_bytes,
        limit_error=F.when(~undecodable & error.isNull(), limit_error),
        error=F.when(undecodable, F.lit(f"the bytes do not decode with writer schema {schema_id} "
                                        "(or the datum is null)")).otherwise(error),
        error_class=F.when(undecodable, F.lit(AvroDataError.error_class))
        .when(error.isNotNull(), F.lit(UnsupportedValueError.error_class)),
        decoded=(F.when(chosen, decode).alias(decoded_name),),
    )


def _failure(error: Column, error_class: Column) -> AvroOutcome:
    """The outcome of records that cannot be mapped at all (their id has no usable schema)."""
    from pyspark.sql import functions as F

    return AvroOutcome(F.lit(None).cast("string"), F.lit(None).cast("binary"), F.lit(None).cast(ENTRIES),
                       error, error_class, F.lit(0).cast("long"), F.lit(None).cast("string"))


def _top_level_union(payload: Column, writer: str, avro: AvroType) -> tuple[Column, Column]:
    """A top-level union of several types (Spark's ``from_avro`` decodes none but ``[null, T]``):
    the branch index is the datum's first byte (a zig-zag varint, one byte below 64 branches), each
    branch is decoded from the rest with its own schema, and the Union struct gets the decoded
    branch's member set. A null branch, or an index beyond the branches, does not decode."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    branches = json.loads(writer)
    index = F.conv(F.hex(F.substring(payload, 1, 1)), 16, 10).cast("int")
    branch = F.when(index % 2 == 0, index / 2).cast("int")  # non-negative indices only
    rest = F.substring(payload, 2, 2_147_483_647)
    members = []
    for position, (declared, parsed) in enumerate(zip(branches, avro.branches, strict=True)):
        if parsed.kind == "null":
            continue
        text = json.dumps(declared)
        decoded = from_avro(rest, text, {"avroSchema": reader_schema(text), "mode": "PERMISSIVE"})
        members.append(F.when(branch == F.lit(position), decoded).alias(f"member{len(members)}"))
    non_null = [i for i, b in enumerate(avro.branches) if b.kind != "null"]
    return F.struct(*members), ~branch.isin(*non_null) | branch.isNull()


def _too_precise(avro: AvroType, seen: set[int] | None = None) -> int | None:
    seen = set() if seen is None else seen
    if id(avro) in seen:
        return None
    seen.add(id(avro))
    if avro.logical == "decimal" and int(avro.props.get("precision", 0)) > MAX_SPARK_PRECISION:
        return int(avro.props["precision"])
    for child in [*(t for _, t in avro.fields), *avro.branches, *([avro.items] if avro.items else [])]:
        found = _too_precise(child, seen)
        if found:
            return found
    return None


def _undecodable(avro: AvroType, schema: Schema, value: Column) -> Column:
    """True where ``from_avro`` (PERMISSIVE) gave up: a null value, or a record whose required
    fields are null (it yields a record of nulls for bytes it cannot read)."""
    from pyspark.sql import functions as F

    if avro.kind == "bytes":
        return F.lit(False)
    missing = value.isNull()
    if schema.type is Type.STRUCT and avro.kind == "record":
        required = [f.name for f in schema.fields if not f.schema.optional]
        if required:
            missing = missing | value.getField(required[0]).isNull()
    return missing


class _ValueMapping:
    """``handleValue`` as expressions over one decoded value and its Connect schema.

    A record's attributes are built without higher-order functions (Spark interprets those per
    row): its fields are known, so the null ones are left out by ``array_compact``, the ones a
    later attribute replaces (``replaced``) by a condition, and their size and Pub/Sub's limits are
    sums and checks per field. A map's entries are only known per row: they take the higher-order
    functions."""

    def __init__(self, body_name: str, replaced: Mapping[str, Column]):
        self.body_name = body_name
        self.replaced = replaced

    def message(self, schema: Schema, value: Column) -> tuple[Column, Column, Column, Column, Column]:
        """(body, attributes, error, attribute bytes, limit error) of a non-null value."""
        from pyspark.sql import functions as F

        none = F.lit(None).cast("string")
        if schema.type is Type.STRUCT:
            return self._struct(schema, value)
        if schema.type is Type.MAP:
            return self._map(schema, value)
        body, error = body_col(schema, value)
        return body, _no_attributes(), error, F.lit(0).cast("long"), none

    def _struct(self, schema: Schema, value: Column) -> tuple[Column, Column, Column, Column, Column]:
        from pyspark.sql import functions as F

        from pubsub_connect.model.cps_sink.reference import quote_name

        none = F.lit(None).cast("string")
        for f in schema.fields:  # Google's task fails on such a field, null or not
            if f.schema.type in (Type.MAP, Type.STRUCT):
                message = (f"struct field {quote_name(f.name)} is a nested {f.schema.type.value.upper()}; "
                           "Pub/Sub attributes cannot hold it")
                return F.lit(b""), _no_attributes(), F.lit(message), F.lit(0).cast("long"), none
        body: Column = F.lit(b"")
        error: Column = none
        entries, sizes, limits = [], [], []
        for position, f in enumerate(schema.fields):
            field_value = _field(value, schema, position)
            if f.name == self.body_name:
                field_body, field_error = body_col(f.schema, field_value)
                body = F.coalesce(F.when(field_value.isNotNull(), field_body), F.lit(b""))
                error = F.when(field_value.isNotNull(), field_error)
                continue
            text = java_text_col(f.schema, field_value)
            if f.name in self.replaced:
                text = F.when(~self.replaced[f.name], text)
            entries.append(F.when(text.isNotNull(), F.struct(F.lit(f.name).alias("key"), text.alias("value"))))
            name_bytes = len(f.name.encode("utf-8"))
            sizes.append(F.coalesce(F.octet_length(text) + F.lit(name_bytes), F.lit(0)))
            if name_bytes > MAX_ATTRIBUTE_KEY_BYTES:
                limits.append(F.when(text.isNotNull(), F.lit(
                    f"attribute key {quote_name(f.name)} is {name_bytes} bytes; "
                    f"Pub/Sub allows at most {MAX_ATTRIBUTE_KEY_BYTES}")))
            limits.append(F.when(F.octet_length(text) > MAX_ATTRIBUTE_VALUE_BYTES, F.format_string(
                f"attribute {quote_name(f.name)} value is %d bytes; Pub/Sub allows at most {MAX_ATTRIBUTE_VALUE_BYTES}",
                F.octet_length(text))))
        if not entries:
            return body, _no_attributes(), error, F.lit(0).cast("long"), none
        attributes = F.array_compact(F.array(*entries))
        return body, attributes, error, sum(sizes[1:], sizes[0]).cast("long"), F.coalesce(*limits, none)

    def _map(self, schema: Schema, value: Column) -> tuple[Column, Column, Column, Column, Column]:
        from pyspark.sql import functions as F

        assert schema.key_schema is not None and schema.value_schema is not None
        key_schema, value_schema = schema.key_schema, schema.value_schema
        present = F.map_filter(value, lambda k, v: v.isNotNull())
        texts = F.transform(F.map_entries(present), lambda e: F.struct(
            java_text_col(key_schema, e["key"]).alias("key"), java_text_col(value_schema, e["value"]).alias("value")))
        body_text = F.try_element_at(F.filter(texts, lambda e: e["key"] == F.lit(self.body_name)), F.lit(1))["value"]
        attributes = F.map_from_entries(F.filter(texts, lambda e: e["key"] != F.lit(self.body_name)))
        for name, condition in self.replaced.items():
            attributes = F.when(condition, F.map_filter(attributes, _other_than(name))).otherwise(attributes)
        entries = F.map_entries(attributes)
        size = F.aggregate(entries, F.lit(0).cast("long"),
                           lambda acc, e: acc + F.octet_length(e["key"]) + F.octet_length(e["value"]))
        return (F.coalesce(utf8_bytes(body_text), F.lit(b"")), entries, F.lit(None).cast("string"), size,
                _entry_limit_errors(entries))


def _other_than(name: str) -> Callable[[Column, Column], Column]:
    """A ``map_filter`` function keeping the entries not named ``name``."""
    from pyspark.sql import functions as F

    return lambda key, _value: key != F.lit(name)


#: The attribute entries' type.
ENTRIES = "array<struct<key:string,value:string>>"


def _no_attributes() -> Column:
    from pyspark.sql import functions as F

    return F.array().cast(ENTRIES)


def _entry_limit_errors(entries: Column) -> Column:
    """The first attribute name or value over Pub/Sub's size, of attributes known only per row."""
    from pyspark.sql import functions as F

    oversized = F.filter(entries, lambda e: (F.octet_length(e["key"]) > MAX_ATTRIBUTE_KEY_BYTES)
                         | (F.octet_length(e["value"]) > MAX_ATTRIBUTE_VALUE_BYTES))
    first = F.try_element_at(oversized, F.lit(1))
    quoted = F.to_json(F.array(F.when(F.length(first["key"]) <= 64, first["key"])
                               .otherwise(F.concat(F.substring(first["key"], 1, 64), F.lit("...")))))
    name = F.substring(quoted, 2, F.length(quoted) - 2)
    return (F.when(F.octet_length(first["key"]) > MAX_ATTRIBUTE_KEY_BYTES, F.format_string(
        f"attribute key %s is %d bytes; Pub/Sub allows at most {MAX_ATTRIBUTE_KEY_BYTES}",
        name, F.octet_length(first["key"])))
        .when(first.isNotNull(), F.format_string(
            f"attribute %s value is %d bytes; Pub/Sub allows at most {MAX_ATTRIBUTE_VALUE_BYTES}",
            name, F.octet_length(first["value"]))))


def _field(value: Column, schema: Schema, position: int) -> Column:
    """A record field, or a Union struct's branch (Spark names those ``member<i>``)."""
    if schema.name == UNION_NAME:
        return value.getField(f"member{position}")
    return value.getField(schema.fields[position].name)


def body_col(schema: Schema, value: Column) -> tuple[Column, Column]:
    """(body, error) of a value that is the message data (``handleValue`` of a non-struct)."""
    from pyspark.sql import functions as F

    none = F.lit(None).cast("string")
    if schema.name == DECIMAL:  # its unscaled bytes (the base type's), as JSON's Decimal
        return _two_complement(F.regexp_replace(value.cast("string"), "[.]", "").cast("decimal(38,0)")), none
    t = schema.type
    if t.is_integer:
        digits = {Type.INT8: 2, Type.INT16: 4, Type.INT32: 8, Type.INT64: 16}[t]
        return _big_endian(value.cast("bigint"), digits), none
    if t is Type.FLOAT32:
        return _big_endian(F.call_function("reflect", F.lit("java.lang.Float"), F.lit("floatToIntBits"),
                                           value).cast("bigint"), 8), none
    if t is Type.FLOAT64:
        return _big_endian(F.call_function("reflect", F.lit("java.lang.Double"), F.lit("doubleToLongBits"),
                                           value).cast("bigint"), 16), none
    if t is Type.BOOLEAN:
        return F.when(value, F.lit(b"\x01")).otherwise(F.lit(b"\x00")), none
    if t is Type.STRING:
        return utf8_bytes(value), none
    if t is Type.BYTES:
        return value, none
    if t is Type.ARRAY:
        assert schema.value_schema is not None
        element = schema.value_schema
        if element.type in (Type.MAP, Type.STRUCT):
            return F.lit(b""), F.lit(f"arrays of {element.type.value.upper()} are not supported; "
                                     "only arrays of primitives")
        encoded = F.transform(value, lambda x: F.hex(body_col(element, x)[0]))
        null_element = F.exists(value, lambda x: x.isNull())
        return (F.unhex(F.array_join(encoded, "")),
                F.when(null_element, F.lit("array has a null element")).otherwise(
                    F.try_element_at(F.filter(F.transform(value, lambda x: body_col(element, x)[1]),
                                              lambda e: e.isNotNull()), F.lit(1))))
    raise AvroSchemaError(f"no body for a {t.value} value")  # pragma: no cover - MAP/STRUCT handled above


def _big_endian(number: Column, hex_digits: int) -> Column:
    """The two's-complement bytes of a bigint, the last ``hex_digits`` / 2 of its 8."""
    from pyspark.sql import functions as F

    return F.unhex(F.substring(F.lpad(F.hex(number), 16, "0"), 17 - hex_digits, hex_digits))


def java_text_col(schema: Schema, value: Column) -> Column:
    """:func:`~pubsub_connect.model.converters.java_text` of a decoded value (null stays null)."""
    from pyspark.sql import functions as F

    name = schema.name
    if name == DECIMAL:
        return _big_decimal_text(value, int(schema.parameter("scale") or 0))
    if name in DATE_NAMES:
        millis = value.cast("bigint") * F.lit(86_400_000) if name == DATE else value.cast("bigint")
        return _date_text(millis)
    t = schema.type
    if t in (Type.ARRAY, Type.MAP, Type.STRUCT):
        return json_col(schema, value)
    if t is Type.BYTES:
        return F.make_valid_utf8(value.cast("string"))
    return value.cast("string")


def _date_text(millis: Column) -> Column:
    """``java.util.Date.toString()`` in UTC of milliseconds since the epoch."""
    from pyspark.sql import functions as F

    moment = F.timestamp_add("MILLISECOND", millis, F.lit(_EPOCH).cast("timestamp_ntz"))
    return F.date_format(moment, _DATE_TEXT)


def _big_decimal_text(value: Column, scale_of_type: int) -> Column:
    """``BigDecimal.toString()``: plain unless the adjusted exponent is below -6 (Spark writes
    decimals plain), then ``d.dddE-n``. That needs a scale above 6 and ``|x| < 10**-6`` (zero
    included: ``0E-7``); other decimals are Spark's plain text as they are."""
    from pyspark.sql import functions as F

    plain = value.cast("string")
    if scale_of_type <= 6:
        return plain
    negative = F.startswith(plain, F.lit("-"))
    unsigned = F.regexp_replace(plain, "^-", "")
    scale = F.when(F.contains(unsigned, F.lit(".")), F.length(F.substring_index(unsigned, ".", -1))).otherwise(0)
    digits = F.regexp_replace(F.regexp_replace(unsigned, "[.]", ""), "^0+(?=.)", "")
    adjusted = F.length(digits) - 1 - scale
    mantissa = F.when(F.length(digits) > 1, F.concat(F.substring(digits, 1, 1), F.lit("."),
                                                      F.substring(digits, 2, 1_000))).otherwise(digits)
    scientific = F.concat(F.when(negative, F.lit("-")).otherwise(F.lit("")), mantissa, F.lit("E"),
                          adjusted.cast("string"))
    small = F.abs(value) < F.lit(Decimal("0.000001"))
    return F.when(value.isNotNull(), F.when(small & (scale > 0) & (adjusted < -6), scientific).otherwise(plain))


def json_col(schema: Schema, value: Column) -> Column:
    """Compact JSON as :func:`~pubsub_connect.model.converters.dump_json` writes it (Kafka's
    JsonConverter: fields in order with nulls, bytes in base64, Decimal as the base64 of its
    unscaled bytes, Date as days, Time and Timestamp as milliseconds, Java's float text)."""
    from pyspark.sql import functions as F

    from pubsub_connect.model.cps_source.batch import _jackson_escapes_col, _json_inner

    t = schema.type
    name = schema.name
    if name == DECIMAL:
        unscaled = F.regexp_replace(value.cast("string"), "[.]", "").cast("decimal(38,0)")
        text = F.concat(F.lit('"'), F.base64(_two_complement(unscaled)), F.lit('"'))
    elif name in DATE_NAMES or t.is_integer:
        text = value.cast("bigint").cast("string")
    elif t in (Type.FLOAT32, Type.FLOAT64):
        special = value.cast("string")
        text = F.when(special.isin("NaN", "Infinity", "-Infinity"), F.concat(F.lit('"'), special, F.lit('"'))) \
            .otherwise(special)
    elif t is Type.BOOLEAN:
        text = value.cast("string")
    elif t is Type.STRING:
        text = _jackson_escapes_col(_json_inner(F.to_json(F.array(value))))
    elif t is Type.BYTES:
        text = F.concat(F.lit('"'), F.replace(F.base64(value), F.lit("\r\n"), F.lit("")), F.lit('"'))
    elif t is Type.ARRAY:
        assert schema.value_schema is not None
        element = schema.value_schema
        text = F.concat(F.lit("["), F.array_join(F.transform(value, lambda x: json_col(element, x)), ","), F.lit("]"))
    elif t is Type.MAP:
        assert schema.key_schema is not None and schema.value_schema is not None
        key_schema, value_schema = schema.key_schema, schema.value_schema
        if key_schema.type is Type.STRING:
            pairs = F.transform(F.map_entries(value), lambda e: F.concat(json_col(key_schema, e["key"]), F.lit(":"),
                                                                        json_col(value_schema, e["value"])))
            text = F.concat(F.lit("{"), F.array_join(pairs, ","), F.lit("}"))
        else:
            pairs = F.transform(F.map_entries(value), lambda e: F.concat(
                F.lit("["), json_col(key_schema, e["key"]), F.lit(","), json_col(value_schema, e["value"]), F.lit("]")))
            text = F.concat(F.lit("["), F.array_join(pairs, ","), F.lit("]"))
    else:
        parts = []
        for position, f in enumerate(schema.fields):
            member = _field(value, schema, position)
            parts.append(F.concat(F.lit(json.dumps(f.name) + ":"), json_col(f.schema, member)))
        text = F.concat(F.lit("{"), *_joined(parts), F.lit("}")) if parts else F.lit("{}")
    return F.when(value.isNull(), F.lit("null")).otherwise(text)


def _joined(parts: list[Column]) -> list[Column]:
    from pyspark.sql import functions as F

    out: list[Column] = []
    for i, part in enumerate(parts):
        if i:
            out.append(F.lit(","))
        out.append(part)
    return out


def _two_complement(unscaled: Column) -> Column:
    """``BigInteger.toByteArray()`` of an integral decimal(38,0) (|x| < 2**127): its high and low
    64 bits in hex, then the leading bytes that only repeat the sign left out."""
    from pyspark.sql import functions as F

    two_64 = F.lit(str(2**64)).cast("decimal(38,0)")
    high = F.floor(unscaled / two_64).cast("bigint")
    low = (unscaled - high.cast("decimal(38,0)") * two_64).cast("decimal(20,0)")
    full = F.concat(F.lpad(F.hex(high), 16, "0"), F.lpad(F.conv(low.cast("string"), 10, 16), 16, "0"))
    trimmed = F.regexp_replace(full, "^(?:00(?=[0-7])|FF(?=[89A-F]))+", "")
    return F.unhex(trimmed)
