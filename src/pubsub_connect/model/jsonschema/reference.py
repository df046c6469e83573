"""Schema Registry JSON → Connect values, one record at a time: what Confluent's
``JsonSchemaConverter`` gives a sink task (the deserializer's JSON tree, then
``JsonSchemaData.toConnectData`` with the writer schema's Connect schema). The reference the JVM
path (:mod:`.batch`) is held against; never on a hot path.

Values come out as :mod:`.values` says (the Avro reference's kinds).

As Confluent's: a property that is absent is null, a null where a default is declared is the
default, a null for a required schema fails the record. Unlike Confluent's converter, which does
not validate the JSON against its schema unless told to and then reads a mismatch with Jackson's
coercions (``"abc"`` where an integer is declared reads as 0), a value that does not match its
schema fails the record with where and why: a dead letter, nothing made up (README, "Differences").
So do duplicate names in an object, invalid UTF-8, and non-numbers (``NaN``), which Jackson
refuses or reads differently.
"""

from __future__ import annotations

import json
from decimal import Decimal
from functools import lru_cache
from typing import Any

from pubsub_connect.model.avro.wire import FramedConverter
from pubsub_connect.model.connect import Schema, SchemaAndValue
from pubsub_connect.model.jsonschema.schema import JsonSchemaError, connect_schema_of
from pubsub_connect.model.jsonschema.values import MAX_DECIMAL_DIGITS, JsonDataError, to_connect_value

#: Why bytes are not read as JSON (one line for every cause, as Spark's parser tells none).
NOT_JSON = "the bytes are not JSON text (malformed, NaN or Infinity, or a name twice in an object)"
#: Why a top-level null fails.
NULL_VALUE = "the value is null; Connect has no value for it"


class RegistryJsonSchemaConverter(FramedConverter):
    """Confluent's ``JsonSchemaConverter`` for the reference."""

    def read(self, schema_id: int, writer: str, payload: bytes) -> SchemaAndValue:
        try:
            schema = _schema(writer)
        except JsonSchemaError as exc:
            raise JsonSchemaError(f"writer schema {schema_id}: {exc}") from None
        value = to_connect_value(schema, parse_json(payload), "$")
        if value is None:
            raise JsonDataError(NULL_VALUE)
        return SchemaAndValue(schema, value)


def parse_json(payload: bytes) -> Any:
    """The JSON text of a datum: strict UTF-8, no duplicate names, no ``NaN`` or ``Infinity``."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        raise JsonDataError("the JSON text is not valid UTF-8") from None
    try:
        return json.loads(text, object_pairs_hook=_unique_names, parse_float=json_number, parse_int=_json_integer,
                          parse_constant=_no_constant)
    except ValueError:
        raise JsonDataError(NOT_JSON) from None


def json_number(text: str) -> Decimal | float:
    """A JSON number as Spark's JSON parser keeps it: exact in plain notation up to 38 digits (a
    ``Decimal``, an ``int`` when whole and written without a fraction), else the nearest double
    (a ``float``), so both paths round the same value and take the same numbers as integers."""
    digits = sum(c.isdigit() for c in text)
    if "e" in text.lower() or digits > MAX_DECIMAL_DIGITS:
        return float(text)
    return Decimal(text)


def _json_integer(text: str) -> int | float:
    return float(text) if sum(c.isdigit() for c in text) > MAX_DECIMAL_DIGITS else int(text)


def _unique_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in pairs:
        if name in out:
            raise ValueError(f"the name {name!r} occurs twice in an object")
        out[name] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


@lru_cache(maxsize=256)
def _schema(text: str) -> Schema:
    return connect_schema_of(text)
