"""The Schema Registry wire format: byte 0 (the "magic byte"), the writer schema's id as 4
big-endian bytes, then the encoded datum (Confluent's serializers; Apicurio's with its Confluent
id handler). Shared by the per-record reference and the Spark expressions."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

from pubsub_connect.model.connect import DataError, SchemaAndValue

MAGIC_BYTE = 0
#: Bytes before the datum.
HEADER_BYTES = 5


class WireFormatError(DataError):
    """Bytes that are not in the wire format (another magic byte, or too short for the header)."""

    error_class = "WireFormatError"


def split_frame(data: bytes) -> tuple[int, bytes]:
    """(writer schema id, datum) of one framed value."""
    if not data or data[0] != MAGIC_BYTE or len(data) < HEADER_BYTES:
        raise WireFormatError(wire_format_message(data[:1] if data[:1] != bytes([MAGIC_BYTE]) else b""))
    return int.from_bytes(data[1:HEADER_BYTES], "big"), bytes(data[HEADER_BYTES:])


#: The line for bytes too short for the header, and the two parts of the line for another first
#: byte (its two lower-case hex digits between them).
TOO_SHORT = "Unknown magic byte! (the bytes are too short for the Schema Registry wire format)"
OTHER_MAGIC = ("Unknown magic byte! (the first byte is 0x", ", not 0x00: not in the Schema Registry wire format)")


def wire_format_message(first: bytes) -> str:
    """The one line for bytes that are not framed: ``first`` is their first byte (or none)."""
    return f"{OTHER_MAGIC[0]}{first[0]:02x}{OTHER_MAGIC[1]}" if first else TOO_SHORT


def frame(schema_id: int, datum: bytes) -> bytes:
    """``datum`` framed with its writer schema id."""
    return bytes([MAGIC_BYTE]) + schema_id.to_bytes(4, "big") + datum


class UnknownSchemaIdError(DataError):
    """The registry has no schema with a record's id: the record's fault (a dead letter)."""

    error_class = "UnknownSchemaError"


class FramedConverter(ABC):
    """A Schema Registry converter for the reference, either format: ``schema_text`` gives a
    writer schema's text by id (the registry, or a test's table); a Kafka null is Connect's null,
    other bytes are split at the header and read with their writer schema (:meth:`read`)."""

    def __init__(self, schema_text: Callable[[int], str]):
        self._schema_text = schema_text

    def to_connect(self, data: bytes | None) -> SchemaAndValue:
        if data is None:
            return SchemaAndValue(None, None)
        schema_id, payload = split_frame(data)
        return self.read(schema_id, self._schema_text(schema_id), payload)

    def writer_schema(self, data: bytes) -> tuple[int, str]:
        """The id and text of a framed value's writer schema."""
        schema_id, _ = split_frame(data)
        return schema_id, self._schema_text(schema_id)

    @abstractmethod
    def read(self, schema_id: int, writer: str, payload: bytes) -> SchemaAndValue:
        """The Connect value of the datum ``payload`` written with schema ``writer``."""
