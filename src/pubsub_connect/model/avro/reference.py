"""Schema Registry Avro → Connect values, one record at a time: what Confluent's ``AvroConverter``
gives a sink task (``AbstractKafkaAvroDeserializer`` then ``AvroData.toConnectData``), written to
read like it. The reference the JVM path is tested against; never on a hot path.

- The wire format: byte 0, the writer schema's id (4 bytes, big-endian), then the datum. A
  writer schema that is ``bytes`` has the raw bytes there, not their Avro encoding (Confluent's
  serializer writes a ``byte[]`` as is). Bytes after the datum are ignored, as Confluent's
  deserializer ignores them.
- Values: INT8…FLOAT64, BOOLEAN, STRING as Python numbers, booleans and strings (an enum is its
  symbol); BYTES and fixed as ``bytes``; Decimal as ``decimal.Decimal`` (the unscaled
  two's-complement integer and the schema's scale, as ``BigDecimal``); Date, Time and Timestamp as
  :class:`~pubsub_connect.model.connect.JavaDate`; records and Union structs as
  :class:`~pubsub_connect.model.connect.Struct` (a Union struct has the decoded branch's field set);
  arrays as lists; maps as dicts ordered by key (or (key, value) pairs when keys are unhashable).
- A datum that is null (a ``null`` writer schema, or the null branch of a top-level union) is an
  error: the original's worker fails its task on it (it dereferences the missing schema); here it
  is a dead letter. A Kafka null (a tombstone) is Connect's null, as with every converter.
"""

from __future__ import annotations

import struct
from decimal import Decimal
from functools import lru_cache
from typing import Any

from pubsub_connect.model.avro.schema import (
    AvroType,
    connect_schema,
    parse_schema,
    union_member_name,
)
from pubsub_connect.model.avro.wire import FramedConverter, split_frame
from pubsub_connect.model.avro.writer import zigzag_varint
from pubsub_connect.model.connect import (
    DATE,
    DECIMAL,
    MILLIS_PER_DAY,
    TIME,
    TIMESTAMP,
    DataError,
    JavaDate,
    Schema,
    SchemaAndValue,
    Struct,
    Type,
)
from pubsub_connect.model.converters import to_float32


class AvroDataError(DataError):
    """The bytes do not decode with their writer schema (truncated, a bad length or index)."""

    error_class = "AvroDataError"


class _Reader:
    """Avro's binary encoding over one buffer (zig-zag varints, length-prefixed bytes)."""

    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def long(self) -> int:
        shift = result = 0
        while True:
            if self.pos >= len(self.data):
                raise AvroDataError("the datum ends inside a number")
            byte = self.data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                break
            shift += 7
            if shift > 63:
                raise AvroDataError("a number is longer than 10 bytes")
        return (result >> 1) ^ -(result & 1)

    def take(self, count: int) -> bytes:
        if count < 0:
            raise AvroDataError(f"a negative length ({count})")
        end = self.pos + count
        if end > len(self.data):
            raise AvroDataError(f"the datum ends {end - len(self.data)} bytes early")
        chunk = self.data[self.pos:end]
        self.pos = end
        return chunk

    def blocks(self) -> int:
        """The item count of the next block of an array or map (0: the end)."""
        count = self.long()
        if count < 0:
            self.long()  # the block's size in bytes, for skipping
            count = -count
        return count


