"""The Cloud Pub/Sub source writing Schema Registry Avro, held against Google's: the source corpus
through both, each side registering its schemas in the same registry.

Google's ``CloudPubSubSourceConnector`` writes with Apicurio Registry's Kafka Connect
``AvroConverter`` (Confluent's is not on Maven Central; in Confluent's wire format, 4-byte content
ids), ours with ``io.confluent.connect.avro.AvroConverter``'s name against the registry's
Confluent API. Per message (found by its data) the test reads both records with their writer
schemas (fastavro: an independent reader) and compares the key (schema and value), the value
(schema and value), headers, partition and timestamp. Allowed, each asserted as exactly that:

* struct fields in another order: Google lays them out in the order the attribute map arrives
  in (which Pub/Sub does not define), ours by name — the schemas are compared as their fields'
  names and types, the values as maps;
* a value that is the message data alone (a top-level ``"bytes"`` schema): Apicurio's converter
  writes Avro's length before the bytes, Confluent's serializer (and ours) does not;
* a timestamp attribute of ``0``: written by ours with the produce time (see the source
  conformance test).

Messages with an attribute name Avro refuses (``attr-00``, ``sl/ash``, …) fail the converter on
both sides: Google's task skips them (``errors.tolerance=all``), ours dead-letters them with
Avro's line; the sets must be the same messages.
"""

from __future__ import annotations

import io
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import fastavro
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from e2e.harness import source_config
from integration.kafka_helpers import Rec, consume_all, create_topic
from integration.pubsub_helpers import PROJECT, create_subscription
from integration.pubsub_helpers import create_topic as create_pubsub_topic
from pubsub_connect.io.services.registry import CONFLUENT_API
from pubsub_connect.io.tables import TableRef
from pubsub_connect.model.avro.writer import zigzag_varint
from reference.connect import SOURCE_CONNECTOR_CLASS, ConnectStandalone, apicurio_avro_settings
from reference.test_reference_source import (
    CORPUS,
    KEY_ATTRIBUTE,
    PARTITIONS,
    TIMESTAMP_ATTRIBUTE,
    _wait,
    publish_in_order,
    run_ours_concurrently,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("pubsub_emulator_host")]

AVRO = "io.confluent.connect.avro.AvroConverter"
STRING = "org.apache.kafka.connect.storage.StringConverter"

#: name → (settings, both converters Avro). Hash partitions in struct mode: a record the converter
#: refuses has taken a round-robin turn on Google's side (it partitions before converting), not
#: on ours (a dead letter takes none).
CASES: dict[str, dict[str, str]] = {
    "struct-avro-key": {"kafka.key.attribute": KEY_ATTRIBUTE, "kafka.partition.scheme": "hash_key",
                        "cps.makeOrderingKeyAttribute": "true"},
    "headers-avro-value": {"kafka.key.attribute": KEY_ATTRIBUTE, "kafka.record.headers": "true",
                           "kafka.partition.scheme": "round_robin", "key.converter": STRING},
}


def _settings(case: str, side: str, registry_url: str) -> dict[str, str]:
    settings = {"kafka.partition.count": str(PARTITIONS), "kafka.timestamp.attribute": TIMESTAMP_ATTRIBUTE,
                "errors.tolerance": "all", **CASES[case]}
    sides = ["value"] + (["key"] if "key.converter" not in settings else [])
    for converter_side in sides:
        if side == "google":
            settings |= apicurio_avro_settings(converter_side, registry_url.removesuffix(CONFLUENT_API))
        else:
            settings |= {f"{converter_side}.converter": AVRO,
                         f"{converter_side}.converter.schema.registry.url": registry_url}
    return settings


class Reader:
    """Framed Avro read with the writer schema the registry has for its id."""

    def __init__(self, registry_url: str) -> None:
        self.registry = SchemaRegistryClient({"url": registry_url})
        self.schemas: dict[int, Any] = {}

    def schema(self, framed: bytes) -> Any:
        assert framed[:1] == b"\x00", framed[:8]
        schema_id = int.from_bytes(framed[1:5], "big")
        if schema_id not in self.schemas:
            self.schemas[schema_id] = json.loads(self.registry.get_schema(schema_id).schema_str)
        return self.schemas[schema_id]

    def read(self, framed: bytes) -> Any:
        return fastavro.schemaless_reader(io.BytesIO(framed[5:]), fastavro.parse_schema(self.schema(framed)))


def shape(schema: Any) -> Any:
    """A schema with a record's fields as a set (their order is the attribute map's on Google's side)."""
    if isinstance(schema, dict) and schema.get("type") == "record":
        return (schema["namespace"], schema["name"], frozenset((f["name"], json.dumps(f["type"]))
                                                               for f in schema["fields"]))
    return json.dumps(schema)


