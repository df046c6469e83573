"""Avro schemas: parsed once into :class:`AvroType` trees, and mapped to the Connect schemas
Confluent's ``AvroData`` gives them (``toConnectSchema``, default converter settings).

The rules, as Confluent's converter applies them (*divergence* where this differs):

- primitives: ``boolean`` BOOLEAN, ``int`` INT32 (INT8/INT16 with ``"connect.type"``), ``long``
  INT64, ``float`` FLOAT32, ``double`` FLOAT64, ``string`` STRING (a ``uuid`` too), ``bytes`` BYTES;
- ``fixed``: BYTES named by its full name, parameter ``connect.fixed.size``;
- ``decimal`` on ``bytes`` or ``fixed``: Connect's Decimal, parameter ``scale`` (and
  ``connect.decimal.precision`` unless the precision is 64; ``connect.fixed.size`` on a fixed);
- ``date``, ``time-millis``, ``timestamp-millis``: Connect's Date, Time, Timestamp; every other
  logical type (``time-micros``, ``timestamp-micros``, ``local-timestamp-*``) stays a plain number;
  ``"connect.name"`` names a schema (so a long named Timestamp is one);
- ``record``: STRUCT named by its full name, its fields required unless nullable;
- ``enum``: STRING named by its full name, parameters ``io.confluent.connect.avro.Enum`` and one
  ``io.confluent.connect.avro.Enum.<symbol>`` per symbol;
- ``array``: ARRAY; an array of ``io.confluent.connect.avro.MapEntry`` records (``key``,
  ``value``) is a MAP with keys of any type; ``map``: MAP with STRING keys;
- unions: of ``null`` and one other type, that type, optional; of one type, that type (as
  Confluent Platform 7.7 and later flatten it); any other: STRUCT ``io.confluent.connect.avro.Union``
  with one optional field per branch but ``null``, named by the branch's simple name (records,
  enums, fixed) or its type (``int``, ``string``, ``array``, …), optional when ``null`` is one.

A ``"connect.default"`` on a primitive (Avro written by a Connect converter) is the schema's
default, which Connect's ``Struct.get`` gives for a null field; Avro's own field defaults only
matter to a reader schema, never to a decoded record.

Recursive records cannot become Connect schemas (Connect's are trees): such a schema is refused
with one line, as every record whose writer schema it is (a dead letter).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pubsub_connect.model.connect import (
    DATE,
    DECIMAL,
    TIME,
    TIMESTAMP,
    DataError,
    Field,
    Schema,
    Type,
)

PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
UNION_NAME = "io.confluent.connect.avro.Union"
MAP_ENTRY_NAME = "io.confluent.connect.avro.MapEntry"
ENUM_PARAMETER = "io.confluent.connect.avro.Enum"
FIXED_SIZE_PARAMETER = "connect.fixed.size"
SCALE_PARAMETER = "scale"
PRECISION_PARAMETER = "connect.decimal.precision"
#: The precision Connect assumes when a Decimal has none.
DEFAULT_PRECISION = 64
_PRIMITIVE_TYPES = {"boolean": Type.BOOLEAN, "int": Type.INT32, "long": Type.INT64, "float": Type.FLOAT32,
                    "double": Type.FLOAT64, "bytes": Type.BYTES, "string": Type.STRING}
_LOGICAL = {("int", "date"): DATE, ("int", "time-millis"): TIME, ("long", "timestamp-millis"): TIMESTAMP}


class AvroSchemaError(DataError):
    """A writer schema that is not valid Avro, or that Connect cannot represent."""

    error_class = "AvroSchemaError"


@dataclass(eq=False)
class AvroType:
    """One node of a parsed Avro schema: ``kind`` is a primitive or ``record``, ``enum``, ``fixed``,
    ``array``, ``map``, ``union``; named types carry their full ``name``."""

    kind: str
    name: str | None = None
    fields: list[tuple[str, AvroType]] = field(default_factory=list)
    symbols: tuple[str, ...] = ()
    size: int = 0
    items: AvroType | None = None
    branches: list[AvroType] = field(default_factory=list)
    logical: str | None = None
    props: dict[str, Any] = field(default_factory=dict)

    @property
    def simple_name(self) -> str:
        return (self.name or self.kind).rsplit(".", 1)[-1]


def parse_schema(text: str) -> AvroType:
    """Parse an Avro schema's JSON text (as the registry returns it)."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise AvroSchemaError(f"the writer schema is not JSON: {exc}") from None
    return _Parser().parse(document, None)


