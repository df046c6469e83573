"""Connect values → bytes the way Google's Lite sink encodes keys, values and headers
(``Schemas.encodeToBytes``).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from google.protobuf import struct_pb2

from pubsub_connect.model.connect import DataError, Schema, Struct, Type
from pubsub_connect.model.converters import (
    java_text,
    utf8,
)
from pubsub_connect.model.javatext import java_double_to_string, to_float32

if TYPE_CHECKING:

    pass


_INT_RANGE = {
    Type.INT8: (-(2**7), 2**7 - 1),
    Type.INT16: (-(2**15), 2**15 - 1),
    Type.INT32: (-(2**31), 2**31 - 1),
    Type.INT64: (-(2**63), 2**63 - 1),
}
BYTES_TYPES = (bytes, bytearray, memoryview)
NestedNull = Literal["error", "null_value"]


class LiteEncodingError(DataError):
    """A Connect value that Google's Lite sink cannot encode (complex map key, nested null, …)."""

    error_class = "LiteEncodingError"


# ----------------------------------------------------------------------------------------------
# Sink: Connect values → bytes
# ----------------------------------------------------------------------------------------------


def _type_of(schema: Schema | None) -> Type:
    """``safeSchemaType``: a missing schema is treated as STRING."""
    return Type.STRING if schema is None else schema.type


def _as_bytes(value: Any, where: str) -> bytes:
    if isinstance(value, BYTES_TYPES):
        return bytes(value)
    raise LiteEncodingError(f"{where}: expected bytes for a BYTES schema, got {type(value).__name__}")


def _as_int(t: Type, value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise LiteEncodingError(f"{where}: expected an integer for {t.name}, got {value!r}")
    lo, hi = _INT_RANGE[t]
    if not lo <= value <= hi:
        raise LiteEncodingError(f"{where}: {value} is out of range for {t.name}")
    return value


def _as_double(t: Type, value: Any, where: str) -> float:
    """``((Number) x).doubleValue()``: FLOAT32 values are float32 first (Java ``Float``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LiteEncodingError(f"{where}: expected a number for {t.name}, got {type(value).__name__}")
    x = float(value)
    return to_float32(x) if t is Type.FLOAT32 else x


def _text(value: Any) -> str:
    """``object.toString()`` for STRING/BOOLEAN (and schemaless) values."""
    if isinstance(value, str):
        return value
    return java_text(None, value)


def string_rep(schema: Schema | None, value: Any, where: str = "value") -> str:
    """``Schemas.stringRep``: the text of a primitive (used for top-level values and map keys)."""
    t = _type_of(schema)
    if t.is_integer:
        return str(_as_int(t, value, where))
    if t.is_float:
        return java_double_to_string(_as_double(t, value, where))
    if t is Type.BOOLEAN:
        if isinstance(value, bool):
            return "true" if value else "false"
        return _text(value)
    if t is Type.STRING:
        return _text(value)
    if t is Type.BYTES:
        return base64.b64encode(_as_bytes(value, where)).decode("ascii")
    raise LiteEncodingError(f"{where}: cannot convert {t.name} to a string (map keys must be primitive)")


def encode_to_bytes(schema: Schema | None, value: Any, *, nested_null: NestedNull = "error") -> bytes:
    """``Schemas.encodeToBytes``: the bytes of a non-null key, value or header value."""
    if value is None:
        raise LiteEncodingError("a null value has no encoding (the record's key/data stay empty instead)")
    if schema is None and isinstance(value, BYTES_TYPES):
        return bytes(value)  # see the package docstring: keep schemaless bytes instead of "[B@…"
    t = _type_of(schema)
    if t is Type.BYTES:
        return _as_bytes(value, "value")
    if t.is_primitive:
        return utf8(string_rep(schema, value))  # copyFromUtf8: lone surrogates become "?"
    return encode_value(schema, value, nested_null=nested_null).SerializeToString(deterministic=True)


def encode_value(
    schema: Schema | None, value: Any, *, nested_null: NestedNull = "error", path: str = "value"
) -> struct_pb2.Value:
    """``Schemas.encode``: a Connect value as a ``google.protobuf.Value``.

    Numbers become doubles, BYTES base64 strings, MAP and STRUCT a ``Struct`` (map keys through
    :func:`string_rep`), ARRAY a ``ListValue``.
    """
    out = struct_pb2.Value()
    if value is None:
        if nested_null == "null_value":
            out.null_value = struct_pb2.NULL_VALUE
            return out
        raise LiteEncodingError(f"{path}: null values inside arrays, maps and structs cannot be encoded")
    t = _type_of(schema)
    if t.is_integer:
        out.number_value = float(_as_int(t, value, path))
    elif t.is_float:
        out.number_value = _as_double(t, value, path)
    elif t is Type.BOOLEAN:
        if not isinstance(value, bool):
            raise LiteEncodingError(f"{path}: expected a boolean, got {type(value).__name__}")
        out.bool_value = value
    elif t is Type.STRING:
        out.string_value = _text(value)
    elif t is Type.BYTES:
        out.string_value = base64.b64encode(_as_bytes(value, path)).decode("ascii")
    elif t is Type.ARRAY:
        assert schema is not None
        if not isinstance(value, (list, tuple)):
            raise LiteEncodingError(f"{path}: expected a list for ARRAY, got {type(value).__name__}")
        out.list_value.SetInParent()  # an empty list is still a list (Java sets the kind)
        items = out.list_value.values
        for i, item in enumerate(value):
            encoded = encode_value(schema.value_schema, item, nested_null=nested_null, path=f"{path}[{i}]")
            items.add().CopyFrom(encoded)
    elif t is Type.MAP:
        assert schema is not None
        fields = out.struct_value.fields
        out.struct_value.SetInParent()
        for key, item in _map_items(value, path):
            if key is None:
                raise LiteEncodingError(f"{path}: null map keys cannot be encoded")
            name = string_rep(schema.key_schema, key, f"{path} key")
            encoded = encode_value(schema.value_schema, item, nested_null=nested_null, path=f"{path}.{name}")
            fields[name].CopyFrom(encoded)
    else:  # STRUCT
        assert schema is not None
        if not isinstance(value, Struct):
            raise LiteEncodingError(f"{path}: expected a Struct, got {type(value).__name__}")
        out.struct_value.SetInParent()
        for f in schema.fields:
            out.struct_value.fields[f.name].CopyFrom(
                encode_value(f.schema, value.get(f.name), nested_null=nested_null, path=f"{path}.{f.name}")
            )
    return out


def _map_items(value: Any, path: str) -> Iterable[tuple[Any, Any]]:
    if isinstance(value, Mapping):
        return value.items()
    if isinstance(value, (list, tuple)):  # list of (key, value) pairs when keys are unhashable
        return value
    raise LiteEncodingError(f"{path}: expected a map, got {type(value).__name__}")
