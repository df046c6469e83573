"""The Cloud Pub/Sub sink with Confluent's AvroConverter, end to end: records written by
Confluent's own Python serializer against a real Schema Registry (Apicurio Registry's Confluent
API), two writer schemas in one topic, bad records beside them, through Kafka, bronze and the
data model to the Pub/Sub emulator."""

from __future__ import annotations

import datetime
import json
from decimal import Decimal
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from e2e.harness import context, run_once, sink_config
from e2e.registry_outage import Outage, run_through_outage
from integration.kafka_helpers import Rec, create_topic, produce
from integration.pubsub_helpers import (
    PROJECT,
    assert_no_more_messages,
    create_avro_schema_topic,
    create_subscription,
    create_topic_and_subscription,
    pull_all,
)
from pubsub_connect.io.tables import TableRef

pytestmark = pytest.mark.usefixtures("pubsub_emulator_host")

ORDER = """{"type": "record", "name": "Order", "namespace": "shop", "fields": [
  {"name": "id", "type": "long"},
  {"name": "name", "type": "string"},
  {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
  {"name": "day", "type": {"type": "int", "logicalType": "date"}},
  {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
  {"name": "tags", "type": {"type": "array", "items": "string"}},
  {"name": "note", "type": ["null", "string"], "default": null}]}"""
#: The same record with one more field: a second writer schema in the topic.
ORDER_V2 = ORDER[:-2] + """,
  {"name": "site", "type": "string", "default": "main"}]}"""


def order(n: int) -> dict:
    return {"id": n, "name": f"order-{n}", "price": Decimal(f"{n}.25"), "day": datetime.date(2024, 2, n % 28 + 1),
            "color": "GREEN" if n % 2 else "RED", "tags": ["a", f"t{n}"], "note": None if n % 3 else f"n{n}"}


def expected_attributes(n: int, key: str, site: str | None = None) -> dict[str, str]:
    """Google's sink: every field but the body as Java's text (a date as java.util.Date in UTC,
    the decimal as BigDecimal, the array as compact JSON), null fields left out, then the key."""
    day = datetime.datetime.combine(datetime.date(2024, 2, n % 28 + 1), datetime.time())
    out = {"id": str(n), "price": f"{n}.25", "day": day.strftime("%a %b %d 00:00:00 UTC %Y"),
           "color": "GREEN" if n % 2 else "RED", "tags": f'["a","t{n}"]', "key": key}
    if n % 3 == 0:
        out["note"] = f"n{n}"
    if site is not None:
        out["site"] = site
    return out


@pytest.mark.parametrize("mode", ["staged", "fused"])
def test_avro_records_reach_pubsub_as_googles_sink_publishes_them(
        spark, kafka_bootstrap: str, schema_registry_url: str, tmp_path: Path, unique_name: str, mode: str) -> None:
    create_topic(kafka_bootstrap, unique_name)
    registry = SchemaRegistryClient({"url": schema_registry_url})
    context_of_value = SerializationContext(unique_name, MessageField.VALUE)
    first = AvroSerializer(registry, ORDER)
    second = AvroSerializer(registry, ORDER_V2)
    records = [Rec(first(order(n), context_of_value), key=f"k{n}".encode()) for n in range(1, 11)]
    records += [Rec(second({**order(n), "site": f"s{n}"}, context_of_value), key=f"k{n}".encode())
                for n in range(11, 16)]
    records += [Rec(b'{"not": "avro"}', key=b"bad-1"), Rec(b"\x00\x7f\xff\xff\xf0\x02", key=b"bad-2")]
    produce(kafka_bootstrap, unique_name, records)
    _, subscription = create_topic_and_subscription(unique_name)
    connector = sink_config(unique_name, unique_name, unique_name, **{
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "io.confluent.connect.avro.AvroConverter",
        "value.converter.schema.registry.url": schema_registry_url,
        "messageBodyName": "name", "errors.tolerance": "all", "pipeline.mode": mode})
    run_once(spark, kafka_bootstrap, tmp_path, connector)

    got = {m.data: dict(m.attributes) for m in pull_all(subscription, 15, timeout=60)}
    expected = {f"order-{n}".encode(): expected_attributes(n, f"k{n}") for n in range(1, 11)}
    expected |= {f"order-{n}".encode(): expected_attributes(n, f"k{n}", f"s{n}") for n in range(11, 16)}
    assert got == expected
    assert_no_more_messages(subscription)

    dlq = context(spark, kafka_bootstrap, tmp_path).store.read(TableRef("dlq", unique_name)).orderBy("offset")
    assert [(r.offset, r.key, r.error_class) for r in dlq.collect()] == [
        (15, b"bad-1", "WireFormatError"), (16, b"bad-2", "UnknownSchemaError")]
    messages = [r.error_message for r in dlq.collect()]
    assert messages[0] == ("value: Unknown magic byte! (the first byte is 0x7b, not 0x00: not in the Schema "
                           "Registry wire format)")
    assert messages[1].startswith("value: Schema Registry GET /schemas/ids/2147483632: ") and "40403" in messages[1]


