"""Pub/Sub Lite source, one message at a time: a Lite message → a Kafka record serialized by the
worker's converters, and the Kafka partitioner for its keys.
"""

from __future__ import annotations

import base64
import struct as _struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pubsub_connect.model.avro.writer import encode_datum, top_level_datum
from pubsub_connect.model.connect import Schema, Type
from pubsub_connect.model.converters import (
    BYTE_ARRAY_CONVERTER,
    REGISTRY_AVRO_CONVERTERS,
    SIMPLE_HEADER_CONVERTER,
    JsonConverter,
    StringConverter,
    shared_converter,
)

if TYPE_CHECKING:

    pass


# ----------------------------------------------------------------------------------------------
# Source: Lite message → Kafka record
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LiteReceived:
    """A ``SequencedMessage`` from a Lite partition, times in nanoseconds since the epoch."""

    partition: int
    offset: int
    publish_time_ns: int
    key: bytes = b""
    data: bytes = b""
    attributes: Mapping[str, Sequence[bytes]] = field(default_factory=dict)
    event_time_ns: int | None = None

    @classmethod
    def from_proto(cls, partition: int, sequenced: Any) -> LiteReceived:
        """From a raw or proto-plus ``SequencedMessage``; attributes sorted by name.

        Protobuf maps have no order on the wire, so sorting is the only reproducible choice.
        """
        pb = getattr(sequenced, "_pb", sequenced)
        msg = pb.message
        event = None
        if msg.HasField("event_time"):
            event = msg.event_time.seconds * 1_000_000_000 + msg.event_time.nanos
        return cls(
            partition=partition,
            offset=pb.cursor.offset,
            publish_time_ns=pb.publish_time.seconds * 1_000_000_000 + pb.publish_time.nanos,
            key=bytes(msg.key),
            data=bytes(msg.data),
            attributes={name: tuple(msg.attributes[name].values) for name in sorted(msg.attributes)},
            event_time_ns=event,
        )


@dataclass(frozen=True)
class KafkaSourceRecord:
    """What the source produces to Kafka, plus the Lite coordinates it came from."""

    topic: str
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int
    lite_partition: int
    lite_offset: int
    #: None = let the producer's partitioner decide (see :class:`KafkaPartitioner`).
    partition: int | None = None


#: The header converters the Lite source implements: Connect's default writes a BYTES header as
#: Base64 text, ByteArrayConverter keeps the bytes.
LITE_SOURCE_HEADER_CONVERTERS = (SIMPLE_HEADER_CONVERTER, BYTE_ARRAY_CONVERTER)
#: The schemas Google's source task gives the key (``OPTIONAL_BYTES_SCHEMA``) and the value
#: (``BYTES_SCHEMA``) of each record: the worker's converters serialize them with these.
SOURCE_KEY_SCHEMA = Schema(Type.BYTES, optional=True)
SOURCE_VALUE_SCHEMA = Schema(Type.BYTES)
#: Converters whose output for a BYTES key or value is usable: ByteArrayConverter (the bytes),
#: JsonConverter (Base64 in JSON, like the original) and StringConverter (the bytes as UTF-8
#: text; Java prints an identity hash such as ``[B@1b6d3586`` instead). The number and boolean
#: converters cannot serialize bytes at all (the original fails every record).
LITE_SOURCE_CONVERTERS = (BYTE_ARRAY_CONVERTER, StringConverter.class_name, JsonConverter.class_name)


class UnsupportedLiteSourceConverter(ValueError):
    """A ``key.converter`` / ``value.converter`` / ``header.converter`` the Lite source cannot
    use: a configuration error reported at start-up, not per record."""


