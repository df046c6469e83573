"""Pieces of the JSON text Kafka's JsonConverter (Jackson) writes, as Spark column expressions,
shared by the models that put JSON into Kafka records (the Cloud Pub/Sub source's envelopes) or
into attributes (the Avro sink's compact JSON).

Why these few: Spark's ``to_json`` is Jackson too, so it escapes strings as Kafka does, but it
writes characters outside the BMP as UTF-8 where Kafka writes escaped surrogate pairs, and
Spark's ``base64`` may chunk lines where Jackson never does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column

#: Characters per line of chunked (MIME) base64.
_BASE64_LINE = 76
#: Java regex of one character outside the BMP (Spark's ``rlike`` is java.util.regex).
_SUPPLEMENTARY_SQL_RE = "[\\x{10000}-\\x{10FFFF}]"


def json_inner(js: Column) -> Column:
    """``{…}`` or ``[…]`` → ``…`` (the JSON without its outer brackets)."""
    from pyspark.sql import functions as F

    return F.substring(js, F.lit(2), F.length(js) - 2)


def jackson_base64(data: Column) -> Column:
    """Base64 of a binary column as Jackson writes it in JSON (one line)."""
    from pyspark.sql import functions as F

    # Spark chunks base64 into lines of 76 characters joined by CRLF unless the session sets
    # spark.sql.chunkBase64String.enabled=false (the product's own sessions and job clusters do);
    # Jackson never chunks. Chunked text has its first CRLF at characters 77-78, where unchunked
    # text has two base64 characters, so that one O(1) look tells the two apart row by row,
    # whatever the setting was when the plan was analysed. Removing CRLF is exact (they are not in
    # the alphabet), but the scan costs about 6 µs per KB: 3 to 4 times the base64 itself.
    encoded = F.base64(data)
    chunked = F.substring(encoded, _BASE64_LINE + 1, 2) == F.lit("\r\n")
    return F.when(chunked, F.replace(encoded, F.lit("\r\n"), F.lit(""))).otherwise(encoded)


def jackson_escapes(json_text: Column) -> Column:
    """:func:`~pubsub_connect.model.converters.escape_supplementary_as_jackson` as a Spark
    expression: characters outside the BMP become ``\\uXXXX\\uXXXX`` (upper-case hex).

    Spark's ``to_json`` writes them as UTF-8, Kafka's JsonConverter as escapes. Rows without such a
    character (almost all) only pay the ``rlike``; the others are split into characters (Java's
    ``.`` matches a whole surrogate pair) and each 4-byte one is replaced by the hex of its UTF-16
    halves. Apply to attribute/key JSON only, never to the base64 of the data (ASCII anyway).
    """
    from pyspark.sql import functions as F

    def escape(c: Column) -> Column:
        units = F.hex(F.encode(c, "UTF-16BE"))
        pair = F.concat(F.lit("\\u"), F.substring(units, 1, 4), F.lit("\\u"), F.substring(units, 5, 4))
        return F.when(F.octet_length(c) == F.lit(4), pair).otherwise(c)

    characters = F.regexp_extract_all(json_text, F.lit("(?s)(.)"), 1)
    escaped = F.array_join(F.transform(characters, escape), "")
    return F.when(json_text.rlike(_SUPPLEMENTARY_SQL_RE), escaped).otherwise(json_text)


def jackson_string(text: Column) -> Column:
    """Kafka's JSON text of a string column (``"…"`` with Jackson's escapes, ``null`` for null):
    ``to_json`` of a one-element array is that text in brackets."""
    from pyspark.sql import functions as F

    return jackson_escapes(json_inner(F.to_json(F.array(text))))
