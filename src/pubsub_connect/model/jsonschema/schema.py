"""JSON Schema → Connect schema, as Confluent's ``JsonSchemaData.toConnectSchema`` maps the schemas
Kafka Connect users register (its default settings: properties are not made optional for not
being required, singleton unions are flattened, no generalized sum types):

- ``boolean`` → BOOLEAN; ``integer`` → INT64 and ``number`` → FLOAT64 unless ``connect.type``
  names INT8…FLOAT64 (or ``bytes``: a Decimal as a number); ``string`` → STRING, or BYTES
  (base64 text) with ``connect.type: bytes``;
- ``object`` → STRUCT, its properties ordered by ``connect.index`` where given, else in the order
  a Java ``HashMap`` of their names iterates (the order Confluent's schema library keeps them in);
  ``object`` with ``connect.type: map`` → MAP of STRING to ``additionalProperties``;
- ``array`` → ARRAY of ``items``; with ``connect.type: map`` and ``items`` an object of ``key``
  and ``value`` → MAP of those;
- ``oneOf``/``anyOf`` of ``null`` and one schema, or ``type: [T, "null"]`` → that schema,
  optional; ``enum`` (and ``const``) of strings → STRING with Connect's enum parameters;
- ``title`` → the schema's name (Connect's logical types: ``org.apache.kafka.connect.data.Decimal``
  and its ``connect.parameters`` scale, ``Date``, ``Time``, ``Timestamp``), ``connect.version``,
  ``connect.parameters``, a primitive's ``default``; local ``$ref`` (``#/definitions/…``) followed.

What has no Connect value a Pub/Sub message can carry here is refused, naming the construct (its
records are dead letters with the reason): unions of several types (Confluent's ``OneOf``
struct), ``allOf``, ``not``, a schema that accepts any value, recursive references, references
to other documents, defaults of containers.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from pubsub_connect.model.connect import DECIMAL, DataError, Field, Schema, Type
from pubsub_connect.model.jsonschema.values import to_connect_value

#: ``connect.type`` values and the Connect types they name.
_CONNECT_NUMBER_TYPES = {"int8": Type.INT8, "int16": Type.INT16, "int32": Type.INT32, "int64": Type.INT64,
                         "float32": Type.FLOAT32, "float64": Type.FLOAT64, "bytes": Type.BYTES}
#: Connect's enum parameter (``JsonSchemaData.JSON_TYPE_ENUM``) and its marker for a null symbol.
ENUM_PARAMETER = "io.confluent.connect.json.Enum"
_NULL_SYMBOL = "<NULL>"
#: Keywords that only describe a schema (they change nothing Connect maps).
_ANNOTATIONS = frozenset({"$schema", "$id", "id", "title", "description", "default", "examples", "$comment",
                          "definitions", "$defs", "connect.index", "connect.version", "connect.parameters",
                          "connect.type", "readOnly", "writeOnly", "deprecated"})


class JsonSchemaError(DataError):
    """A writer schema that is not JSON Schema, or uses what has no Connect mapping here."""

    error_class = "JsonSchemaError"


def connect_schema_of(text: str) -> Schema:
    """The Connect schema of a JSON Schema's text."""
    try:
        root = json.loads(text, parse_float=Decimal)
    except ValueError as exc:
        raise JsonSchemaError(f"the writer schema is not JSON: {exc}") from None
    return _Mapper(root).map(root, "#")


