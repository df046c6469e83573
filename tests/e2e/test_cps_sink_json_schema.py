"""The Cloud Pub/Sub sink with Confluent's JsonSchemaConverter, end to end: records written by
Confluent's own Python JSON Schema serializer against a real Schema Registry (Apicurio Registry's
Confluent API), two writer schemas in one topic, bad records beside them, through Kafka, bronze and
the data model to the Pub/Sub emulator."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from e2e.harness import context, run_once, sink_config
from integration.kafka_helpers import Rec, create_topic, produce
from integration.pubsub_helpers import assert_no_more_messages, create_topic_and_subscription, pull_all
from pubsub_connect.io.tables import TableRef
from pubsub_connect.model.avro.wire import frame

pytestmark = pytest.mark.usefixtures("pubsub_emulator_host")

#: A schema as Kafka Connect writes one for a struct (titles, connect.index, optional fields as a
#: oneOf with null).
SHIPMENT = {"type": "object", "title": "shop.Shipment", "properties": {
    "id": {"type": "integer", "connect.index": 0},
    "name": {"type": "string", "connect.index": 1},
    "weight": {"type": "number", "connect.index": 2},
    "day": {"type": "integer", "title": "org.apache.kafka.connect.data.Date", "connect.type": "int32",
            "connect.index": 3},
    "tags": {"type": "array", "items": {"type": "string"}, "connect.index": 4},
    "note": {"oneOf": [{"type": "null"}, {"type": "string"}], "connect.index": 5}}}
#: The same with one more field, defaulted: a second writer schema in the topic.
SHIPMENT_V2 = {**SHIPMENT, "properties": {**SHIPMENT["properties"], "site": {
    "type": "string", "default": "main", "connect.index": 6}}}
DAY = datetime.date(2024, 3, 1)


def shipment(n: int) -> dict:
    return {"id": n, "name": f"shipment-{n}", "weight": n + 0.5, "day": (DAY - datetime.date(1970, 1, 1)).days + n,
            "tags": ["a", f"t{n}"], "note": None if n % 3 else f"n{n}"}


def expected_attributes(n: int, key: str, site: str | None = None) -> dict[str, str]:
    """Google's sink: every field but the body as Java's text (the date as java.util.Date in UTC,
    the double as Double.toString, the array as compact JSON), null fields left out, then the key."""
    day = datetime.datetime.combine(DAY + datetime.timedelta(days=n), datetime.time())
    out = {"id": str(n), "weight": f"{n}.5", "day": day.strftime("%a %b %d 00:00:00 UTC %Y"),
           "tags": f'["a","t{n}"]', "key": key}
    if n % 3 == 0:
        out["note"] = f"n{n}"
    if site is not None:
        out["site"] = site
    return out


@pytest.mark.parametrize("mode", ["staged", "fused"])
def test_json_schema_records_reach_pubsub_as_googles_sink_publishes_them(
        spark, kafka_bootstrap: str, schema_registry_url: str, tmp_path: Path, unique_name: str, mode: str) -> None:
    create_topic(kafka_bootstrap, unique_name)
    registry = SchemaRegistryClient({"url": schema_registry_url})
    value_context = SerializationContext(unique_name, MessageField.VALUE)
    first = JSONSerializer(json.dumps(SHIPMENT), registry)
    second = JSONSerializer(json.dumps(SHIPMENT_V2), registry)
    records = [Rec(first(shipment(n), value_context), key=f"k{n}".encode()) for n in range(1, 11)]
    records += [Rec(second({**shipment(n), "site": f"s{n}"}, value_context), key=f"k{n}".encode())
                for n in range(11, 14)]
    records += [Rec(second(shipment(n), value_context), key=f"k{n}".encode()) for n in (14, 15)]  # site: default
    first_id = int.from_bytes(records[0].value[1:5], "big")
    records += [Rec(frame(first_id, json.dumps({**shipment(16), "id": "sixteen"}).encode()), key=b"bad-1"),
                Rec(b'{"not": "framed"}', key=b"bad-2")]
    produce(kafka_bootstrap, unique_name, records)
    _, subscription = create_topic_and_subscription(unique_name)
    connector = sink_config(unique_name, unique_name, unique_name, **{
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "io.confluent.connect.json.JsonSchemaConverter",
        "value.converter.schema.registry.url": schema_registry_url,
        "messageBodyName": "name", "errors.tolerance": "all", "pipeline.mode": mode})
    run_once(spark, kafka_bootstrap, tmp_path, connector)

    got = {m.data: dict(m.attributes) for m in pull_all(subscription, 15, timeout=60)}
    expected = {f"shipment-{n}".encode(): expected_attributes(n, f"k{n}") for n in range(1, 11)}
    expected |= {f"shipment-{n}".encode(): expected_attributes(n, f"k{n}", f"s{n}") for n in range(11, 14)}
    expected |= {f"shipment-{n}".encode(): expected_attributes(n, f"k{n}", "main") for n in (14, 15)}
    assert got == expected
    assert_no_more_messages(subscription)

    dlq = context(spark, kafka_bootstrap, tmp_path).store.read(TableRef("dlq", unique_name)).orderBy("offset")
    assert [(r.offset, r.key, r.error_class, r.error_message) for r in dlq.collect()] == [
        (15, b"bad-1", "JsonDataError", "value: $.id: text for INT64 (an integer)"),
        (16, b"bad-2", "WireFormatError", "value: Unknown magic byte! (the first byte is 0x7b, not 0x00: not in "
                                          "the Schema Registry wire format)")]
