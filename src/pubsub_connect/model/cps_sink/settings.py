"""The sink connector's options, record types, errors and Pub/Sub's limits: what the per-record
reference and the batch implementation share.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pubsub_connect.model.connect import DataError
from pubsub_connect.model.converters import (
    DEFAULT_CONVERTER,
    KNOWN_CONVERTERS,
    REGISTRY_AVRO_CONVERTERS,
    REGISTRY_CONVERTERS,
)

if TYPE_CHECKING:
    pass


DEFAULT_MESSAGE_BODY_NAME = "cps_message_body"
ORDERING_KEY_SOURCES = ("none", "key", "partition")
#: ``messageBodyFormat``: Google's mapping of the value (``connect``: the ``messageBodyName``
#: field is the data, the other fields attributes), or, extensions for Avro values, the value's
#: own Avro datum as the data (``avro``: for a Pub/Sub topic whose schema is the records' Avro
#: schema) or the whole value as JSON (``json``: as Kafka's JsonConverter writes it without schemas).
CONNECT_BODY = "connect"
AVRO_BODY = "avro"
JSON_BODY = "json"
MESSAGE_BODY_FORMATS = (CONNECT_BODY, AVRO_BODY, JSON_BODY)

#: Pub/Sub resource limits (https://cloud.google.com/pubsub/quotas#resource_limits).
MAX_ATTRIBUTES = 100
MAX_ATTRIBUTE_KEY_BYTES = 256
MAX_ATTRIBUTE_VALUE_BYTES = 1024
MAX_ORDERING_KEY_BYTES = 1024
#: The official publisher rejects a PublishRequest larger than this (google-cloud-pubsub
#: ``_SERVER_PUBLISH_MAX_BYTES``).
PUBLISH_REQUEST_MAX_BYTES = 10_000_000
#: Room for the request's protobuf framing: topic path (<= ~310 bytes), message and field tags and
#: lengths (<= ~20 bytes), and <= 9 bytes per attribute entry (<= 900 bytes).
FRAMING_RESERVE_BYTES = 4_000
#: Largest accepted data + attribute keys + attribute values + ordering key, in bytes.
MAX_MESSAGE_BYTES = PUBLISH_REQUEST_MAX_BYTES - FRAMING_RESERVE_BYTES

KEY_ATTRIBUTE = "key"
TOPIC_ATTRIBUTE = "kafka.topic"
PARTITION_ATTRIBUTE = "kafka.partition"
OFFSET_ATTRIBUTE = "kafka.offset"
TIMESTAMP_ATTRIBUTE = "kafka.timestamp"



class UnsupportedValueError(DataError):
    """A Connect value the Pub/Sub data model cannot express (nested struct/map, null in an array…)."""

    error_class = "UnsupportedValueError"


class PubsubLimitError(DataError):
    """The message would break a Pub/Sub limit (size, attribute count/size, ordering key size)."""

    error_class = "PubsubLimitError"


class TopicSchemaError(DataError):
    """``messageBodyFormat=avro``: the record's writer schema is not one the topic's schema takes
    (Pub/Sub would refuse the message, and with it the publish of its whole batch)."""

    error_class = "TopicSchemaError"


#: ``messageBodyFormat=avro``: why the topic refuses datums of a writer schema (its text), or
#: None when it takes them.
BodySchemaCheck = Callable[[str], "str | None"]


@dataclass(frozen=True)
class CpsSinkSettings:
    """The sink keys that shape messages, already typed (``config`` builds this from properties)."""

    message_body_name: str = DEFAULT_MESSAGE_BODY_NAME
    metadata_publish: bool = False
    headers_publish: bool = False
    ordering_key_source: str = "none"
    key_converter: str = DEFAULT_CONVERTER
    value_converter: str = DEFAULT_CONVERTER
    key_schemas_enable: bool = True
    value_schemas_enable: bool = True
    message_body_format: str = CONNECT_BODY

    def __post_init__(self) -> None:
        if self.message_body_format not in MESSAGE_BODY_FORMATS:
            raise ValueError(f"messageBodyFormat must be one of {', '.join(MESSAGE_BODY_FORMATS)}, got "
                             f"{self.message_body_format!r}")
        needed = REGISTRY_AVRO_CONVERTERS if self.message_body_format == AVRO_BODY else REGISTRY_CONVERTERS
        if self.message_body_format != CONNECT_BODY and self.value_converter not in needed:
            wanted = "AvroConverter" if needed is REGISTRY_AVRO_CONVERTERS else "AvroConverter or JsonSchemaConverter"
            raise ValueError(f"messageBodyFormat={self.message_body_format} publishes the whole value of a Schema "
                             f"Registry converter: it needs value.converter={wanted}, not "
                             f"{self.value_converter.rsplit('.', 1)[-1]}")
        if self.ordering_key_source not in ORDERING_KEY_SOURCES:
            raise ValueError(
                f"orderingKeySource must be one of {', '.join(ORDERING_KEY_SOURCES)}, got {self.ordering_key_source!r}"
            )
        for name in (self.key_converter, self.value_converter):
            if name not in KNOWN_CONVERTERS and name not in REGISTRY_CONVERTERS:
                supported = ", ".join((*KNOWN_CONVERTERS, *REGISTRY_CONVERTERS))
                raise ValueError(f"unsupported converter {name!r}; supported: {supported}")


@dataclass(frozen=True)
class KafkaRecord:
    """One Kafka record as the sink sees it (a bronze row)."""

    key: bytes | None
    value: bytes | None
    topic: str = ""
    partition: int = 0
    offset: int = 0
    timestamp_ms: int | None = None
    headers: Sequence[tuple[str, bytes | None]] = field(default_factory=tuple)


@dataclass(frozen=True)
class PubsubMessage:
    """What gets published: ``ordering_key`` is ``""`` when none is set."""

    data: bytes
    attributes: dict[str, str]
    ordering_key: str = ""


@dataclass(frozen=True)
class SinkResult:
    """A mapped record: ``message`` is None when there is nothing to publish."""

    message: PubsubMessage | None
    skipped_headers: int = 0
