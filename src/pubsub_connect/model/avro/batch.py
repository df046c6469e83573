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

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pubsub_connect.model.avro.reference import AvroDataError
from pubsub_connect.model.avro.schema import UNION_NAME, AvroSchemaError, AvroType, connect_schema, parse_schema
from pubsub_connect.model.avro.values import body_col, java_text_col, json_col, member
from pubsub_connect.model.avro.wire import (
    HEADER_BYTES,
    MAGIC_BYTE,
    OTHER_MAGIC,
    TOO_SHORT,
    UnknownSchemaIdError,
    WireFormatError,
)
from pubsub_connect.model.connect import Schema, Type
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
    #: would decode the bytes once per attribute). Each is added in a projection of its own, in
    #: order: a later one may read an earlier one (JSON's Variant, then its properties).
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
                   name: str = "_avro", replaced: Mapping[str, Column] | None = None,
                   as_key: bool = False, whole: str | None = None, json_schema: bool = False) -> AvroOutcome:
    """The :class:`AvroOutcome` of the framed bytes in ``framed``: ``schemas`` holds each id of the
    batch with its writer schema's text, or why it has none (an unknown id: the registry's error);
    ``name`` prefixes the decoded columns (one per writer schema); ``replaced``: the attribute
    names the caller sets after a record's fields, with when it does (a field of that name is then
    left out, as the original overwrites it); ``as_key``: a key, which is only its text (what a
    value cannot be as a message is no error of a key); ``whole``: the body is the whole value,
    no attribute per field: ``avro``, the datum itself in Avro's binary encoding, or ``json``, its
    JSON as Kafka's JsonConverter writes it without schemas (``messageBodyFormat``);
    ``json_schema``: the writer schemas are JSON Schemas and the datums JSON text (Confluent's
    ``JsonSchemaConverter``, read by :mod:`pubsub_connect.model.jsonschema.batch`), not Avro."""
    from pyspark.sql import functions as F

    first = F.substring(framed, 1, 1)
    framed_ok = _framed_ok(framed)
    wire_error = F.when((F.octet_length(framed) == 0) | (first == F.lit(bytes([MAGIC_BYTE]))), F.lit(TOO_SHORT)) \
        .otherwise(F.concat(F.lit(OTHER_MAGIC[0]), F.lower(F.hex(first)), F.lit(OTHER_MAGIC[1])))
    schema_id = _schema_id(framed)
    payload = F.substring(framed, HEADER_BYTES + 1, 2_147_483_647)
    mapping = _WholeValue(payload, whole) if whole else _ValueMapping(body_name, replaced or {}, as_key)
    outcome_of = _json_schema_outcome if json_schema else _schema_outcome
    outcomes = {k: _failure(F.lit(str(v)), F.lit(getattr(v, "error_class", UNKNOWN_SCHEMA))) if isinstance(v, Exception)
                else outcome_of(payload, k, v, mapping, f"{name}_{k}",
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


def _schema_outcome(payload: Column, schema_id: int, writer: str, mapping: _ValueMapping | _WholeValue,
                    decoded_name: str, chosen: Column) -> AvroOutcome:
    """One writer schema's outcome; its value is decoded into column ``decoded_name`` for the rows
    where ``chosen`` (their id is this schema's)."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

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
    return _mapped(schema, value, mapping, avro, undecodable,
                   F.lit(f"the bytes do not decode with writer schema {schema_id} (or the datum is null)"),
                   AvroDataError.error_class, (F.when(chosen, decode).alias(decoded_name),))


def _json_schema_outcome(payload: Column, schema_id: int, writer: str,
                         mapping: _ValueMapping | _WholeValue, decoded_name: str, chosen: Column) -> AvroOutcome:
    """:func:`_schema_outcome` of a JSON Schema and its JSON datums: the decoded column holds the
    value and, where it does not map, the reason
    (:func:`~pubsub_connect.model.jsonschema.batch.decoded_columns`)."""
    from pyspark.sql import functions as F

    from pubsub_connect.model.jsonschema.batch import decoded_columns
    from pubsub_connect.model.jsonschema.schema import JsonSchemaError, connect_schema_of
    from pubsub_connect.model.jsonschema.values import JsonDataError

    try:
        schema = connect_schema_of(writer)
    except JsonSchemaError as exc:
        return _failure(F.lit(f"writer schema {schema_id}: {exc}"), F.lit(JsonSchemaError.error_class))
    value, problem = F.col(decoded_name).getField("value"), F.col(decoded_name).getField("problem")
    return _mapped(schema, value, mapping, None, problem.isNotNull(), problem, JsonDataError.error_class,
                   decoded_columns(payload, schema, decoded_name, chosen))


def _mapped(schema: Schema, value: Column, mapping: _ValueMapping | _WholeValue, avro: AvroType | None,
            fails: Column, fail_error: Column, fail_class: str, decoded: tuple[Column, ...]) -> AvroOutcome:
    """The outcome of a decoded ``value`` of ``schema`` (its writer schema ``avro``, None for a
    JSON Schema's): what ``mapping`` makes of it, except where ``fails`` (it did not decode:
    ``fail_error`` with ``fail_class``)."""
    from pyspark.sql import functions as F

    body, attributes, error, attribute_bytes, limit_error = mapping.message(schema, value) \
        if isinstance(mapping, _ValueMapping) else mapping.message(avro, schema, value)
    return AvroOutcome(
        text=F.when(~fails, java_text_col(schema, value)),
        body=F.when(~fails, body),
        attributes=F.when(~fails, attributes),
        attribute_bytes=attribute_bytes,
        limit_error=F.when(~fails & error.isNull(), limit_error),
        error=F.when(fails, fail_error).otherwise(error),
        error_class=F.when(fails, F.lit(fail_class)).when(error.isNotNull(), F.lit(UnsupportedValueError.error_class)),
        decoded=decoded,
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

    def __init__(self, body_name: str, replaced: Mapping[str, Column], as_key: bool = False):
        self.body_name = body_name
        self.replaced = replaced
        self.as_key = as_key

    def message(self, schema: Schema, value: Column) -> tuple[Column, Column, Column, Column, Column]:
        """(body, attributes, error, attribute bytes, limit error) of a non-null value."""
        from pyspark.sql import functions as F

        none = F.lit(None).cast("string")
        if self.as_key:
            return F.lit(b""), _no_attributes(), none, F.lit(0).cast("long"), none
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
            field_value = member(value, schema, position)
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


class _WholeValue:
    """``messageBodyFormat=avro`` or ``json``: the message is the whole value, no attribute per
    field. ``avro``: the datum as written (decoded only to prove it decodes); a top-level
    ``bytes`` value, written without its length by Confluent's serializer, gets its length back
    (Avro's encoding of it). ``json``: the decoded value's JSON (:func:`json_col`)."""

    def __init__(self, payload: Column, format_name: str) -> None:
        self.payload = payload
        self.json = format_name == "json"

    def message(self, avro: AvroType | None, schema: Schema, value: Column) -> tuple[Column, Column, Column, Column,
                                                                                     Column]:
        """(body, …) as :meth:`_ValueMapping.message`; ``avro``: the writer schema (None: JSON's)."""
        from pyspark.sql import functions as F

        from pubsub_connect.model.avro.written_columns import bytes_datum

        if self.json:
            body = utf8_bytes(json_col(schema, value))
        else:
            body = bytes_datum(self.payload) if avro is not None and avro.kind == "bytes" else self.payload
        return body, _no_attributes(), F.lit(None).cast("string"), F.lit(0).cast("long"), F.lit(None).cast("string")


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