class _Parser:
    def __init__(self) -> None:
        self.named: dict[str, AvroType] = {}

    def parse(self, node: Any, namespace: str | None) -> AvroType:
        if isinstance(node, str):
            return self._reference(node, namespace)
        if isinstance(node, list):
            return AvroType("union", branches=[self.parse(branch, namespace) for branch in node])
        if not isinstance(node, dict) or "type" not in node:
            raise AvroSchemaError(f"not an Avro schema: {json.dumps(node)[:80]}")
        kind = node["type"]
        props = {k: v for k, v in node.items() if k not in ("type", "name", "namespace", "fields", "symbols",
                                                              "items", "values", "size", "logicalType")}
        logical = node.get("logicalType")
        if isinstance(kind, (dict, list)):
            return self.parse(kind, namespace)
        if kind in PRIMITIVES:
            return AvroType(kind, logical=logical, props=props)
        if kind in ("record", "error", "enum", "fixed"):
            name = self._full_name(node, namespace)
            inner = name.rpartition(".")[0] or None
            parsed = AvroType("record" if kind == "error" else kind, name=name, logical=logical, props=props)
            self.named[name] = parsed
            if kind in ("record", "error"):
                for f in node.get("fields", []):
                    parsed.fields.append((f["name"], self.parse(f["type"], inner)))
            elif kind == "enum":
                parsed.symbols = tuple(node.get("symbols", ()))
            else:
                parsed.size = int(node["size"])
            return parsed
        if kind == "array":
            return AvroType("array", items=self.parse(node["items"], namespace), props=props)
        if kind == "map":
            return AvroType("map", items=self.parse(node["values"], namespace), props=props)
        return self._reference(kind, namespace)

    def _reference(self, name: str, namespace: str | None) -> AvroType:
        if name in PRIMITIVES:
            return AvroType(name)
        for candidate in (f"{namespace}.{name}" if namespace and "." not in name else name, name):
            if candidate in self.named:
                return self.named[candidate]
        raise AvroSchemaError(f"the writer schema names an undefined type {name!r}")

    @staticmethod
    def _full_name(node: dict[str, Any], namespace: str | None) -> str:
        name = str(node.get("name") or "")
        if not name:
            raise AvroSchemaError(f"a {node['type']} without a name")
        if "." in name:
            return name
        space = node.get("namespace", namespace)
        return f"{space}.{name}" if space else name


def parsing_canonical_form(text: str) -> str:
    """Avro's Parsing Canonical Form of a schema: full names, only the attributes that shape the
    binary encoding (no doc, default, alias or logical type), in the specification's order. Two
    schemas with one canonical form read the same bytes the same way."""
    named: set[str] = set()

    def form(node: AvroType) -> str:
        def text_of(value: Any) -> str:
            return json.dumps(value, ensure_ascii=False)

        if node.kind in PRIMITIVES:
            return text_of(node.kind)
        if node.kind in ("record", "enum", "fixed"):
            if node.name in named:
                return text_of(node.name)
            named.add(str(node.name))
            head = f'{{"name":{text_of(node.name)},"type":"{node.kind}"'
            if node.kind == "record":
                fields = ",".join(f'{{"name":{text_of(name)},"type":{form(kind)}}}' for name, kind in node.fields)
                return f'{head},"fields":[{fields}]}}'
            if node.kind == "enum":
                return f'{head},"symbols":[{",".join(text_of(s) for s in node.symbols)}]}}'
            return f'{head},"size":{node.size}}}'
        if node.kind == "union":
            return f'[{",".join(form(branch) for branch in node.branches)}]'
        assert node.items is not None
        return f'{{"type":"{node.kind}","{"items" if node.kind == "array" else "values"}":{form(node.items)}}}'

    return form(parse_schema(text))


def connect_schema(avro: AvroType, optional: bool = False) -> Schema:
    """The Connect schema of ``avro`` (``AvroData.toConnectSchema``)."""
    return _ConnectMapper().map(avro, optional)


