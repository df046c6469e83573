"""Schema Registry JSON → Connect values as Spark expressions: the JVM path of :mod:`.reference`
(same rules, same messages; tests hold the two to identical outcomes).

The datum is parsed once into Spark's Variant (``try_parse_json``: strict JSON, a name twice in an
object refused), then each value is checked against its Connect schema by its Variant kind
(``schema_of_variant`` of a leaf: ``BIGINT``, ``DECIMAL(p,s)``, ``DOUBLE``, ``STRING``, …) and
read as the Spark type the Avro path decodes to (:mod:`..avro.values` maps both): INT8…INT32,
Date and Time as ``int``, INT64 and Timestamp as ``bigint``, floats, ``decimal(38,scale)``,
``binary`` from base64, arrays, maps, structs by field name. Why Variant and not ``from_json``:
``from_json`` reads a number where text is declared as its text, and a mismatch in an optional
field as null, so a record that does not match its schema would lose data silently; the Variant
kind tells each mismatch, and the record is a dead letter saying where.

Every expression gives ``(value, problem)``: ``problem`` is null when the value maps, else the
reference's message, and then the value is whatever was read (the record fails as a whole, so
nothing reads it; guarding each value by its problem would evaluate every problem twice).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pubsub_connect.model.connect import (
    DATE,
    DATE_NAMES,
    DECIMAL,
    MILLIS_PER_DAY,
    TIME,
    TIMESTAMP,
    JavaDate,
    Schema,
    Type,
)
from pubsub_connect.model.jsonschema.reference import NOT_JSON, NULL_VALUE
from pubsub_connect.model.jsonschema.values import BASE64_TEXT, MAX_DECIMAL_DIGITS

if TYPE_CHECKING:
    from pyspark.sql import Column

#: The Variant kinds of a number, and of a whole one (``schema_of_variant``: a plain-notation
#: number with a zero fraction is a ``DECIMAL(p,0)``).
_NUMBER = r"^(BIGINT|INT|SMALLINT|TINYINT|DOUBLE|FLOAT|DECIMAL)"
_WHOLE_NUMBER = r"^(BIGINT|INT|SMALLINT|TINYINT|DECIMAL\(\d+,0\))$"
#: The words of the reference's messages for each Variant kind.
_KIND_TEXTS = {"BIGINT": "a number", "INT": "a number", "SMALLINT": "a number", "TINYINT": "a number",
               "DOUBLE": "a number", "FLOAT": "a number", "DECIMAL": "a number", "STRING": "text",
               "BOOLEAN": "a boolean", "VOID": "null", "ARRAY": "an array", "OBJECT": "an object"}
#: Spark's integer types by Connect's (a narrower one is range-checked by a cast to it).
_SPARK_INTEGERS = {Type.INT8: "tinyint", Type.INT16: "smallint", Type.INT32: "int", Type.INT64: "bigint"}


def decoded_columns(payload: Column, schema: Schema, name: str, chosen: Column) -> tuple[Column, ...]:
    """The columns that read the framed datum ``payload`` (the bytes after the header) where
    ``chosen``, each for a projection of its own after the ones before it (a column read by many
    expressions is computed once per row, not once per reader): ``<name>_utf8`` (whether the text
    is UTF-8), ``<name>_doc`` (the Variant), for a record ``<name>_fields`` (its properties as
    Variants), then ``<name>``: ``struct<value, problem>``."""
    from pyspark.sql import functions as F

    text = payload.cast("string")
    # Apart, not one struct: Spark inlines a struct's fields into every reader of them.
    columns = [F.when(chosen, F.is_valid_utf8(text)).alias(f"{name}_utf8"),
               F.when(chosen, F.try_parse_json(text)).alias(f"{name}_doc")]
    variant = F.col(f"{name}_doc")
    fields = None
    if schema.type is Type.STRUCT and schema.fields:
        columns.append(F.try_variant_get(variant, "$", _struct_type(schema)).alias(f"{name}_fields"))
        fields = F.col(f"{name}_fields")
    value, problem = _convert(schema, variant, F.lit("$"), fields)
    null_value = F.lit(False) if schema.default is not None else F.is_variant_null(variant)
    problem = F.when(~F.col(f"{name}_utf8"), F.lit("the JSON text is not valid UTF-8")) \
        .when(variant.isNull(), F.lit(NOT_JSON)) \
        .otherwise(F.coalesce(problem, F.when(null_value, F.lit(NULL_VALUE))))
    columns.append(F.when(chosen, F.struct(value.alias("value"), problem.alias("problem"))).alias(name))
    return tuple(columns)


def _convert(schema: Schema, node: Column, path: Column, fields: Column | None = None) -> tuple[Column, Column]:
    """(value, problem) of the Variant ``node`` (SQL null: an absent property); ``fields``: a
    record's properties already read as Variants."""
    from pyspark.sql import functions as F

    json_null = F.is_variant_null(node)
    value, problem = _present(schema, node, path, fields)
    if schema.default is not None:
        value = F.when(node.isNull() | json_null, _literal(schema, schema.default)).otherwise(value)
        return value, F.when(node.isNotNull() & ~json_null, problem)
    if schema.optional:
        return value, F.when(~json_null, problem)
    null_problem = F.concat(path, F.lit(f": null for a required {schema.type.value.upper()}"))
    return value, F.when(json_null, null_problem).otherwise(problem)