class AvroValueReader:
    """Decodes one writer schema's datums into Connect values (its Connect schema built once)."""

    def __init__(self, schema_text: str):
        self.avro = parse_schema(schema_text)
        self.schema = connect_schema(self.avro)
        self._schemas: dict[int, Schema] = {}
        self._index(self.avro, self.schema)

    def _index(self, avro: AvroType, schema: Schema) -> None:
        """Each node's Connect schema, by node: values are built against them."""
        if id(avro) in self._schemas:
            return
        self._schemas[id(avro)] = schema
        if avro.kind == "record":
            for (_, field_type), declared in zip(avro.fields, schema.fields, strict=True):
                self._index(field_type, declared.schema)
        elif avro.kind == "array" and avro.items is not None:
            if schema.type is Type.MAP:
                key, value = avro.items.fields
                self._index(key[1], schema.key_schema)  # type: ignore[arg-type]
                self._index(value[1], schema.value_schema)  # type: ignore[arg-type]
            else:
                self._index(avro.items, schema.value_schema)  # type: ignore[arg-type]
        elif avro.kind == "map" and avro.items is not None:
            self._index(avro.items, schema.value_schema)  # type: ignore[arg-type]
        elif avro.kind == "union":
            others = [b for b in avro.branches if b.kind != "null"]
            if _flattened(avro):
                for branch in others:
                    self._index(branch, schema)
            else:
                for branch, declared in zip(others, schema.fields, strict=True):
                    self._index(branch, declared.schema)

    def decode(self, payload: bytes) -> Any:
        """The Connect value of one datum."""
        if self.avro.kind == "bytes":  # written as is, not Avro-encoded (a Decimal's unscaled bytes too)
            return self._decimal(self.avro, payload) if self.schema.name == DECIMAL else bytes(payload)
        reader = _Reader(payload)
        value = self._read(self.avro, reader)
        if value is None:
            raise AvroDataError("the datum is null; Connect has no schema for it")
        return value

    def _read(self, avro: AvroType, reader: _Reader) -> Any:
        kind = avro.kind
        if kind == "null":
            return None
        if kind == "boolean":
            return reader.take(1) != b"\x00"
        if kind in ("int", "long"):
            return self._logical(avro, reader.long())
        if kind == "float":
            return to_float32(struct.unpack("<f", reader.take(4))[0])
        if kind == "double":
            return struct.unpack("<d", reader.take(8))[0]
        if kind == "string":
            return reader.take(reader.long()).decode("utf-8", "replace")
        if kind in ("bytes", "fixed"):
            raw = reader.take(avro.size if kind == "fixed" else reader.long())
            return self._decimal(avro, raw) if self._schemas[id(avro)].name == DECIMAL else raw
        if kind == "enum":
            index = reader.long()
            if not 0 <= index < len(avro.symbols):
                raise AvroDataError(f"enum {avro.name} has no symbol {index}")
            return avro.symbols[index]
        if kind == "record":
            schema = self._schemas[id(avro)]
            return Struct(schema, {name: self._read(field_type, reader) for name, field_type in avro.fields})
        if kind == "array":
            assert avro.items is not None
            items = []
            while count := reader.blocks():
                items.extend(self._read(avro.items, reader) for _ in range(count))
            if self._schemas[id(avro)].type is Type.MAP:
                pairs = [(entry.get("key"), entry.get("value")) for entry in items]
                try:
                    return dict(pairs)
                except TypeError:  # unhashable keys (structs, lists): pairs, as connect.py allows
                    return pairs
            return items
        if kind == "map":
            assert avro.items is not None
            entries: dict[str, Any] = {}
            while count := reader.blocks():
                for _ in range(count):
                    key = reader.take(reader.long()).decode("utf-8", "replace")
                    entries[key] = self._read(avro.items, reader)
            # By name: Avro's decoder gives Connect a HashMap, whose order no one can rely on.
            return dict(sorted(entries.items()))
        return self._union(avro, reader)

    def _union(self, avro: AvroType, reader: _Reader) -> Any:
        index = reader.long()
        if not 0 <= index < len(avro.branches):
            raise AvroDataError(f"a union has no branch {index}")
        branch = avro.branches[index]
        value = self._read(branch, reader)
        if value is None or _flattened(avro):
            return value
        return Struct(self._schemas[id(avro)], {union_member_name(branch): value})

    def _logical(self, avro: AvroType, number: int) -> Any:
        name = self._schemas[id(avro)].name
        if name == DATE:
            return JavaDate(number * MILLIS_PER_DAY)
        if name == TIME:
            if not 0 <= number <= MILLIS_PER_DAY:
                raise AvroDataError(f"time-millis {number} is outside 0..{MILLIS_PER_DAY} (Connect's Time)")
            return JavaDate(number)
        if name == TIMESTAMP:
            return JavaDate(number)
        return number

    def _decimal(self, avro: AvroType, raw: bytes) -> Decimal:
        if not raw:
            raise AvroDataError("a decimal with no bytes (Zero length BigInteger)")
        unscaled = int.from_bytes(raw, "big", signed=True)
        # Built from its digits: no context precision rounds it (BigDecimal has none either).
        digits = tuple(int(d) for d in str(abs(unscaled)))
        return Decimal((int(unscaled < 0), digits, -int(avro.props.get("scale", 0))))


def _flattened(union: AvroType) -> bool:
    """A union Connect represents by its one non-null branch (optional when null is the other)."""
    others = [b for b in union.branches if b.kind != "null"]
    return len(union.branches) == 1 or (len(union.branches) == 2 and len(others) == 1)


class RegistryAvroConverter(FramedConverter):
    """Confluent's ``AvroConverter`` (and Apicurio's, in the same wire format) for the reference."""

    def read(self, schema_id: int, writer: str, payload: bytes) -> SchemaAndValue:
        reader = _reader(writer)
        return SchemaAndValue(reader.schema, reader.decode(payload))

    def datum(self, data: bytes) -> bytes:
        """The value's datum in Avro's binary encoding without the header: what a Pub/Sub topic
        whose schema is the writer schema takes. A top-level ``bytes`` value, which Confluent's
        serializer writes without its length, gets its length back."""
        schema_id, payload = split_frame(data)
        if _reader(self._schema_text(schema_id)).avro.kind == "bytes":
            return zigzag_varint(len(payload)) + payload
        return payload


@lru_cache(maxsize=256)
def _reader(schema_text: str) -> AvroValueReader:
    return AvroValueReader(schema_text)
