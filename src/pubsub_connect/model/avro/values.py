"""Connect values decoded by Spark as what Google's sink makes of them, in Spark expressions:
the message body of a value (``handleValue``: big-endian numbers, IEEE 754 floats, UTF-8 text,
raw bytes, a logical value's base type), Java's ``toString`` text of an attribute
(:func:`~pubsub_connect.model.converters.java_text`: ``BigDecimal``, ``java.util.Date`` in UTC,
compact JSON for arrays, maps and records) and that JSON as Kafka's JsonConverter writes it.

Why apart from :mod:`.batch`: these are the per-value rules, shared by a record's fields, a map's
entries and a key; :mod:`.batch` decodes the bytes and puts a record's attributes together.
Spark's decoded values stand for Connect's: a Date, Time or Timestamp arrives as its raw number
(the reader schema leaves those logical types out), a union branch as ``member<i>``.
"""

from __future__ import annotations

import datetime
import json
from decimal import Decimal
from typing import TYPE_CHECKING

from pubsub_connect.model.avro.schema import UNION_NAME, AvroSchemaError
from pubsub_connect.model.connect import DATE, DATE_NAMES, DECIMAL, Schema, Type
from pubsub_connect.model.frames import utf8_bytes
from pubsub_connect.model.json_columns import jackson_base64, jackson_string

if TYPE_CHECKING:
    from pyspark.sql import Column

_DATE_TEXT = "EEE MMM dd HH:mm:ss 'UTC' y"
_EPOCH = datetime.datetime(1970, 1, 1)


def member(value: Column, schema: Schema, position: int) -> Column:
    """A record field, or a Union struct's branch (Spark names those ``member<i>``)."""
    if schema.name == UNION_NAME:
        return value.getField(f"member{position}")
    return value.getField(schema.fields[position].name)


def body_col(schema: Schema, value: Column) -> tuple[Column, Column]:
    """(body, error) of a value that is the message data (``handleValue`` of a non-struct)."""
    from pyspark.sql import functions as F

    none = F.lit(None).cast("string")
    if schema.name == DECIMAL:  # its unscaled bytes (the base type's), as JSON's Decimal
        return _unscaled_bytes(value), none
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
    bound = F.lit(Decimal("0.000001")).cast(f"decimal(38,{scale_of_type})")  # exact at that scale
    small = (value < bound) & (value > -bound)
    return F.when(value.isNotNull(), F.when(small & (scale > 0) & (adjusted < -6), scientific).otherwise(plain))


def json_col(schema: Schema, value: Column) -> Column:
    """Compact JSON as :func:`~pubsub_connect.model.converters.dump_json` writes it (Kafka's
    JsonConverter: fields in order with nulls, bytes in base64, Decimal as the base64 of its
    unscaled bytes, Date as days, Time and Timestamp as milliseconds, Java's float text)."""
    from pyspark.sql import functions as F

    t = schema.type
    name = schema.name
    if name == DECIMAL:
        text = F.concat(F.lit('"'), F.base64(_unscaled_bytes(value)), F.lit('"'))
    elif name in DATE_NAMES or t.is_integer:
        text = value.cast("bigint").cast("string")
    elif t in (Type.FLOAT32, Type.FLOAT64):
        special = value.cast("string")
        text = F.when(special.isin("NaN", "Infinity", "-Infinity"), F.concat(F.lit('"'), special, F.lit('"'))) \
            .otherwise(special)
    elif t is Type.BOOLEAN:
        text = value.cast("string")
    elif t is Type.STRING:
        text = jackson_string(value)
    elif t is Type.BYTES:
        text = F.concat(F.lit('"'), jackson_base64(value), F.lit('"'))
    elif t is Type.ARRAY:
        assert schema.value_schema is not None
        element = schema.value_schema
        text = F.concat(F.lit("["), F.array_join(F.transform(value, lambda x: json_col(element, x)), ","), F.lit("]"))
    elif t is Type.MAP:
        assert schema.key_schema is not None and schema.value_schema is not None
        key_schema, value_schema = schema.key_schema, schema.value_schema
        if key_schema.type is Type.STRING:  # by name: the decoder's map has no order (a Java HashMap)
            pairs = F.transform(F.sort_array(F.map_entries(value)), lambda e: F.concat(
                json_col(key_schema, e["key"]), F.lit(":"), json_col(value_schema, e["value"])))
            text = F.concat(F.lit("{"), F.array_join(pairs, ","), F.lit("}"))
        else:
            pairs = F.transform(F.map_entries(value), lambda e: F.concat(
                F.lit("["), json_col(key_schema, e["key"]), F.lit(","), json_col(value_schema, e["value"]), F.lit("]")))
            text = F.concat(F.lit("["), F.array_join(pairs, ","), F.lit("]"))
    else:
        parts = []
        for position, f in enumerate(schema.fields):
            field_value = member(value, schema, position)
            parts.append(F.concat(F.lit(json.dumps(f.name) + ":"), json_col(f.schema, field_value)))
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


def _unscaled_bytes(decimal: Column) -> Column:
    """A Spark decimal's unscaled value as ``BigInteger.toByteArray()`` (a Connect Decimal's bytes)."""
    from pyspark.sql import functions as F

    return _two_complement(F.regexp_replace(decimal.cast("string"), "[.]", "").cast("decimal(38,0)"))


def _two_complement(unscaled: Column) -> Column:
    """``BigInteger.toByteArray()`` of an integral decimal(38,0) (|x| < 2**127): its two's
    complement in 128 bits as hex (a bigint's own when it fits one, else its high and low 64 bits,
    the high part an integral division that rounds toward minus infinity), then the leading bytes
    that only repeat the sign left out."""
    from pyspark.sql import functions as F

    two_64 = F.lit(str(2**64)).cast("decimal(38,0)")
    fits = (unscaled >= F.lit(str(-(2**63))).cast("decimal(38,0)")) & \
        (unscaled < F.lit(str(2**63)).cast("decimal(38,0)"))
    small = F.hex(unscaled.cast("bigint"))
    sign_fill = F.when(unscaled < 0, F.lit("F" * 16)).otherwise(F.lit("0" * 16))
    # The remainder has the dividend's sign and is exact; the quotient of what is left is whole.
    rest = unscaled % two_64
    truncated = ((unscaled - rest) / two_64).cast("bigint")
    high = F.when(rest < 0, truncated - 1).otherwise(truncated)
    low = F.when(rest < 0, rest + two_64).otherwise(rest).cast("decimal(20,0)")
    wide = F.concat(F.lpad(F.hex(high), 16, "0"), F.lpad(F.conv(low.cast("string"), 10, 16), 16, "0"))
    full = F.when(fits, F.concat(sign_fill, F.lpad(small, 16, "0"))).otherwise(wide)
    trimmed = F.regexp_replace(full, "^(?:00(?=[0-7])|FF(?=[89A-F]))+", "")
    return F.unhex(trimmed)