def java_hash_order(names: list[str]) -> list[str]:
    """``names`` (distinct) in the order a ``java.util.HashMap`` holding them iterates: by bucket
    (the spread ``String.hashCode`` masked to the table's size, 16 doubled while more than 3/4
    full), ties in the order they were put in (``names``' order)."""
    capacity = 16
    while len(names) > capacity * 3 // 4:
        capacity *= 2

    def bucket(name: str) -> int:
        h = 0
        units = name.encode("utf-16-be")
        for i in range(0, len(units), 2):
            h = (31 * h + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return [name for _, _, name in sorted((bucket(n), i, n) for i, n in enumerate(names))]


class _Mapper:
    def __init__(self, root: Any) -> None:
        self.root = root
        self.following: set[str] = set()

    def map(self, node: Any, where: str, optional: bool = False) -> Schema:
        if node is True or node == {}:
            raise JsonSchemaError(f"{where} accepts any JSON value; a Connect schema needs its type")
        if not isinstance(node, dict):
            raise JsonSchemaError(f"{where} is not a JSON Schema (an object)")
        if "$ref" in node:
            return self._reference(str(node["$ref"]), where, optional)
        for keyword in ("allOf", "not", "if", "patternProperties", "dependentSchemas"):
            if keyword in node:
                raise JsonSchemaError(f"{where} uses {keyword}, which has no Connect mapping here")
        for keyword in ("oneOf", "anyOf"):
            if keyword in node:
                return self._union(node, keyword, where, optional)
        types = node.get("type")
        if isinstance(types, list):
            return self._type_list(node, types, where, optional)
        if types is None:
            types = _implied_type(node)
        if "enum" in node or "const" in node:
            if types in (None, "string"):
                return self._finish(node, self._enum(node, where), optional)
            if types not in ("integer", "number"):
                raise JsonSchemaError(f"{where}: an enum of {types} values has no Connect mapping")
        if types is None:
            raise JsonSchemaError(f"{where} accepts any JSON value; a Connect schema needs its type")
        return self._finish(node, self._typed(node, str(types), where), optional)

    def _typed(self, node: dict[str, Any], kind: str, where: str) -> Schema:
        connect_type = node.get("connect.type")
        if kind == "boolean":
            return Schema(Type.BOOLEAN)
        if kind in ("integer", "number"):
            if connect_type is None:
                return Schema(Type.INT64 if kind == "integer" else Type.FLOAT64)
            if connect_type not in _CONNECT_NUMBER_TYPES:
                raise JsonSchemaError(f"{where}: connect.type {connect_type} is not a number type")
            return Schema(_CONNECT_NUMBER_TYPES[connect_type])
        if kind == "string":
            return Schema(Type.BYTES if connect_type == "bytes" else Type.STRING)
        if kind == "array":
            return self._array(node, where, connect_type)
        if kind == "object":
            return self._object(node, where, connect_type)
        if kind == "null":
            raise JsonSchemaError(f"{where} only allows null; a Connect schema needs another type")
        raise JsonSchemaError(f"{where}: type {kind} is not a JSON Schema type")

    def _array(self, node: dict[str, Any], where: str, connect_type: Any) -> Schema:
        items = node.get("items")
        if not isinstance(items, dict):
            raise JsonSchemaError(f"{where}: Array schema did not specify the items type")
        entry = items.get("properties") if connect_type == "map" and items.get("type") == "object" else None
        if isinstance(entry, dict):
            if "key" not in entry or "value" not in entry:
                raise JsonSchemaError(f"{where}: a map's entries need the properties key and value")
            return Schema(Type.MAP, key_schema=self.map(entry["key"], f"{where}/items/properties/key"),
                          value_schema=self.map(entry["value"], f"{where}/items/properties/value"))
        return Schema(Type.ARRAY, value_schema=self.map(items, f"{where}/items"))

    def _object(self, node: dict[str, Any], where: str, connect_type: Any) -> Schema:
        if connect_type == "map":
            values = node.get("additionalProperties")
            if not isinstance(values, dict):
                raise JsonSchemaError(f"{where}: a map needs additionalProperties, the schema of its values")
            return Schema(Type.MAP, key_schema=Schema(Type.STRING),
                          value_schema=self.map(values, f"{where}/additionalProperties"))
        properties = node.get("properties") or {}
        if not isinstance(properties, dict):
            raise JsonSchemaError(f"{where}: properties is not an object")
        by_index: dict[int, str] = {}
        for name in java_hash_order(list(properties)):
            index = properties[name].get("connect.index") if isinstance(properties[name], dict) else None
            position = index if isinstance(index, int) else len(by_index)  # Confluent's TreeMap
            if position in by_index:  # Confluent's converter keeps the later one: a field lost
                raise JsonSchemaError(f"{where}: properties {by_index[position]} and {name} both take field "
                                      f"position {position} (connect.index given for some properties only)")
            by_index[position] = name
        fields = tuple(Field(name, self.map(properties[name], f"{where}/properties/{name}"))
                       for _, name in sorted(by_index.items()))
        return Schema(Type.STRUCT, fields=fields)

    def _enum(self, node: dict[str, Any], where: str) -> Schema:
        symbols = node["enum"] if "enum" in node else [node["const"]]
        if not isinstance(symbols, list):
            raise JsonSchemaError(f"{where}: enum is not an array")
        parameters = [(ENUM_PARAMETER, "")]
        for symbol in symbols:
            text = _NULL_SYMBOL if symbol is None else _java_text(symbol)
            parameters.append((f"{ENUM_PARAMETER}.{text}", text))
        return Schema(Type.STRING, parameters=tuple(dict(parameters).items()))

    def _union(self, node: dict[str, Any], keyword: str, where: str, optional: bool) -> Schema:
        branches = node[keyword]
        if not isinstance(branches, list) or not branches:
            raise JsonSchemaError(f"{where}: {keyword} is not a list of schemas")
        if set(node) - _ANNOTATIONS - {keyword}:
            raise JsonSchemaError(f"{where}: {keyword} beside other keywords has no Connect mapping here")
        if len(branches) == 1:  # flattened, its optionality left as the branch says (Confluent's)
            return self.map(branches[0], f"{where}/{keyword}/0")
        others = [(i, b) for i, b in enumerate(branches) if not _is_null(b)]
        if len(branches) == 2 and len(others) == 1:
            index, branch = others[0]
            return self.map(branch, f"{where}/{keyword}/{index}", optional=True)
        raise JsonSchemaError(f"{where}: a {keyword} of several types (Confluent's OneOf struct) is not supported")

    def _type_list(self, node: dict[str, Any], types: list[Any], where: str, optional: bool) -> Schema:
        others = [t for t in types if t != "null"]
        if len(others) != 1:
            raise JsonSchemaError(f"{where}: type {json.dumps(types)} unites several types (Confluent's OneOf "
                                  "struct), which is not supported")
        return self.map({**node, "type": others[0]}, where, optional=optional or len(types) > 1)

    def _reference(self, ref: str, where: str, optional: bool) -> Schema:
        if not ref.startswith("#"):
            raise JsonSchemaError(f"{where}: $ref {ref} names another document; only references within the "
                                  "schema are followed")
        if ref in self.following:
            raise JsonSchemaError(f"{where}: $ref {ref} refers to itself; Connect schemas cannot be recursive")
        target: Any = self.root
        for part in [p for p in ref[1:].split("/") if p]:
            key = part.replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict) and key in target:
                target = target[key]
            elif isinstance(target, list) and key.isdigit() and int(key) < len(target):
                target = target[int(key)]
            else:
                raise JsonSchemaError(f"{where}: $ref {ref} names nothing in the schema")
        self.following.add(ref)
        try:
            return self.map(target, ref, optional)
        finally:
            self.following.discard(ref)

    def _finish(self, node: dict[str, Any], schema: Schema, optional: bool) -> Schema:
        """The metadata every schema may carry, and its optionality."""
        name = node.get("title") if isinstance(node.get("title"), str) else None
        version = node.get("connect.version")
        declared = node.get("connect.parameters")
        parameters = dict(schema.parameters)
        if isinstance(declared, dict):
            parameters.update({str(k): str(v) for k, v in declared.items()})
        if name == DECIMAL and (schema.type is not Type.BYTES or "scale" not in parameters):
            raise JsonSchemaError("a Decimal needs connect.type bytes and a scale in connect.parameters")
        default = None
        if "default" in node and node["default"] is not None:
            if not schema.type.is_primitive:
                raise JsonSchemaError(f"a default for a {schema.type.value} has no Connect mapping here")
            base = Schema(schema.type, name=name, parameters=tuple(parameters.items()))
            default = to_connect_value(base, node["default"], "default")
        return Schema(schema.type, optional, schema.fields, schema.key_schema, schema.value_schema,
                      name=name, parameters=tuple(parameters.items()),
                      version=version if isinstance(version, int) else None, default=default)


def _implied_type(node: dict[str, Any]) -> str | None:
    """The type a schema without ``type`` has by its keywords (an object's or an array's)."""
    if "properties" in node or "additionalProperties" in node or "required" in node:
        return "object"
    if "items" in node:
        return "array"
    return None


def _is_null(node: Any) -> bool:
    return isinstance(node, dict) and node.get("type") == "null"


def _java_text(value: Any) -> str:
    """An enum symbol as ``Object.toString`` writes it (JSON's true, false and numbers)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), default=str)
    return str(value)
