"""The JSON Schemas a source registers for the Connect schemas it writes, as Confluent's
``JsonSchemaConverter`` registers them (``JsonSchemaData.fromConnectSchema``, then the schema's
canonical text): the keys and values of the Cloud Pub/Sub source, an optional STRING key, a BYTES
value, and a STRUCT of a BYTES ``message`` and STRING attributes.

The text is Confluent's to the byte, so that the registry finds the version it already has (a
registry compares schemas by text): ``type`` first, then ``connect.*`` keywords, an object's
properties and each schema's keywords in the order a Java ``HashMap`` of them iterates (the
schema library keeps them in one), a property's ``connect.index`` its field position, an optional
schema a ``oneOf`` of ``null`` and it. The datums are the values' JSON as Jackson writes it
compactly, which Kafka's JsonConverter with schemas off also writes (the source's JSON columns).
"""

from __future__ import annotations

import json
from typing import Any

from pubsub_connect.model.connect import Schema, Type
from pubsub_connect.model.jsonschema.schema import java_hash_order

_TYPES = {Type.STRING: "string", Type.BYTES: "string"}


def json_schema_text(schema: Schema) -> str:
    """Confluent's canonical text of ``schema``'s JSON Schema (STRING, BYTES, and records of them)."""
    return _text(_node(schema, None))


def _node(schema: Schema, index: int | None) -> list[tuple[str, Any]]:
    """The schema as ordered (keyword, value) pairs."""
    if schema.name is not None or schema.parameters or schema.version is not None or schema.default is not None:
        raise ValueError(f"no JSON Schema writer for a schema with metadata: {schema}")
    if schema.optional:
        required = Schema(schema.type, fields=schema.fields)
        pairs: list[tuple[str, Any]] = [("oneOf", [[("type", "null")], _node(required, None)])]
        return [*pairs, ("connect.index", index)] if index is not None else pairs
    extra: dict[str, Any] = {}
    if schema.type is Type.BYTES:
        extra["connect.type"] = "bytes"
    if index is not None:
        extra["connect.index"] = index
    if schema.type is Type.STRUCT:
        properties = {f.name: _node(f.schema, i) for i, f in enumerate(schema.fields)}
        ordered = _Object((name, properties[name]) for name in java_hash_order(list(properties)))
        return [("type", "object"), ("properties", ordered), *_hash_ordered(extra)]
    if schema.type not in _TYPES:
        raise ValueError(f"no JSON Schema writer for {schema.type.value}")
    return [("type", _TYPES[schema.type]), *_hash_ordered(extra)]


def _hash_ordered(keywords: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(k, keywords[k]) for k in java_hash_order(list(keywords))]


class _Object(list):  # type: ignore[type-arg]
    """Ordered pairs that are a JSON object even when there are none."""


def _text(node: Any) -> str:
    """Compact JSON of ordered pairs (lists of pairs are objects; other lists arrays)."""
    if isinstance(node, _Object) or (isinstance(node, list) and node and all(isinstance(p, tuple) for p in node)):
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{_text(v)}" for k, v in node) + "}"
    if isinstance(node, list):
        return "[" + ",".join(_text(v) for v in node) + "]"
    return json.dumps(node, ensure_ascii=False)
