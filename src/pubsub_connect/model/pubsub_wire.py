"""Pub/Sub ``PublishRequest`` wire bytes from Arrow columns, a whole batch at a time.

Why encode by hand: the official Python publisher builds a proto-plus ``PubsubMessage``, a future
and a batch entry for every message, which costs far more CPU than sending it (a million 1 KB
messages: ~90 CPU-seconds, against ~16 for Google's Java connector). The protobuf wire format
of the few fields the sink sets is simple, so the outbox's Arrow columns are turned into framed
messages with Arrow and numpy kernels (no Python per message), and a request is the topic field
followed by a contiguous slice of those framed messages.

The fields written (``google.pubsub.v1``):

- ``PublishRequest``: ``topic`` = 1 (string), ``messages`` = 2 (repeated ``PubsubMessage``);
- ``PubsubMessage``: ``data`` = 1 (bytes, omitted when empty, as proto3 does),
  ``attributes`` = 2 (``map<string, string>``: one entry message per pair, key = 1, value = 2),
  ``ordering_key`` = 5 (string, omitted when empty).

Parsing what this writes with the generated classes gives back the same messages
(``tests/unit/test_pubsub_wire.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: Tag bytes: (field number << 3) | wire type 2 (length-delimited).
_TOPIC, _MESSAGES = 0x0A, 0x12
_DATA, _ATTRIBUTES, _ORDERING_KEY = 0x0A, 0x12, 0x2A
_ENTRY_KEY, _ENTRY_VALUE = 0x0A, 0x12
#: A varint of a length below 2**35 takes at most five bytes; Pub/Sub messages stay below 10 MB.
_MAX_VARINT = 5


def _varint_matrix(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(bytes, counts)``: row i's first ``counts[i]`` bytes are the varint of ``lengths[i]``."""
    n = lengths.astype(np.int64)
    counts = np.ones(len(n), dtype=np.int64)
    for shift in range(7, 7 * _MAX_VARINT, 7):
        counts += n >= (1 << shift)
    matrix = np.empty((len(n), _MAX_VARINT), dtype=np.uint8)
    for i in range(_MAX_VARINT):
        more = counts > i + 1
        matrix[:, i] = ((n >> (7 * i)) & 0x7F) | np.where(more, 0x80, 0)
    return matrix, counts


def _prefixes(tag: int, lengths: np.ndarray, present: np.ndarray | None = None) -> pa.BinaryArray:
    """Per row the field header ``tag + varint(length)``; empty where ``present`` is False."""
    varint, counts = _varint_matrix(lengths)
    matrix = np.empty((len(lengths), 1 + _MAX_VARINT), dtype=np.uint8)
    matrix[:, 0] = tag
    matrix[:, 1:] = varint
    counts = counts + 1
    if present is not None:
        counts = np.where(present, counts, 0)
    return _rows_of(matrix, counts)


def _rows_of(matrix: np.ndarray, counts: np.ndarray) -> pa.BinaryArray:
    """A binary array whose row i is the first ``counts[i]`` bytes of ``matrix[i]``."""
    keep = np.arange(matrix.shape[1]) < counts[:, None]
    offsets = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.BinaryArray.from_buffers(pa.binary(), len(counts),
                                       [None, pa.py_buffer(offsets), pa.py_buffer(matrix[keep].tobytes())])


def _lengths(array: pa.Array) -> np.ndarray:
    return pc.binary_length(array).to_numpy(zero_copy_only=False).astype(np.int64)


def _as_binary(array: pa.Array) -> pa.Array:
    """Any string or binary column as non-null 32-bit-offset binary, the one type the kernels
    below combine (Spark sends large types with ``spark.sql.execution.arrow.useLargeVarTypes``;
    an Arrow batch of outbox rows stays far below 2 GB). A null is an absent field, as empty."""
    if array.type != pa.binary():
        array = array.cast(pa.binary())
    return pc.fill_null(array, b"") if array.null_count else array