def compare(case: str, google: list[Rec], ours: list[Rec], reader: Reader, window: tuple[int, int],
            counts: Counter) -> list[tuple]:
    """The differences of one case's records, paired by the message data; counts the allowed ones."""
    def data_of(record: Rec, apicurio: bool) -> bytes:
        if reader.schema(record.value) == "bytes":  # Apicurio: Avro's length first; Confluent's: the bytes
            return reader.read(record.value) if apicurio else record.value[5:]
        return reader.read(record.value)["message"]

    theirs = {data_of(r, True): r for r in google}
    mine = {data_of(r, False): r for r in ours}
    differences: list[tuple] = []
    for data in sorted(set(theirs) | set(mine)):
        if data not in theirs or data not in mine:
            differences.append((case, data, "only on", "google" if data in theirs else "ours"))
            continue
        a, b = theirs[data], mine[data]
        counts["records"] += 1
        if "key.converter" in CASES[case] or a.key is None or b.key is None:  # not Avro, or null: as written
            if a.key != b.key:
                differences.append((case, data, "key", a.key, b.key))
        elif reader.schema(a.key) != reader.schema(b.key) or reader.read(a.key) != reader.read(b.key):
            differences.append((case, data, "key", a.key, b.key))
        schema_a, schema_b = reader.schema(a.value), reader.schema(b.value)
        if schema_a == "bytes" and schema_b == "bytes":
            if a.value[5:] == zigzag_varint(len(data)) + data and b.value[5:] == data:
                counts["top-level bytes: Apicurio writes the length"] += 1
            else:
                differences.append((case, data, "bytes value", a.value, b.value))
        elif shape(schema_a) != shape(schema_b) or reader.read(a.value) != reader.read(b.value):
            differences.append((case, data, "value", schema_a, schema_b))
        elif schema_a != schema_b:
            counts["struct fields in another order"] += 1
        if sorted(a.headers or []) != sorted(b.headers or []):
            differences.append((case, data, "headers", a.headers, b.headers))
        if a.partition != b.partition:
            differences.append((case, data, "partition", a.partition, b.partition))
        by_producer = [window[0] <= (t or -1) <= window[1] for t in (a.timestamp_ms, b.timestamp_ms)]
        if a.timestamp_ms != b.timestamp_ms and by_producer != [True, True]:  # -1: each producer's clock
            if a.timestamp_ms == 0 and by_producer[1]:
                counts["timestamp 0 written with the produce time"] += 1
            else:
                differences.append((case, data, "timestamp", a.timestamp_ms, b.timestamp_ms))
        counts["fields"] += 5
    return differences


def test_source_avro_conformance(google_connect: ConnectStandalone, spark, kafka_bootstrap: str,
                                 schema_registry_url: str, tmp_path: Path, unique_name: str) -> None:
    started = time.monotonic()
    pubsub_topic = create_pubsub_topic(unique_name)
    subscriptions = {(case, side): create_subscription(pubsub_topic, f"{unique_name}-{case}-{side}").rsplit("/")[-1]
                     for case in CASES for side in ("google", "ours")}
    for case in CASES:
        for side in ("google", "ours"):
            create_topic(kafka_bootstrap, f"{unique_name}-{case}-{side}", partitions=PARTITIONS)
    publish_in_order(pubsub_topic, CORPUS)
    published_ms = time.time_ns() // 1_000_000 + 1

    google: dict[str, list[Rec]] = {}
    ours_connectors = [source_config(f"{unique_name}-{case}", subscriptions[case, "ours"],
                                     f"{unique_name}-{case}-ours", **_settings(case, "ours", schema_registry_url))
                       for case in CASES]
    for case in CASES:
        google_connect.create_connector(f"{unique_name}-{case}", SOURCE_CONNECTOR_CLASS, {
            **_settings(case, "google", schema_registry_url), "tasks.max": "1", "cps.project": PROJECT,
            "cps.subscription": subscriptions[case, "google"], "kafka.topic": f"{unique_name}-{case}-google"})
    try:
        ctx = run_ours_concurrently(spark, kafka_bootstrap, tmp_path, ours_connectors)
        ours = {case: consume_all(kafka_bootstrap, f"{unique_name}-{case}-ours") for case in CASES}
        for case in CASES:
            name = f"{unique_name}-{case}"
            google[case] = _wait(kafka_bootstrap, f"{name}-google", len(ours[case]),
                                 lambda name=name: google_connect.raise_if_failed(name))
    finally:
        for case in CASES:
            google_connect.remove_connector(f"{unique_name}-{case}")
    window = (published_ms, time.time_ns() // 1_000_000)

    reader = Reader(schema_registry_url)
    counts: Counter = Counter()
    differences = [d for case in CASES for d in compare(case, google[case], ours[case], reader, window, counts)]
    dead = {case: ctx.store.read(TableRef("dlq", f"{unique_name}-{case}")).select("value", "error_class",
                                                                                     "error_message").collect()
            for case in CASES}
    print(f"\nsource Avro conformance: {len(CORPUS)} messages, {len(CASES)} configurations, {counts['records']} "
          f"record pairs and {counts['fields']} fields compared in {time.monotonic() - started:.0f} s")
    for what, count in sorted(counts.items()):
        if what not in ("records", "fields"):
            print(f"    allowed: {what}: {count}")
    print(f"    refused by both converters (Google's task skips, ours dead-letters): "
          f"{sum(len(rows) for rows in dead.values())}")
    assert differences == [], "\n".join(map(repr, differences))

    # The records Avro refuses are the same messages on both sides, for Avro's reason.
    for case in CASES:
        written = {m[0] for m in CORPUS}
        refused = {r.value for r in dead[case]}
        assert written - refused == {r.value[5:] if reader.schema(r.value) == "bytes" else reader.read(r.value)[
            "message"] for r in consume_all(kafka_bootstrap, f"{unique_name}-{case}-ours")}
        assert len(google[case]) == len(CORPUS) - len(refused)
        assert {(r.error_class, r.error_message.split(": ")[0]) for r in dead[case]} <= {
            ("SchemaParseException", "Illegal character in"), ("SchemaParseException", "Illegal initial character")}
    assert len(dead["struct-avro-key"]) > 0 and dead["headers-avro-value"] == []
    assert counts["records"] == sum(len(CORPUS) - len(dead[case]) for case in CASES)
