"""Arrow-batched Lite convert stages (bronze Kafka rows → Lite outbox, Lite bronze → Kafka outbox),
the Arrow schemas of those tables, and the batches the pull and publish stages read and write.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.types import StructType

from pubsub_connect.model.connect import DataError
from pubsub_connect.model.lite.encoding import LiteEncodingError, NestedNull, encode_to_bytes
from pubsub_connect.model.lite.sink import (
    KAFKA_EVENT_TIME_TYPE_ATTRIBUTE,
    KAFKA_OFFSET_ATTRIBUTE,
    KAFKA_PARTITION_ATTRIBUTE,
    KAFKA_TOPIC_ATTRIBUTE,
    MAX_TIMESTAMP_MS,
    LiteMessage,
    timestamp_type_name,
)
from pubsub_connect.model.lite.source import (
    DEFAULT_SOURCE_CONVERTERS,
    KafkaPartitioner,
    LiteReceived,
    LiteSourceConverters,
)
from pubsub_connect.model.schemas import LITE_KAFKA_OUTBOX, LITE_MESSAGE_FIELDS, LITE_OUTBOX, to_arrow

if TYPE_CHECKING:
    from pubsub_connect.model.converters import Converter

# The tables' Arrow schemas, derived from ``model.schemas``; the columns this model always fills
# are required (non-nullable) in its batches.
#: The Lite sink's outbox (convert → publish).
LITE_OUTBOX_SCHEMA = to_arrow(LITE_OUTBOX, required=("key", "data"))
#: The Lite source's bronze table (pull → convert).
LITE_BRONZE_SCHEMA = to_arrow(StructType(LITE_MESSAGE_FIELDS),
                              required=("partition", "offset", "key", "data", "publish_time"))
#: The Lite source's Kafka outbox (convert → produce).
KAFKA_OUTBOX_SCHEMA = to_arrow(LITE_KAFKA_OUTBOX, required=("lite_partition", "lite_offset"))
#: Arrow type of Lite's multi-valued attributes (``LITE_ATTRIBUTES``).
ATTRIBUTES_TYPE = LITE_OUTBOX_SCHEMA.field("attributes").type


@dataclass(frozen=True)
class RowFailure:
    """A bronze row the convert stage could not map (becomes a dead-letter row)."""

    index: int
    error: DataError


def sink_outbox_batch(
    bronze: pa.RecordBatch | pa.Table,
    *,
    key_converter: Converter | None = None,
    value_converter: Converter | None = None,
    nested_null: NestedNull = "error",
) -> tuple[pa.RecordBatch, list[RowFailure], int]:
    """Convert stage of the Lite sink: Kafka bronze rows → Lite outbox rows (same result as
    :func:`sink_message` per row).

    ``bronze`` has Spark's Kafka source columns (``key, value, topic, partition, offset,
    timestamp, timestampType, headers``). A converter of None means ``ByteArrayConverter``: the
    column is used as is, without a Python loop. Header values are raw bytes (BYTES). Returns the
    outbox batch (failed rows left out), the failures (by row index in ``bronze``) and the number
    of skipped null-valued headers.
    """
    cols = _columns(bronze)
    n = len(cols["key"])
    failures: dict[int, DataError] = {}
    keys = _encoded_column(cols["key"], key_converter, nested_null, failures)
    datas = _encoded_column(cols["value"], value_converter, nested_null, failures)
    attributes, event_time, skipped = _sink_attributes(cols, n, failures)
    schema = LITE_OUTBOX_SCHEMA
    batch = pa.RecordBatch.from_arrays(
        [keys, datas, attributes, event_time, cols["topic"].cast(pa.string()),
         cols["partition"].cast(pa.int32()), cols["offset"].cast(pa.int64())],
        schema=schema,
    )
    if failures:
        batch = batch.filter(pa.array([i not in failures for i in range(n)]))
    return batch, [RowFailure(i, e) for i, e in sorted(failures.items())], skipped


def _encoded_column(
    column: Any, converter: Converter | None, nested_null: NestedNull, failures: dict[int, DataError]
) -> Any:
    """Key or value column → encoded bytes (b"" for null), recording per-row failures."""
    if converter is None:
        return column.cast(pa.binary()).fill_null(b"")
    out: list[bytes] = []
    for i, raw in enumerate(column.to_pylist()):
        encoded = b""
        if raw is not None:
            try:
                converted = converter.to_connect(bytes(raw))
                if converted.value is not None:
                    encoded = encode_to_bytes(converted.schema, converted.value, nested_null=nested_null)
            except DataError as e:
                failures.setdefault(i, e)
        out.append(encoded)
    return pa.array(out, pa.binary())


def _sink_attributes(cols: dict[str, Any], n: int, failures: dict[int, DataError]) -> tuple[Any, Any, int]:
    """Attributes (headers, then the Kafka coordinates and event-time type) and event times.

    Built as flat key/value arrays plus offsets: far cheaper than converting nested Python lists.
    """
    headers = cols["headers"].to_pylist() if "headers" in cols else [None] * n
    topics = cols["topic"].to_pylist()
    partitions = cols["partition"].to_pylist()
    offsets = cols["offset"].to_pylist()
    stamps = cols["timestamp"].cast(pa.int64()).to_pylist()  # µs since the epoch
    types = cols["timestampType"].to_pylist() if "timestampType" in cols else [0] * n
    topic_attr, partition_attr = KAFKA_TOPIC_ATTRIBUTE, KAFKA_PARTITION_ATTRIBUTE
    offset_attr, type_attr = KAFKA_OFFSET_ATTRIBUTE, KAFKA_EVENT_TIME_TYPE_ATTRIBUTE
    entry_keys: list[str] = []
    values: list[bytes] = []
    value_offsets = [0]
    entry_offsets = [0]
    event_us: list[int | None] = []
    skipped = 0
    for i in range(n):
        groups: dict[str, list[bytes]] = {}
        for header in headers[i] or ():
            value = header["value"]
            if value is None:
                skipped += 1
            else:
                groups.setdefault(header["key"], []).append(value)
        if topics[i] is not None:
            groups.setdefault(topic_attr, []).append(topics[i].encode("utf-8"))
        if partitions[i] is not None:
            groups.setdefault(partition_attr, []).append(str(partitions[i]).encode("ascii"))
            groups.setdefault(offset_attr, []).append(str(offsets[i] or 0).encode("ascii"))
        event = None
        if stamps[i] is not None and stamps[i] >= 0:
            ms = stamps[i] // 1000
            try:
                if ms > MAX_TIMESTAMP_MS:
                    raise LiteEncodingError(f"timestamp {ms} ms is after year 9999")
                name = timestamp_type_name(types[i] if types[i] is not None else 0)
            except DataError as e:
                failures.setdefault(i, e)
            else:
                groups.setdefault(type_attr, []).append(name.encode("utf-8"))
                event = ms * 1000
        event_us.append(event)
        for name, vals in groups.items():
            entry_keys.append(name)
            values.extend(vals)
            value_offsets.append(len(values))
        entry_offsets.append(len(entry_keys))
    items = pa.ListArray.from_arrays(pa.array(value_offsets, pa.int32()), pa.array(values, pa.binary()))
    attributes = pa.MapArray.from_arrays(
        pa.array(entry_offsets, pa.int32()), pa.array(entry_keys, pa.string()), items, type=ATTRIBUTES_TYPE
    )
    event_time = pa.array(event_us, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    return attributes, event_time, skipped


def outbox_messages(outbox: pa.RecordBatch | pa.Table) -> Iterator[tuple[int | None, LiteMessage]]:
    """Publish stage helper: ``(kafka partition, LiteMessage)`` for each Lite outbox row."""
    cols = _columns(outbox)
    keys = cols["key"].to_pylist()
    datas = cols["data"].to_pylist()
    attributes = cols["attributes"].to_pylist()
    events = cols["event_time"].cast(pa.int64()).to_pylist()  # µs, no datetime objects
    partitions = cols["partition"].to_pylist()
    for key, data, attrs, event, partition in zip(keys, datas, attributes, events, partitions, strict=True):
        yield (
            partition,
            LiteMessage(
                key=key or b"",
                data=data or b"",
                attributes={k: tuple(v) for k, v in attrs or ()},
                event_time_ms=None if event is None else event // 1000,
            ),
        )


def bronze_batch(messages: Iterable[LiteReceived]) -> pa.RecordBatch:
    """Pull stage helper: received Lite messages → Lite bronze rows (times truncated to µs)."""
    schema = LITE_BRONZE_SCHEMA
    cols: dict[str, list[Any]] = {name: [] for name in schema.names}
    for m in messages:
        cols["partition"].append(m.partition)
        cols["offset"].append(m.offset)
        cols["key"].append(m.key)
        cols["data"].append(m.data)
        cols["attributes"].append([(k, list(v)) for k, v in m.attributes.items()])
        cols["event_time"].append(None if m.event_time_ns is None else m.event_time_ns // 1000)
        cols["publish_time"].append(m.publish_time_ns // 1000)
    return pa.RecordBatch.from_arrays([pa.array(cols[f.name], type=f.type) for f in schema], schema=schema)


def kafka_outbox_batch(
    bronze: pa.RecordBatch | pa.Table, *, num_partitions: int | None = None, round_robin_start: int = 0,
    converters: LiteSourceConverters = DEFAULT_SOURCE_CONVERTERS,
) -> tuple[pa.RecordBatch, int]:
    """Convert stage of the Lite source, vectorized: Lite bronze → Kafka outbox.

    Empty keys become null; every attribute value becomes one header (name repeated for
    multi-valued attributes); ``timestamp`` = event time, else publish time, in whole
    milliseconds. Keys, values and header values are then serialized by ``converters`` (the
    byte-array ones leave the columns as they are; the others run per value). With
    ``num_partitions`` the Kafka partition is set explicitly (murmur2 of the serialized key, as
    the producer hashes it; null keys round-robin from ``round_robin_start``); without it, it
    is left null for the producer's partitioner. Returns the batch and the next round-robin counter.
    """
    import numpy as np
    import pyarrow.compute as pc

    cols = _columns(bronze)
    n = len(cols["key"])
    key = cols["key"]
    key = pc.if_else(pc.equal(pc.binary_length(key), 0), pa.scalar(None, pa.binary()), key)
    if not converters.raw_keys:
        key = pa.array([converters.key(k) for k in key.to_pylist()], pa.binary())
    value = cols["data"]
    if not converters.raw_values:
        value = pa.array([converters.value(v) for v in value.to_pylist()], pa.binary())
    # event time, else publish time, floored to whole ms (Timestamps.toMillis rounds down)
    us = pc.coalesce(cols["event_time"], cols["publish_time"]).cast(pa.int64())
    ms = np.floor_divide(np.asarray(us.to_numpy(zero_copy_only=False), dtype=np.int64), 1000)
    timestamp = pa.array(ms * 1000, pa.int64()).cast(pa.timestamp("us", tz="UTC"))

    headers = _headers_from_attributes(cols["attributes"], n, np, converters)

    partition: Any
    counter = round_robin_start
    if num_partitions is None:
        partition = pa.nulls(n, pa.int32())
    else:
        partitioner = KafkaPartitioner(num_partitions, round_robin_start)
        partition = pa.array([partitioner.partition(k) for k in key.to_pylist()], pa.int32())
        counter = partitioner.counter
    schema = KAFKA_OUTBOX_SCHEMA
    arrays = [
        key,
        value,
        headers,
        partition,
        timestamp,
        cols["partition"],
        cols["offset"],
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema), counter


def _columns(data: pa.RecordBatch | pa.Table) -> dict[str, Any]:
    """Columns as contiguous arrays, for a RecordBatch or a (possibly chunked) Table."""
    if isinstance(data, pa.Table):
        return {name: data.column(name).combine_chunks() for name in data.column_names}
    return {name: data.column(name) for name in data.schema.names}


def _headers_from_attributes(attributes: Any, n: int, np: Any, converters: LiteSourceConverters) -> Any:
    """``map<string, list<binary>>`` → ``list<struct<key, value>>`` with one entry per value."""
    header_type = KAFKA_OUTBOX_SCHEMA.field("headers").type
    if n == 0:
        return pa.array([], type=header_type)
    attributes = pa.concat_arrays([attributes])  # re-based offsets even if the input is a slice
    if attributes.null_count:
        attributes = attributes.fill_null(pa.scalar([], type=attributes.type))
    entry_offsets = np.asarray(attributes.offsets)  # rows → entries
    names = attributes.keys
    value_lists = attributes.items
    if value_lists.null_count:
        value_lists = value_lists.fill_null(pa.scalar([], type=value_lists.type))
    value_offsets = np.asarray(value_lists.offsets)  # entries → values
    per_entry = np.diff(value_offsets)
    header_names = names.take(pa.array(np.repeat(np.arange(len(names)), per_entry)))
    header_values = value_lists.flatten()
    if not converters.raw_headers:
        header_values = pa.array([converters.header(v) for v in header_values.to_pylist()], pa.binary())
    row_offsets = value_offsets[entry_offsets].astype(np.int32)
    structs = pa.StructArray.from_arrays([header_names, header_values], fields=list(header_type.value_type))
    return pa.ListArray.from_arrays(pa.array(row_offsets, pa.int32()), structs, type=header_type)