def test_json_message_bodies_are_the_whole_records(
        spark, kafka_bootstrap: str, schema_registry_url: str, tmp_path: Path, unique_name: str) -> None:
    """``messageBodyFormat=json``: each record whole, as Kafka's JsonConverter writes it without
    schemas, is the message data (the decimal as its unscaled bytes in base64, the date as days,
    the enum as its symbol); the key is the one attribute."""
    create_topic(kafka_bootstrap, unique_name)
    serializer = AvroSerializer(SchemaRegistryClient({"url": schema_registry_url}), ORDER)
    produce(kafka_bootstrap, unique_name, [Rec(serializer(order(n), SerializationContext(
        unique_name, MessageField.VALUE)), key=f"k{n}".encode()) for n in (3, 4)])
    _, subscription = create_topic_and_subscription(unique_name)
    connector = sink_config(unique_name, unique_name, unique_name, **{
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "io.confluent.connect.avro.AvroConverter",
        "value.converter.schema.registry.url": schema_registry_url, "messageBodyFormat": "json"})
    run_once(spark, kafka_bootstrap, tmp_path, connector)
    got = {m.attributes["key"]: (m.data, dict(m.attributes)) for m in pull_all(subscription, 2, timeout=60)}
    assert got == {
        "k3": (b'{"id":3,"name":"order-3","price":"AUU=","day":19757,"color":"GREEN","tags":["a","t3"],'
               b'"note":"n3"}', {"key": "k3"}),
        "k4": (b'{"id":4,"name":"order-4","price":"Aak=","day":19758,"color":"RED","tags":["a","t4"],'
               b'"note":null}', {"key": "k4"}),
    }