def _present(schema: Schema, node: Column, path: Column, fields: Column | None = None) -> tuple[Column, Column]:
    """(value, problem) of a node that is neither absent nor JSON's null (their cases aside)."""
    from pyspark.sql import functions as F

    kind = F.schema_of_variant(node)
    t = schema.type
    name = schema.name
    if name == DECIMAL:
        return _decimal(schema, node, kind, path)
    if name in DATE_NAMES:
        spark_type = "bigint" if name == TIMESTAMP else "int"
        number, problem = _integer(node, kind, path, spark_type, name.rsplit(".", 1)[-1])
        if name == TIME:
            problem = F.coalesce(problem, F.when((number < 0) | (number > MILLIS_PER_DAY), F.concat(
                path, F.lit(": Time "), number.cast("string"), F.lit(f" is outside 0..{MILLIS_PER_DAY}"))))
        return number, problem
    if t.is_integer:
        number, problem = _integer(node, kind, path, _SPARK_INTEGERS[t], t.value.upper())
        return number.cast("bigint" if t is Type.INT64 else "int"), problem
    if t.is_float:
        ok = kind.rlike(_NUMBER)
        number = F.try_variant_get(node, "$", "double")
        return _checked(number.cast("float") if t is Type.FLOAT32 else number, ok, node, kind, path, t)
    if t is Type.BOOLEAN:
        return _checked(F.try_variant_get(node, "$", "boolean"), kind == "BOOLEAN", node, kind, path, t)
    if t is Type.STRING:
        return _checked(F.try_variant_get(node, "$", "string"), kind == "STRING", node, kind, path, t)
    if t is Type.BYTES:
        return _base64(node, kind, path)
    if t is Type.ARRAY:
        assert schema.value_schema is not None
        element = schema.value_schema
        items = F.try_variant_get(node, "$", "array<variant>")
        converted = F.transform(items, lambda e, i: F.struct(*_aliased(_convert(element, e, _index(path, i)))))
        problems = _first(converted.getField("problem"))
        return _container(converted.getField("value"), problems, items, node, kind, path, t)
    if t is Type.MAP:
        return _map(schema, node, kind, path)
    return _struct(schema, node, kind, path, fields)


def _struct_type(schema: Schema) -> str:
    """A record's properties as Variants, in Spark's type syntax."""
    return "struct<" + ",".join(f"`{f.name.replace('`', '``')}`:variant" for f in schema.fields) + ">"


def _struct(schema: Schema, node: Column, kind: Column, path: Column, fields: Column | None) -> tuple[Column, Column]:
    from pyspark.sql import functions as F

    if not schema.fields:  # an object with no properties: any object, its members dropped (Confluent's)
        members = F.try_variant_get(node, "$", "map<string,variant>")
        return _container(F.when(members.isNotNull(), F.struct()), F.lit(None).cast("string"), members, node, kind,
                          path, Type.STRUCT)
    if fields is None:
        fields = F.try_variant_get(node, "$", _struct_type(schema))
    converted = [_convert(f.schema, fields.getField(f.name), F.concat(path, F.lit("." + f.name)))
                 for f in schema.fields]
    value = F.when(fields.isNotNull(), F.struct(*[v.alias(f.name) for f, (v, _) in
                                                  zip(schema.fields, converted, strict=True)]))
    return _container(value, F.coalesce(*[p for _, p in converted]), fields, node, kind, path, Type.STRUCT)


