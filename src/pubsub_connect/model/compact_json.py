"""Schemaless JSON values as Spark column expressions: the compact JSON text that Kafka's
JsonConverter (``schemas.enable=false``) turns a record value into, and the test of when Spark's
text is exactly what the per-record reference writes.

Why: with a schemaless JsonConverter the Cloud Pub/Sub sink publishes a JSON object or array as
its compact JSON re-serialization (numbers as Java prints them, keys in input order). Spark's
``get_json_object(text, '$')`` writes that text with Jackson inside the JVM, at several hundred
thousand records per second and core, against tens of thousands for the reference's Python
parse-and-dump. Jackson and the reference agree on almost every document; where they may not,
:func:`same_as_reference` is false and the caller hands the record to the reference:

* invalid UTF-8 (Jackson replaces it, the reference refuses the record), duplicate keys (the
  reference keeps the last value, Jackson writes both), text after the value (Jackson stops at
  the end of the first value, the reference refuses the record);
* characters outside the Basic Multilingual Plane (Jackson writes surrogate escapes, the
  reference the UTF-8 bytes);
* numbers whose text could differ: Jackson prints doubles with the JVM's ``Double.toString``,
  which on JDK 17 is not always the shortest decimal (``1.0E23`` prints as
  ``9.999999999999999E22``), while the reference follows JDK 19+. With at most 15 significant
  digits and a normal (not subnormal) value the two agree, so longer or subnormal doubles go to
  the reference, as do ``-0.0`` (Connect reads it as ``0.0``), integers outside int64 and
  exponents that overflow (the reference refuses those).

Everything here is a column expression; nothing runs Python per record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column

#: JSON's whitespace (RFC 8259), the only characters both parsers skip around a value.
_JSON_SPACE = " \t\n\r"
#: A JSON string literal, as an unrolled loop with possessive quantifiers: Java's regex engine
#: recurses once per repetition of an alternation, which overflows the stack on long strings.
_STRING_LITERAL = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
#: Escapes of brackets and braces (``\u007B``): Jackson writes the character itself, which would
#: change the bracket count that detects text after the value.
_BRACKET_ESCAPE = r"\\u00[57][bBdD]"
#: Jackson's surrogate escapes (upper-case hex), written for characters outside the BMP.
_SURROGATE_ESCAPE = r"\\uD[89AB]"
#: Numbers whose exponent or length can overflow a double (the reference refuses the record,
#: Jackson writes ``"Infinity"``). Conservative: a match inside a string only costs the column
#: path for that record.
_OVERFLOW_PRONE = r"[eE]\+?0*[1-9][0-9]{2}|[0-9]{300}"
_NUMBER_TOKEN = r"-?[0-9][0-9.eE+-]*"
#: The smallest normal double: below it JDK 17 and JDK 19+ may print different digits.
_MIN_NORMAL = 2.2250738585072014e-308
#: Significant digits below which every JDK prints a double the same way.
_SAFE_DIGITS = 15


def jackson_compact(text: Column) -> Column:
    """The first JSON value in ``text`` written compactly by Jackson (null when ``text`` does not
    start with valid JSON). Keys keep their order, escapes are Jackson's, doubles use the JVM's
    ``Double.toString``; a top-level string comes back without its quotes."""
    from pyspark.sql import functions as F

    return F.get_json_object(text, "$")


def _bracket_count(text: Column) -> Column:
    from pyspark.sql import functions as F

    return F.length(text) - F.length(F.translate(text, "{}[]", ""))


def _token_is_exact(token: Column) -> Column:
    """One number of Jackson's compact text prints the same in the reference."""
    from pyspark.sql import functions as F

    mantissa = F.regexp_extract(token, r"^-?([0-9.]*)", 1)
    significant = F.regexp_replace(F.regexp_replace(mantissa, r"\.", ""), "^0+|0+$", "")
    is_double = token.rlike("[.eE]")
    double_ok = (F.length(significant) <= _SAFE_DIGITS) & (
        (F.abs(token.cast("double")) >= F.lit(_MIN_NORMAL)) | (token == F.lit("0.0"))
    )
    integer_ok = token.try_cast("bigint").isNotNull()  # the reference refuses integers outside int64
    return F.when(is_double, double_ok).otherwise(integer_ok)


def _numbers_exact(text: Column, compact: Column, parsed: Column) -> Column:
    """No number of the document prints differently in the reference. Only documents that hold
    a non-integer, a big number or a mixed array (the parsed variant's type says so) have their
    numbers checked one by one: scanning every document's text with a regular expression would
    cost more than Jackson's whole pass."""
    from pyspark.sql import functions as F

    tokens = F.regexp_extract_all(F.regexp_replace(compact, _STRING_LITERAL, '""'), F.lit(_NUMBER_TOKEN), 0)
    # A mixed array's element type is VARIANT, which may hide a double.
    has_double = F.schema_of_variant(parsed).rlike("DOUBLE|DECIMAL|VARIANT")
    return F.when(has_double, ~text.rlike(_OVERFLOW_PRONE) & F.forall(tokens, _token_is_exact)).otherwise(F.lit(True))


def same_as_reference(text: Column, compact: Column) -> Column:
    """True when ``compact`` (:func:`jackson_compact` of ``text``) is, byte for byte, the body the
    reference publishes for ``text``; false (never null) when the record must go to the reference,
    including every record the reference refuses."""
    from pyspark.sql import functions as F

    space = F.lit(_JSON_SPACE)
    # Parsing refuses duplicate keys at any depth (Jackson's copy keeps them) and types numbers.
    parsed = F.try_parse_json(text)
    container = text.rlike(r"^[ \t\n\r]*[\[{]")
    # Text that is already compact (what most producers write) is the whole value by itself:
    # Jackson's copy of a prefix cannot equal it, and invalid UTF-8 would have been replaced.
    # Otherwise an object or array must end the text: the text ends with the same bracket and
    # holds no more brackets than the compact form; a number, true or false must be the compact
    # form once trimmed (a top-level string never is: its compact form has no quotes).
    # ``btrim``, not the two-argument ``rtrim``/``trim`` that Spark 4.2 warns are deprecated: the
    # last character left after trimming both ends is the one left after trimming the end.
    rewritten_whole = F.is_valid_utf8(text) & F.when(
        container,
        (F.substring(F.btrim(text, space), -1, 1) == F.substring(compact, -1, 1))
        & (_bracket_count(text) == _bracket_count(compact))
        & ~text.rlike(_BRACKET_ESCAPE),
    ).otherwise(F.btrim(text, space) == compact)
    exact = (
        compact.isNotNull()
        & parsed.isNotNull()
        & (compact != F.lit("null"))  # a top-level null is no body at all, as in the reference
        & ((text == compact) | rewritten_whole)
        & F.when(compact.contains("\\uD"), ~compact.rlike(_SURROGATE_ESCAPE)).otherwise(F.lit(True))
        & _numbers_exact(text, compact, parsed)
    )
    return F.coalesce(exact, F.lit(False))