def test_avro_message_bodies_reach_a_topic_with_that_avro_schema(
        spark, kafka_bootstrap: str, schema_registry_url: str, tmp_path: Path, unique_name: str) -> None:
    """``messageBodyFormat=avro``: each record's own datum is the message, so a Pub/Sub topic
    whose schema is the records' schema takes them (the emulator validates, as Pub/Sub does).
    Records of a writer schema that is not a revision of the topic's are dead letters naming it,
    until the topic's schema gets that revision."""
    import io

    import fastavro
    from google.cloud.pubsub import SchemaServiceClient
    from google.pubsub_v1.types import Schema

    create_topic(kafka_bootstrap, unique_name)
    registry = SchemaRegistryClient({"url": schema_registry_url})
    context_of_value = SerializationContext(unique_name, MessageField.VALUE)
    first, second = AvroSerializer(registry, ORDER), AvroSerializer(registry, ORDER_V2)
    produce(kafka_bootstrap, unique_name, [Rec(first(order(n), context_of_value), key=f"k{n}".encode())
                                           for n in range(1, 8)])
    produce(kafka_bootstrap, unique_name, [Rec(second({**order(n), "site": "s"}, context_of_value),
                                               key=f"k{n}".encode()) for n in (8, 9)])
    _, revision = create_avro_schema_topic(unique_name, ORDER)
    subscription = create_subscription(unique_name, f"{unique_name}-sub")
    connector = sink_config(unique_name, unique_name, unique_name, **{
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "io.confluent.connect.avro.AvroConverter",
        "value.converter.schema.registry.url": schema_registry_url, "messageBodyFormat": "avro",
        "errors.tolerance": "all"})
    ctx = run_once(spark, kafka_bootstrap, tmp_path, connector)

    def received(count: int, schema: str) -> list[tuple[dict, dict]]:
        parsed = fastavro.parse_schema(json.loads(schema))
        return sorted(((fastavro.schemaless_reader(io.BytesIO(m.data), parsed), dict(m.attributes))
                       for m in pull_all(subscription, count, timeout=60)), key=lambda pair: pair[0]["id"])

    def validated(revision_id: str) -> dict[str, str]:  # Pub/Sub adds the schema it checked a message with
        return {"googclient_schemaname": f"projects/{PROJECT}/schemas/{unique_name}",
                "googclient_schemaencoding": "BINARY", "googclient_schemarevisionid": revision_id}

    assert received(7, ORDER) == [(order(n), {"key": f"k{n}", **validated(revision)}) for n in range(1, 8)]
    assert_no_more_messages(subscription)
    dead = ctx.store.read(TableRef("dlq", unique_name)).orderBy("offset").collect()
    writer_v2 = int.from_bytes(dead[0].value[1:5], "big")
    assert [(r.offset, r.error_class, r.error_message) for r in dead] == [
        (offset, "TopicSchemaError", f"value: writer schema {writer_v2}: not a revision of the topic's schema "
                                     f"projects/{PROJECT}/schemas/{unique_name}, which Pub/Sub checks every message "
                                     "against") for offset in (7, 8)]

    # The topic's schema gets the second writer schema as a revision: its records are taken.
    committed = SchemaServiceClient().commit_schema(request={
        "name": f"projects/{PROJECT}/schemas/{unique_name}",
        "schema": Schema(name=f"projects/{PROJECT}/schemas/{unique_name}", type_=Schema.Type.AVRO,
                         definition=ORDER_V2)})
    produce(kafka_bootstrap, unique_name, [Rec(second({**order(10), "site": "s10"}, context_of_value), key=b"k10")])
    run_once(spark, kafka_bootstrap, tmp_path, connector)
    ((value, attributes),) = received(1, ORDER_V2)
    assert value == {**order(10), "site": "s10"}
    assert attributes["key"] == "k10" and attributes["googclient_schemarevisionid"] in (committed.revision_id,
                                                                                         revision)


def test_a_registry_that_goes_away_restarts_the_stage_and_loses_nothing(
        spark, kafka_bootstrap: str, registry_service, tmp_path: Path, unique_name: str) -> None:
    """The registry unreachable while records wait: the convert stage restarts (one line per
    restart, like an unreachable broker) until it answers again; then every record is published
    and none is dead-lettered."""
    create_topic(kafka_bootstrap, unique_name)
    serializer = AvroSerializer(SchemaRegistryClient({"url": registry_service.endpoint}), ORDER)
    produce(kafka_bootstrap, unique_name, [Rec(serializer(order(n), SerializationContext(
        unique_name, MessageField.VALUE)), key=f"k{n}".encode()) for n in range(1, 11)])
    _, subscription = create_topic_and_subscription(unique_name)
    outage = Outage(registry_service.port)
    connector = sink_config(unique_name, unique_name, unique_name, **{
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "io.confluent.connect.avro.AvroConverter",
        "value.converter.schema.registry.url": f"http://127.0.0.1:{outage.port}/apis/ccompat/v7",
        "messageBodyName": "name"})
    restart = run_through_outage(spark, kafka_bootstrap, tmp_path, connector, outage, "convert")
    assert restart == (f"[{unique_name}.convert] SchemaRegistryUnreachableError: Schema Registry unreachable "
                       f"(http://127.0.0.1:{outage.port}/apis/ccompat/v7: [Errno 111] Connection refused); "
                       "restarting from the checkpoint in 1 s (restart 1)")
    assert sorted(m.data for m in pull_all(subscription, 10, timeout=60)) == sorted(
        f"order-{n}".encode() for n in range(1, 11))
    assert context(spark, kafka_bootstrap, tmp_path).store.count(TableRef("dlq", unique_name)) == 0