def _map(schema: Schema, node: Column, kind: Column, path: Column) -> tuple[Column, Column]:
    """An object of string keys (its entries by key, as the reference reads them), or an array of
    ``{"key": …, "value": …}`` objects for other keys."""
    from pyspark.sql import functions as F

    assert schema.key_schema is not None and schema.value_schema is not None
    key_schema, value_schema = schema.key_schema, schema.value_schema
    if key_schema.type is Type.STRING and not key_schema.optional:
        members = F.try_variant_get(node, "$", "map<string,variant>")
        converted = F.transform(F.array_sort(F.map_keys(members)), lambda k: F.struct(k.alias("key"), *_aliased(
            _convert(value_schema, F.element_at(members, k), F.concat(path, F.lit("."), k)))))
        value = F.map_from_arrays(converted.getField("key"), converted.getField("value"))
        return _container(value, _first(converted.getField("problem")), members, node, kind, path, Type.MAP)
    items = F.try_variant_get(node, "$", "array<variant>")

    def entry(e: Column, i: Column) -> Column:
        where = _index(path, i)
        members = F.try_variant_get(e, "$", "map<string,variant>")
        shaped = (F.size(members) == 2) & F.array_contains(F.map_keys(members), "key") \
            & F.array_contains(F.map_keys(members), "value")
        key, key_problem = _convert(key_schema, F.element_at(members, F.lit("key")), F.concat(where, F.lit(".key")))
        val, val_problem = _convert(value_schema, F.element_at(members, F.lit("value")),
                                    F.concat(where, F.lit(".value")))
        problem = F.when(members.isNull() | ~shaped,
                         F.concat(where, F.lit(": a map entry is an object of exactly key and value"))) \
            .otherwise(F.coalesce(key_problem, F.when(key.isNull(), F.concat(where, F.lit(": a map key is null"))),
                                  val_problem))
        return F.struct(key.alias("key"), val.alias("value"), problem.alias("problem"))

    converted = F.transform(items, entry)
    keys = converted.getField("key")
    problem = F.coalesce(_first(converted.getField("problem")),
                         F.when(F.size(F.array_distinct(keys)) != F.size(keys),
                                F.concat(path, F.lit(": a map has a key twice"))))
    value = F.when(problem.isNull(), F.map_from_arrays(keys, converted.getField("value")))
    return _container(value, problem, items, node, kind, path, Type.MAP)


def _container(value: Column, problem: Column, read: Column, node: Column, kind: Column, path: Column,
               t: Type) -> tuple[Column, Column]:
    """An array's, map's or struct's outcome: ``read`` (its Variant cast) is null when the node
    is not of that kind."""
    from pyspark.sql import functions as F

    mismatch = node.isNotNull() & read.isNull()
    return value, F.when(mismatch, _mismatch_text(kind, path, t)).otherwise(problem)


def _checked(value: Column, ok: Column, node: Column, kind: Column, path: Column, t: Type) -> tuple[Column, Column]:
    from pyspark.sql import functions as F

    return value, F.when(node.isNotNull() & ~ok, _mismatch_text(kind, path, t))


def _integer(node: Column, kind: Column, path: Column, spark_type: str, what: str) -> tuple[Column, Column]:
    """An integral number in ``spark_type``'s range (``what`` names the type in messages)."""
    from pyspark.sql import functions as F

    integral = kind.rlike(_WHOLE_NUMBER)
    number = F.try_variant_get(node, "$", spark_type)
    problem = F.when(node.isNotNull() & ~integral, F.concat(path, F.lit(": "), _kind_text(kind),
                                                             F.lit(f" for {what} (an integer)"))) \
        .when(node.isNotNull() & number.isNull(), F.concat(path, F.lit(": "), F.try_variant_get(node, "$", "string"),
                                                           F.lit(f" is outside {what}'s range")))
    return number, problem


def _base64(node: Column, kind: Column, path: Column) -> tuple[Column, Column]:
    from pyspark.sql import functions as F

    text = F.try_variant_get(node, "$", "string")
    ok = (kind == "STRING") & text.rlike(BASE64_TEXT.pattern)
    what = F.when(kind == "STRING", F.lit("text")).otherwise(_kind_text(kind))
    return F.try_to_binary(text, F.lit("base64")), F.when(node.isNotNull() & ~ok, F.concat(path, F.lit(": "), what,
                                                                     F.lit(" that is not base64 for BYTES")))


