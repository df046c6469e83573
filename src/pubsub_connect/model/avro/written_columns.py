"""Avro's binary encoding of the values sources write (:mod:`.writer`), as Spark expressions.

Why not ``to_avro``: the record a Cloud Pub/Sub message becomes has one field per attribute, so
its schema changes from row to row, and one ``to_avro`` call takes one schema. The encoding of
bytes, strings and a record of them is simple enough to concatenate: a length as Avro's zig-zag
varint, then the bytes; a record is its fields one after another. Every expression here is
code-generated (no higher-order function) except the join of a row's attribute values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pubsub_connect.model.frames import utf8_bytes

if TYPE_CHECKING:
    from pyspark.sql import Column

#: A length below 2**31 is a zig-zag value below 2**32: five groups of 7 bits at most.
_GROUPS = 5


def length_varint(length: Column) -> Column:
    """The varint of a non-negative length (zig-zag: twice the length), as binary."""
    from pyspark.sql import functions as F

    z = length.cast("bigint") * 2
    pieces = []
    for i in range(_GROUPS):
        rest = F.shiftright(z, 7 * i)
        byte = F.when(rest >= 128, (rest % 128) + 128).otherwise(rest % 128)
        piece = F.lpad(F.hex(byte), 2, "0")
        pieces.append(piece if i == 0 else F.when(rest > 0, piece))
    return F.unhex(F.concat_ws("", *pieces))


def bytes_datum(data: Column) -> Column:
    """An Avro ``bytes`` datum."""
    from pyspark.sql import functions as F

    return F.concat(length_varint(F.octet_length(data)), data)


def string_datum(text: Column) -> Column:
    """An Avro ``string`` datum of a valid Spark string."""
    return bytes_datum(utf8_bytes(text))


def string_data(texts: Column) -> Column:
    """The ``string`` data of an array of strings, one after another (a record's string fields)."""
    from pyspark.sql import functions as F

    return F.aggregate(F.transform(texts, string_datum), F.lit(b""), lambda acc, datum: F.concat(acc, datum))


def optional_string_datum(text: Column) -> Column:
    """A non-null value of the union ``["null","string"]``: branch 1, then the string."""
    from pyspark.sql import functions as F

    return F.concat(F.lit(b"\x02"), string_datum(text))
