"""JSON values → Connect values by a Connect schema, as Confluent's ``JsonSchemaData.toConnectData``
gives them to a sink task, each value checked against its schema (see :mod:`.reference`): the
rules the reference applies per record and :mod:`.schema` applies to a declared ``default``.

Values come out as the Avro reference's do (:mod:`..avro.reference`): numbers, booleans, strings,
``bytes`` (base64 text decoded), ``decimal.Decimal`` (base64 of the unscaled bytes at the schema's
scale, or a number rounded half-up to it), :class:`~pubsub_connect.model.connect.JavaDate` for
Date, Time and Timestamp, :class:`~pubsub_connect.model.connect.Struct`, lists, and dicts (an
object's entries ordered by key: Confluent's is a ``HashMap``).
"""

from __future__ import annotations

import base64
import binascii
import re
from decimal import ROUND_HALF_UP, Decimal, localcontext
from typing import Any

from pubsub_connect.model.connect import (
    DATE,
    DECIMAL,
    MILLIS_PER_DAY,
    TIME,
    TIMESTAMP,
    DataError,
    JavaDate,
    Schema,
    Struct,
    Type,
)
from pubsub_connect.model.javatext import to_float32

#: Each integer type's range.
INTEGER_RANGES = {Type.INT8: 8, Type.INT16: 16, Type.INT32: 32, Type.INT64: 64}
#: Base64 as Jackson reads it (padding required, no line breaks).
BASE64_TEXT = re.compile(r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$")
#: Spark's widest decimal: a decimal beyond it fails the record on both paths.
MAX_DECIMAL_DIGITS = 38


class JsonDataError(DataError):
    """The JSON does not parse, or a value does not match its writer schema."""

    error_class = "JsonDataError"


def to_connect_value(schema: Schema, node: Any, path: str) -> Any:
    """``node`` (parsed by :func:`parse_json`) as the Connect value of ``schema``. An absent
    property is never asked about: it is null (or its default), required or not, as Confluent's."""
    if node is None:
        if schema.default is not None:
            return schema.default
        if schema.optional:
            return None
        raise JsonDataError(f"{path}: null for a required {schema.type.value.upper()}")
    t = schema.type
    name = schema.name
    if name == DECIMAL:
        return _decimal(schema, node, path)
    if name in (DATE, TIME, TIMESTAMP):
        number = _integer(node, 32 if name != TIMESTAMP else 64, path, name.rsplit(".", 1)[-1])
        if name == TIME and not 0 <= number <= MILLIS_PER_DAY:
            raise JsonDataError(f"{path}: Time {number} is outside 0..{MILLIS_PER_DAY}")
        return JavaDate(number * MILLIS_PER_DAY if name == DATE else number)
    if t.is_integer:
        return _integer(node, INTEGER_RANGES[t], path, t.value.upper())
    if t.is_float:
        if isinstance(node, bool) or not isinstance(node, (int, Decimal, float)):
            raise _mismatch(path, t, node)
        number = float(node)
        return to_float32(number) if t is Type.FLOAT32 else number
    if t is Type.BOOLEAN:
        if not isinstance(node, bool):
            raise _mismatch(path, t, node)
        return node
    if t is Type.STRING:
        if not isinstance(node, str):
            raise _mismatch(path, t, node)
        return node
    if t is Type.BYTES:
        return _base64(node, path)
    if t is Type.ARRAY:
        if not isinstance(node, list):
            raise _mismatch(path, t, node)
        assert schema.value_schema is not None
        return [to_connect_value(schema.value_schema, item, f"{path}[{i}]") for i, item in enumerate(node)]
    if t is Type.MAP:
        return _map(schema, node, path)
    if not isinstance(node, dict):
        raise _mismatch(path, t, node)
    return Struct(schema, {f.name: to_connect_value(f.schema, node[f.name], f"{path}.{f.name}")
                           if f.name in node else f.schema.default for f in schema.fields})


def _map(schema: Schema, node: Any, path: str) -> Any:
    assert schema.key_schema is not None and schema.value_schema is not None
    key_schema, value_schema = schema.key_schema, schema.value_schema
    if key_schema.type is Type.STRING and not key_schema.optional:  # an object
        if not isinstance(node, dict):
            raise _mismatch(path, Type.MAP, node)
        return {k: to_connect_value(value_schema, v, f"{path}.{k}") for k, v in sorted(node.items())}
    if not isinstance(node, list):  # an array of {"key": …, "value": …}
        raise _mismatch(path, Type.MAP, node)
    pairs: list[tuple[Any, Any]] = []
    for i, entry in enumerate(node):
        if not isinstance(entry, dict) or set(entry) != {"key", "value"}:
            raise JsonDataError(f"{path}[{i}]: a map entry is an object of exactly key and value")
        key = to_connect_value(key_schema, entry["key"], f"{path}[{i}].key")
        if key is None:
            raise JsonDataError(f"{path}[{i}]: a map key is null")
        pairs.append((key, to_connect_value(value_schema, entry["value"], f"{path}[{i}].value")))
    keys = [k for k, _ in pairs]
    if any(k in keys[:i] for i, k in enumerate(keys)):  # by equality: keys may be unhashable
        raise JsonDataError(f"{path}: a map has a key twice")
    try:
        return dict(pairs)
    except TypeError:  # unhashable keys (structs, lists): pairs, as connect.py allows
        return pairs


def _integer(node: Any, bits: int, path: str, what: str) -> int:
    """A whole number: written as one, or with a fraction of zeros (``1.0``: Spark's parser
    keeps it whole; Jackson's reads any number as an integer by truncating it)."""
    if isinstance(node, Decimal) and node == node.to_integral_value():
        node = int(node)
    if isinstance(node, bool) or not isinstance(node, int):
        raise JsonDataError(f"{path}: {_kind(node)} for {what} (an integer)")
    if not -(2 ** (bits - 1)) <= node < 2 ** (bits - 1):
        raise JsonDataError(f"{path}: {node} is outside {what}'s range")
    return node


def _base64(node: Any, path: str) -> bytes:
    if not isinstance(node, str) or not BASE64_TEXT.match(node):
        raise JsonDataError(f"{path}: {_kind(node) if not isinstance(node, str) else 'text'} that is not base64 "
                            "for BYTES")
    try:
        return base64.b64decode(node, validate=True)
    except binascii.Error:  # pragma: no cover - the pattern admits only valid base64
        raise JsonDataError(f"{path}: text that is not base64 for BYTES") from None


def _decimal(schema: Schema, node: Any, path: str) -> Decimal:
    scale = int(schema.parameter("scale") or 0)
    if isinstance(node, str):
        raw = _base64(node, path)
        if not raw:
            raise JsonDataError(f"{path}: a Decimal with no bytes")
        unscaled = int.from_bytes(raw, "big", signed=True)
        value = Decimal((int(unscaled < 0), tuple(int(d) for d in str(abs(unscaled))), -scale))
    elif isinstance(node, (int, Decimal, float)) and not isinstance(node, bool):
        if not Decimal(node).is_finite():
            raise JsonDataError(f"{path}: a Decimal of more than {MAX_DECIMAL_DIGITS} digits")
        with localcontext() as exact:
            exact.prec = 1_000
            value = Decimal(node).quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)
    else:
        raise JsonDataError(f"{path}: {_kind(node)} for a Decimal (base64 bytes or a number)")
    if len(value.as_tuple().digits) > MAX_DECIMAL_DIGITS:
        raise JsonDataError(f"{path}: a Decimal of more than {MAX_DECIMAL_DIGITS} digits")
    return value


def _mismatch(path: str, t: Type, node: Any) -> JsonDataError:
    return JsonDataError(f"{path}: {_kind(node)} for {t.value.upper()}")


def _kind(node: Any) -> str:
    """A JSON value's kind, for messages."""
    if node is None:
        return "null"
    if isinstance(node, bool):
        return "a boolean"
    if isinstance(node, (int, Decimal, float)):
        return "a number"
    if isinstance(node, str):
        return "text"
    return "an array" if isinstance(node, list) else "an object"