class _ConnectMapper:
    def __init__(self) -> None:
        self.open_records: set[str] = set()

    def map(self, avro: AvroType, optional: bool = False) -> Schema:
        kind = avro.kind
        name = avro.props.get("connect.name")
        parameters = _connect_parameters(avro)
        if kind in _PRIMITIVE_TYPES and kind != "bytes":
            schema_type = _PRIMITIVE_TYPES[kind]
            connect_type = avro.props.get("connect.type")
            if kind == "int" and connect_type in ("int8", "int16"):
                schema_type = Type.INT8 if connect_type == "int8" else Type.INT16
            logical = _LOGICAL.get((kind, avro.logical or ""))
            return Schema(schema_type, optional, name=name or logical, parameters=parameters,
                          default=None if name or logical else avro.props.get("connect.default"))
        if kind in ("bytes", "fixed"):
            if avro.logical == "decimal":
                return Schema(Type.BYTES, optional, name=DECIMAL, parameters=_decimal_parameters(avro), version=1)
            if kind == "fixed":
                return Schema(Type.BYTES, optional, name=name or avro.name,
                              parameters=(*parameters, (FIXED_SIZE_PARAMETER, str(avro.size))))
            return Schema(Type.BYTES, optional, name=name, parameters=parameters)
        if kind == "enum":
            symbols = tuple((f"{ENUM_PARAMETER}.{s}", s) for s in avro.symbols)
            return Schema(Type.STRING, optional, name=name or avro.name,
                          parameters=((ENUM_PARAMETER, avro.name or ""), *symbols))
        if kind == "array":
            assert avro.items is not None
            entry = avro.items
            if _is_map_entry(entry):
                (_, key), (_, value) = entry.fields
                return Schema(Type.MAP, optional, key_schema=self.map(key), value_schema=self.map(value), name=name)
            return Schema(Type.ARRAY, optional, value_schema=self.map(entry), name=name)
        if kind == "map":
            assert avro.items is not None
            return Schema(Type.MAP, optional, key_schema=Schema(Type.STRING), value_schema=self.map(avro.items),
                          name=name)
        if kind == "record":
            return self._record(avro, optional, name)
        if kind == "union":
            return self._union(avro, optional)
        raise AvroSchemaError("a standalone null schema cannot be a Connect schema")

    def _record(self, avro: AvroType, optional: bool, name: str | None) -> Schema:
        full = avro.name or ""
        if full in self.open_records:
            raise AvroSchemaError(f"record {full} refers to itself; Connect schemas cannot be recursive")
        self.open_records.add(full)
        fields = tuple(Field(field_name, self.map(field_type)) for field_name, field_type in avro.fields)
        self.open_records.discard(full)
        return Schema(Type.STRUCT, optional, fields, name=name or full or None)

    def _union(self, avro: AvroType, optional: bool) -> Schema:
        branches = avro.branches
        others = [b for b in branches if b.kind != "null"]
        nullable = len(others) < len(branches)
        if len(branches) == 2 and nullable:
            return self.map(others[0], optional=True)
        if len(branches) == 1:
            return self.map(branches[0], optional)
        fields: list[Field] = []
        for branch in others:
            member = union_member_name(branch)
            if any(f.name == member for f in fields):
                raise AvroSchemaError(f"union has two branches named {member}")
            fields.append(Field(member, self.map(branch, optional=True)))
        return Schema(Type.STRUCT, optional or nullable, tuple(fields), name=UNION_NAME)


def _is_map_entry(avro: AvroType) -> bool:
    """The record type AvroData writes a map with keys of another type than string as."""
    named = avro.name == MAP_ENTRY_NAME or avro.props.get("connect.internal.type") == "MapEntry"
    return avro.kind == "record" and named and [n for n, _ in avro.fields] == ["key", "value"]


def union_member_name(branch: AvroType) -> str:
    """A union branch's field name in Connect's Union struct (``AvroData.unionMemberFieldName``)."""
    if branch.kind in ("record", "enum", "fixed"):
        return branch.simple_name
    return branch.kind


def _connect_parameters(avro: AvroType) -> tuple[tuple[str, str], ...]:
    declared = avro.props.get("connect.parameters")
    if isinstance(declared, dict):
        return tuple((str(k), str(v)) for k, v in declared.items())
    return ()


def _decimal_parameters(avro: AvroType) -> tuple[tuple[str, str], ...]:
    scale = int(avro.props.get("scale", 0))
    precision = int(avro.props.get("precision", DEFAULT_PRECISION))
    parameters = [(SCALE_PARAMETER, str(scale))]
    if precision != DEFAULT_PRECISION:
        parameters.append((PRECISION_PARAMETER, str(precision)))
    if avro.kind == "fixed":
        parameters.append((FIXED_SIZE_PARAMETER, str(avro.size)))
    return tuple(parameters)