@dataclass(frozen=True)
class LiteSourceConverters:
    """How the Lite source serializes keys, values and headers, as Kafka Connect's worker does
    with what Google's source task returns (``key.converter``, ``value.converter``,
    ``header.converter``). Primitives only: shipped to Spark executors."""

    key_converter: str = BYTE_ARRAY_CONVERTER
    key_schemas_enable: bool = True
    value_converter: str = BYTE_ARRAY_CONVERTER
    value_schemas_enable: bool = True
    header_converter: str = SIMPLE_HEADER_CONVERTER
    #: A Schema Registry Avro converter's frame (magic byte and schema id) for keys / values: the
    #: ids of ``["null","bytes"]`` and ``"bytes"`` under their subjects, resolved by the pipeline.
    key_frame: bytes | None = None
    value_frame: bytes | None = None

    def check(self) -> None:
        """Raise :class:`UnsupportedLiteSourceConverter` for a converter that cannot write bytes."""
        for what, name in (("key.converter", self.key_converter), ("value.converter", self.value_converter)):
            if name in REGISTRY_AVRO_CONVERTERS:
                continue
            if name not in LITE_SOURCE_CONVERTERS:
                raise UnsupportedLiteSourceConverter(
                    f"{what}={name} cannot serialize the bytes keys and values of Pub/Sub Lite messages "
                    f"(Google's connector fails every record with it); use one of {', '.join(LITE_SOURCE_CONVERTERS)}")
        if self.header_converter not in LITE_SOURCE_HEADER_CONVERTERS:
            raise UnsupportedLiteSourceConverter(
                f"header.converter={self.header_converter} is not supported by the Lite source; use one of "
                f"{', '.join(LITE_SOURCE_HEADER_CONVERTERS)}")

    @property
    def raw_keys(self) -> bool:
        return self.key_converter == BYTE_ARRAY_CONVERTER

    @property
    def raw_values(self) -> bool:
        return self.value_converter == BYTE_ARRAY_CONVERTER

    @property
    def raw_headers(self) -> bool:
        return self.header_converter == BYTE_ARRAY_CONVERTER

    def key(self, key: bytes | None) -> bytes | None:
        """The Kafka key bytes for a Lite key already mapped to None when empty."""
        if self.key_converter in REGISTRY_AVRO_CONVERTERS:  # the union's bytes branch; null stays null
            return None if key is None else _framed(self.key_frame, encode_datum(SOURCE_KEY_SCHEMA, key))
        return shared_converter(self.key_converter, self.key_schemas_enable).from_connect(SOURCE_KEY_SCHEMA, key)

    def value(self, data: bytes) -> bytes | None:
        if self.value_converter in REGISTRY_AVRO_CONVERTERS:  # top-level bytes: as they are, as Confluent writes
            return _framed(self.value_frame, top_level_datum(SOURCE_VALUE_SCHEMA, data))
        return shared_converter(self.value_converter, self.value_schemas_enable).from_connect(SOURCE_VALUE_SCHEMA, data)

    def header(self, value: bytes) -> bytes:
        """``SimpleHeaderConverter`` prints a BYTES header as Base64 text (``Values.convertToString``)."""
        return value if self.raw_headers else base64.b64encode(value)


def _framed(frame: bytes | None, datum: bytes) -> bytes:
    if frame is None:
        raise ValueError("a Schema Registry converter's schema id was not resolved before its first record")
    return frame + datum


#: What an unconfigured worker uses: ByteArrayConverter for keys and values, SimpleHeaderConverter.
DEFAULT_SOURCE_CONVERTERS = LiteSourceConverters()


def source_record(message: LiteReceived, kafka_topic: str,
                  converters: LiteSourceConverters = DEFAULT_SOURCE_CONVERTERS) -> KafkaSourceRecord:
    """Google's Lite source mapping: empty key → null, each attribute value → one bytes header,
    timestamp = event time if present else publish time (milliseconds, rounded down); then the
    worker's converters: key, value and header values serialized by ``converters``."""
    time_ns = message.event_time_ns if message.event_time_ns is not None else message.publish_time_ns
    headers = tuple((name, converters.header(bytes(v))) for name, values in message.attributes.items() for v in values)
    return KafkaSourceRecord(
        topic=kafka_topic,
        key=converters.key(message.key or None),
        value=converters.value(message.data) or b"",
        headers=headers,
        timestamp_ms=time_ns // 1_000_000,
        lite_partition=message.partition,
        lite_offset=message.offset,
    )


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (the Java producer's key hash), as a signed 32-bit int."""
    mask = 0xFFFFFFFF
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    whole = length - length % 4
    for (k,) in _struct.iter_unpack("<I", data[:whole]):
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    tail = data[whole:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_partition_for_key(key: bytes, num_partitions: int) -> int:
    """The Java producer's partition for a keyed record: ``toPositive(murmur2(key)) % n``."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class KafkaPartitioner:
    """Explicit Kafka partitions for source records: same key → same partition, null keys
    round-robin (from ``start``, so a pipeline can continue the sequence across batches)."""

    def __init__(self, num_partitions: int, start: int = 0) -> None:
        if num_partitions < 1:
            raise ValueError("num_partitions must be at least 1")
        self.num_partitions = num_partitions
        self.counter = start

    def partition(self, key: bytes | None) -> int:
        if key:
            return kafka_partition_for_key(key, self.num_partitions)
        p = self.counter % self.num_partitions
        self.counter += 1
        return p