def _decimal(schema: Schema, node: Column, kind: Column, path: Column) -> tuple[Column, Column]:
    """Base64 of the unscaled two's-complement bytes at the schema's scale, or a number rounded
    half-up to it; over 38 digits fails (Spark's widest decimal)."""
    from pyspark.sql import functions as F

    scale = int(schema.parameter("scale") or 0)
    spark_type = f"decimal({MAX_DECIMAL_DIGITS},{scale})"
    raw, raw_problem = _base64(node, kind, path)
    from_number = F.try_variant_get(node, "$", spark_type)
    # The bytes bound once to a lambda's variable: read many times, inlined they would be decoded
    # (and compiled) once per reader. Interpreted, for the rows that take this branch only.
    from_bytes = F.transform(F.array(raw), lambda r: F.concat(_unscaled_text(r), F.lit(f"E-{scale}"))
                             .try_cast(spark_type))[0]
    numeric = kind.rlike(_NUMBER)
    too_wide = F.concat(path, F.lit(f": a Decimal of more than {MAX_DECIMAL_DIGITS} digits"))
    problem = F.when(numeric, F.when(from_number.isNull(), too_wide)) \
        .when(kind != "STRING", F.concat(path, F.lit(": "), _kind_text(kind),
                                         F.lit(" for a Decimal (base64 bytes or a number)"))) \
        .when(raw_problem.isNotNull(), raw_problem) \
        .when(F.octet_length(raw) == 0, F.concat(path, F.lit(": a Decimal with no bytes"))) \
        .when(from_bytes.isNull(), too_wide)
    return F.when(numeric, from_number).otherwise(from_bytes), F.when(node.isNotNull(), problem)


def _unscaled_text(raw: Column) -> Column:
    """The decimal digits of ``BigInteger(raw)`` (big-endian two's complement, up to 16 bytes;
    null beyond): a negative number is the complement of its bits plus one, negated."""
    from pyspark.sql import functions as F

    digits = F.hex(raw)
    negative = F.substring(digits, 1, 1).isin("8", "9", "A", "B", "C", "D", "E", "F")
    magnitude_hex = F.when(negative, F.translate(digits, "0123456789ABCDEF", "FEDCBA9876543210")).otherwise(digits)
    padded = F.lpad(magnitude_hex, 32, "0")
    high = F.conv(F.substring(padded, 1, 16), 16, 10).cast("decimal(38,0)")
    low = F.conv(F.substring(padded, 17, 16), 16, 10).cast("decimal(38,0)")
    magnitude = F.try_add(F.try_multiply(high, F.lit(str(2**64)).cast("decimal(38,0)")), low)
    signed = F.when(negative, F.try_subtract(F.lit(-1).cast("decimal(38,0)"), magnitude)).otherwise(magnitude)
    return F.when(F.octet_length(raw) <= 16, signed.cast("string"))


def _mismatch_text(kind: Column, path: Column, t: Type) -> Column:
    from pyspark.sql import functions as F

    return F.concat(path, F.lit(": "), _kind_text(kind), F.lit(f" for {t.value.upper()}"))


def _kind_text(kind: Column) -> Column:
    """A Variant kind as the reference names a JSON value's kind (one lookup: this sits in every
    value's error branch, so its size counts in the compiled code)."""
    from pyspark.sql import functions as F

    names = F.create_map(*[F.lit(x) for pair in _KIND_TEXTS.items() for x in pair])
    return F.element_at(names, F.regexp_extract(kind, "^[A-Z]+", 0))


def _index(path: Column, i: Column) -> Column:
    from pyspark.sql import functions as F

    return F.concat(path, F.lit("["), i.cast("string"), F.lit("]"))


def _first(problems: Column) -> Column:
    """The first non-null problem of an array of them."""
    from pyspark.sql import functions as F

    return F.try_element_at(F.filter(problems, lambda p: p.isNotNull()), F.lit(1))


def _aliased(outcome: tuple[Column, Column]) -> tuple[Column, Column]:
    value, problem = outcome
    return value.alias("value"), problem.alias("problem")


def _literal(schema: Schema, default: Any) -> Column:
    """A primitive default in the decoded representation (a date's raw number)."""
    from pyspark.sql import functions as F

    if isinstance(default, JavaDate):
        number = default.millis // MILLIS_PER_DAY if schema.name == DATE else default.millis
        return F.lit(number).cast("bigint" if schema.name == TIMESTAMP else "int")
    if schema.name == DECIMAL:
        return F.lit(default).cast(f"decimal({MAX_DECIMAL_DIGITS},{int(schema.parameter('scale') or 0)})")
    spark = {Type.INT8: "int", Type.INT16: "int", Type.INT32: "int", Type.INT64: "bigint", Type.FLOAT32: "float",
             Type.FLOAT64: "double", Type.BOOLEAN: "boolean", Type.STRING: "string", Type.BYTES: "binary"}
    return F.lit(default).cast(spark[schema.type])