def _concat(*columns: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise(*columns, b"")


def _length_delimited(tag: int, values: pa.Array, omit_empty: bool) -> pa.Array:
    lengths = _lengths(values)
    return _concat(_prefixes(tag, lengths, lengths > 0 if omit_empty else None), values)


def _attribute_fields(attributes: pa.MapArray) -> pa.Array:
    """Per row the encoded map entries of its attributes (empty for a null or empty map)."""
    offsets = attributes.offsets.to_numpy().astype(np.int64)
    start, end = int(offsets[0]), int(offsets[-1])
    entries = attributes.values.slice(start, end - start)
    keys = _as_binary(entries.field(0))
    values = _as_binary(entries.field(1))
    entry = _concat(_length_delimited(_ENTRY_KEY, keys, omit_empty=False),
                    _length_delimited(_ENTRY_VALUE, values, omit_empty=False))
    fields = _length_delimited(_ATTRIBUTES, entry, omit_empty=False)
    counts = offsets[1:] - offsets[:-1]
    if attributes.null_count:  # a null map may still span entries in the child array
        valid = ~attributes.is_null().to_numpy(zero_copy_only=False)
        fields = fields.filter(pa.array(np.repeat(valid, counts)))
        counts = np.where(valid, counts, 0)
    list_offsets = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=list_offsets[1:])
    per_row = pa.ListArray.from_arrays(pa.array(list_offsets), fields)
    return pc.binary_join(per_row, b"")


@dataclass(frozen=True)
class FramedMessages:
    """A batch of messages, each encoded as a ``PublishRequest.messages`` field (tag, length,
    ``PubsubMessage``), laid out back to back in one buffer.

    ``ends[i]`` is where message i's frame ends in ``buffer`` (``ends[-1]`` is the buffer's
    length), so any run of consecutive messages is one slice of ``buffer``.
    """

    buffer: pa.Buffer
    ends: np.ndarray
    data_bytes: int

    def __len__(self) -> int:
        return len(self.ends)

    def start(self, index: int) -> int:
        return int(self.ends[index - 1]) if index > 0 else 0


def framed_messages(data: pa.Array, attributes: pa.MapArray | None = None,
                    ordering_keys: pa.Array | None = None) -> FramedMessages:
    """Encode one Arrow batch of outbox columns (``data`` binary, ``attributes`` map of strings,
    ``ordering_key`` string; nulls are absent fields) as :class:`FramedMessages`."""
    payload = _as_binary(data)
    parts = [_length_delimited(_DATA, payload, omit_empty=True)]
    if attributes is not None:
        parts.append(_attribute_fields(attributes))
    if ordering_keys is not None:
        parts.append(_length_delimited(_ORDERING_KEY, _as_binary(ordering_keys), omit_empty=True))
    message = _concat(*parts) if len(parts) > 1 else parts[0]
    framed = _length_delimited(_MESSAGES, message, omit_empty=False)  # a new array: offset 0
    offsets_buffer, buffer = framed.buffers()[1:3]
    offsets = np.frombuffer(offsets_buffer, dtype=np.int32, count=len(framed) + 1).astype(np.int64)
    ends = offsets[1:] - offsets[0]
    return FramedMessages(buffer=buffer.slice(int(offsets[0]), int(offsets[-1] - offsets[0])),
                          ends=ends, data_bytes=int(_lengths(payload).sum()))


def topic_field(topic: str) -> bytes:
    """The ``PublishRequest.topic`` field, which starts every request."""
    raw = topic.encode()
    varint, count = _varint_matrix(np.array([len(raw)]))
    return bytes([_TOPIC]) + varint[0, : int(count[0])].tobytes() + raw


def request_bounds(messages: FramedMessages, max_messages: int, max_bytes: int,
                   overhead: int = 0) -> list[tuple[int, int]]:
    """Consecutive ``(start, end)`` message ranges, each one request: at most ``max_messages``
    messages and ``max_bytes`` bytes with ``overhead`` (the topic field) counted, and never
    empty, so a message larger than ``max_bytes`` goes in a request of its own (the server
    then judges it)."""
    ends = messages.ends
    bounds: list[tuple[int, int]] = []
    start, count = 0, len(ends)
    limit = max(1, max_messages)
    while start < count:
        base = messages.start(start)
        fit = int(np.searchsorted(ends, base + max_bytes - overhead, side="right"))
        end = max(start + 1, min(start + limit, fit))
        bounds.append((start, end))
        start = end
    return bounds
