"""Kafka Connect's data model in Python: schemas and typed values.

Why this exists: Google's connectors are specified in terms of Connect ``Schema.Type`` (INT8 …
STRUCT) and the values converters produce. Every mapping in ``model/`` (Pub/Sub sink and source,
Lite, archive) is written against these types so the behaviour tables of the original connector
can be followed literally.

Values are plain Python objects:

========  =====================================================
INT8..64  ``int``
FLOAT32/64 ``float``
BOOLEAN   ``bool``
STRING    ``str``
BYTES     ``bytes``
ARRAY     ``list``
MAP       ``dict`` (keys typed by ``key_schema``) or a list of (key, value) pairs when keys are
          unhashable
STRUCT    :class:`Struct`
========  =====================================================

Logical types (a schema ``name``, as Connect's ``Decimal``, ``Date``, ``Time`` and ``Timestamp``)
carry ``decimal.Decimal`` (BYTES) and :class:`JavaDate` (INT32/INT64: Java's ``java.util.Date``,
milliseconds since the epoch) values, as the Schema Registry converters produce them.

A schemaless value (``schema is None``) is what a converter without schemas yields; its Python
type determines how it is handled.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

#: Connect's logical type names (``org.apache.kafka.connect.data``).
DECIMAL = "org.apache.kafka.connect.data.Decimal"
DATE = "org.apache.kafka.connect.data.Date"
TIME = "org.apache.kafka.connect.data.Time"
TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"
#: The schemas whose values are :class:`JavaDate` rather than numbers.
DATE_NAMES = frozenset({DATE, TIME, TIMESTAMP})
MILLIS_PER_DAY = 86_400_000


class Type(enum.Enum):
    """Connect's ``Schema.Type``."""

    INT8 = "int8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    FLOAT32 = "float32"
    FLOAT64 = "float64"
    BOOLEAN = "boolean"
    STRING = "string"
    BYTES = "bytes"
    ARRAY = "array"
    MAP = "map"
    STRUCT = "struct"

    @property
    def is_primitive(self) -> bool:
        return self not in (Type.ARRAY, Type.MAP, Type.STRUCT)

    @property
    def is_integer(self) -> bool:
        return self in (Type.INT8, Type.INT16, Type.INT32, Type.INT64)

    @property
    def is_float(self) -> bool:
        return self in (Type.FLOAT32, Type.FLOAT64)


#: Byte width of each fixed-width numeric type (used for big-endian encodings).
WIDTH = {Type.INT8: 1, Type.INT16: 2, Type.INT32: 4, Type.INT64: 8, Type.FLOAT32: 4, Type.FLOAT64: 8}


@dataclass(frozen=True)
class Field:
    """One field of a STRUCT schema."""

    name: str
    schema: Schema


@dataclass(frozen=True)
class Schema:
    """A Connect schema. ``fields`` for STRUCT, ``key_schema``/``value_schema`` for MAP,
    ``value_schema`` for ARRAY. ``name`` carries logical type names (e.g. Decimal) untouched;
    ``parameters`` (Connect's string map, in order) and ``version`` are metadata; ``default`` is
    what :meth:`Struct.get` gives for a null field of this schema, as Connect's ``Struct.get``."""

    type: Type
    optional: bool = False
    fields: tuple[Field, ...] = ()
    key_schema: Schema | None = None
    value_schema: Schema | None = None
    name: str | None = None
    parameters: tuple[tuple[str, str], ...] = ()
    version: int | None = None
    default: Any = field(default=None, compare=False, hash=False)

    def parameter(self, key: str) -> str | None:
        return dict(self.parameters).get(key)

    def field(self, name: str) -> Field | None:
        for f in self.fields:
            if f.name == name:
                return f
        return None


@dataclass
class Struct:
    """A STRUCT value: its schema plus field values by name (missing = null)."""

    schema: Schema
    values: dict[str, Any] = field(default_factory=dict)

    def get(self, name: str) -> Any:
        """The field's value, or its schema's default when it is null (Connect's ``Struct.get``)."""
        value = self.values.get(name)
        if value is None:
            declared = self.schema.field(name)
            if declared is not None:
                return declared.schema.default
        return value


@dataclass(frozen=True)
class JavaDate:
    """A ``java.util.Date``: what Connect's ``Date``, ``Time`` and ``Timestamp`` values are."""

    millis: int


# Convenience singletons for the common primitive schemas.
INT8 = Schema(Type.INT8)
INT16 = Schema(Type.INT16)
INT32 = Schema(Type.INT32)
INT64 = Schema(Type.INT64)
FLOAT32 = Schema(Type.FLOAT32)
FLOAT64 = Schema(Type.FLOAT64)
BOOLEAN = Schema(Type.BOOLEAN)
STRING = Schema(Type.STRING)
BYTES = Schema(Type.BYTES)
OPTIONAL_STRING = Schema(Type.STRING, optional=True)
OPTIONAL_BYTES = Schema(Type.BYTES, optional=True)


@dataclass(frozen=True)
class SchemaAndValue:
    """What a converter returns: ``schema`` is None for schemaless data."""

    schema: Schema | None
    value: Any


class DataError(ValueError):
    """A record cannot be converted or mapped (bad bytes, unsupported type, limit exceeded).

    Pipelines turn it into a dead-letter row (``error_class`` = the subclass name, or the
    ``error_class`` attribute) instead of crashing, so it must carry a one-line message.
    """

    error_class = "DataError"
