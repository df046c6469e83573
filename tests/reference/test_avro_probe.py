"""TEMPORARY probe (deleted before hand-over)."""

from __future__ import annotations

import datetime
import json
import uuid
from decimal import Decimal
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from e2e.harness import run_once, sink_config
from integration.kafka_helpers import Rec, create_topic, produce
from integration.pubsub_helpers import PROJECT, create_topic_and_subscription
from pubsub_connect.io.services.registry import CONFLUENT_API
from pubsub_connect.io.tables import TableRef
from reference.connect import SINK_CONNECTOR_CLASS, ConnectStandalone, apicurio_avro_settings
from reference.test_sink_conformance import _drain, _google_outcome

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("pubsub_emulator_host")]

EVERY = {"type": "record", "name": "Every", "namespace": "probe", "fields": [
    {"name": "i", "type": "int"}, {"name": "l", "type": "long"}, {"name": "f", "type": "float"},
    {"name": "d", "type": "double"}, {"name": "b", "type": "boolean"}, {"name": "s", "type": "string"},
    {"name": "raw", "type": "bytes"}, {"name": "fx", "type": {"type": "fixed", "name": "Fx", "size": 3}},
    {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
    {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "decf", "type": {"type": "fixed", "name": "DecF", "size": 8, "logicalType": "decimal",
                              "precision": 12, "scale": 3}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "tu", "type": {"type": "long", "logicalType": "time-micros"}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "tsu", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "lts", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
    {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "arr", "type": {"type": "array", "items": "string"}},
    {"name": "arrl", "type": {"type": "array", "items": "long"}},
    {"name": "arrr", "type": {"type": "array", "items": {"type": "record", "name": "P", "fields": [
        {"name": "x", "type": "int"}, {"name": "y", "type": ["null", "string"]}]}}},
    {"name": "arrb", "type": {"type": "array", "items": "bytes"}},
    {"name": "arrd", "type": {"type": "array", "items": {"type": "int", "logicalType": "date"}}},
    {"name": "arrdec", "type": {"type": "array", "items": {"type": "bytes", "logicalType": "decimal",
                                                           "precision": 5, "scale": 1}}},
    {"name": "arrf", "type": {"type": "array", "items": "float"}},
    {"name": "ns", "type": ["null", "string"]}, {"name": "nl", "type": ["null", "long"]},
    {"name": "old", "type": {"type": "int", "logicalType": "date"}},
    {"name": "cps_message_body", "type": "string"},
]}

DATUM = {"i": -5, "l": 1 << 40, "f": 0.1, "d": 1e21, "b": True, "s": "ü ✓", "raw": b"ab\xff", "fx": b"\x00\x01\x02",
         "color": "GREEN", "dec": Decimal("12.34"), "decf": Decimal("-1.500"), "day": datetime.date(2024, 2, 29),
         "tm": datetime.time(1, 2, 3, 4000), "tu": datetime.time(1, 2, 3, 4005),
         "ts": datetime.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=datetime.timezone.utc),
         "tsu": datetime.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=datetime.timezone.utc),
         "lts": datetime.datetime(2023, 11, 14, 22, 13, 20, 123000), "id": uuid.UUID(int=12345),
         "arr": ["a", "b c"], "arrl": [1, -2], "arrr": [{"x": 1, "y": None}, {"x": 2, "y": "z"}],
         "arrb": [b"q", b"\xff"], "arrd": [datetime.date(1970, 1, 2)], "arrdec": [Decimal("1.5")],
         "arrf": [0.1, 1e10], "ns": None, "nl": 7, "old": datetime.date(1000, 1, 1), "cps_message_body": "body"}

VALUES = [
    ("string", "text"), ("int", 258), ("long", 5), ("float", 1.5), ("double", 2.5),
    ("boolean", True), ({"type": "enum", "name": "E", "symbols": ["A", "B"]}, "B"),
    ({"type": "fixed", "name": "F", "size": 2}, b"\x01\x02"),
    ({"type": "string", "logicalType": "uuid"}, uuid.UUID(int=7)),
    ({"type": "map", "values": "long"}, {"a": 1, "cps_message_body": 2}),
    ({"type": "map", "values": "double"}, {"a": 1.5, "b": 1e21}),
    ({"type": "map", "values": "bytes"}, {"a": b"xy"}),
    ({"type": "map", "values": {"type": "array", "items": "int"}}, {"a": [1, 2]}),
    ({"type": "map", "values": {"type": "int", "logicalType": "date"}}, {"a": datetime.date(2024, 1, 1)}),
    (["int", "string"], "u"), (["int", "string"], 3), (["int", "long"], 3), (["string"], "one"),
    (["null", "string"], "opt"), ({"type": "long", "logicalType": "timestamp-micros"}, 12),
    (EVERY, DATUM),
]

KEYS = [("string", "k"), ("int", 5), ("double", 0.25), (EVERY, DATUM),
        ({"type": "int", "logicalType": "date"}, datetime.date(2024, 1, 2)),
        ({"type": "fixed", "name": "KD", "size": 3, "logicalType": "decimal", "precision": 5, "scale": 2},
         Decimal("1.23")), ({"type": "long", "logicalType": "timestamp-millis"}, 1700000000123),
        ({"type": "enum", "name": "KE", "symbols": ["X", "Y"]}, "Y"),
        ({"type": "fixed", "name": "KF", "size": 2}, b"ab"), (["int", "string"], "ku"), ("boolean", False)]

FAILING = {
    "nested": {"type": "record", "name": "N", "fields": [{"name": "a", "type": {"type": "record", "name": "I",
                                                                                   "fields": [{"name": "x",
                                                                                               "type": "int"}]}}]},
    "union": {"type": "record", "name": "U", "fields": [{"name": "a", "type": ["int", "string"]}]},
    "map": {"type": "record", "name": "M", "fields": [{"name": "a", "type": {"type": "map", "values": "int"}}]},
    "array": {"type": "array", "items": "int"},
    "decimal": {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2},
    "date": {"type": "int", "logicalType": "date"},
    "null": ["null", "string"],
    "bytes": "bytes", "time": {"type": "int", "logicalType": "time-millis"},
    "ts": {"type": "long", "logicalType": "timestamp-millis"},
    "fixdec": {"type": "fixed", "name": "FD", "size": 4, "logicalType": "decimal", "precision": 6, "scale": 2},
    "nullschema": "null", "longkey": "long",
}
FAILING_DATA = {"nested": {"a": {"x": 1}}, "union": {"a": 1}, "map": {"a": {"k": 1}}, "array": [1, 2],
                "decimal": (123).to_bytes(1, "big"), "date": datetime.date(2024, 1, 1), "null": None,
                "bytes": b"raw", "time": 5, "ts": 7, "fixdec": Decimal("1.23"), "nullschema": None, "longkey": 5}


def test_probe(google_connect: ConnectStandalone, spark, kafka_bootstrap: str, schema_registry_url: str,
               tmp_path: Path, unique_name: str) -> None:
    registry = SchemaRegistryClient({"url": schema_registry_url})
    root = schema_registry_url.removesuffix(CONFLUENT_API)
    topic = f"{unique_name}-probe"
    create_topic(kafka_bootstrap, topic)
    vctx = SerializationContext(topic, MessageField.VALUE)
    kctx = SerializationContext(topic, MessageField.KEY)
    recs = []
    for schema, datum in VALUES:
        recs.append(Rec(AvroSerializer(registry, json.dumps(schema))(datum, vctx),
                        key=AvroSerializer(registry, '"string"')("k", kctx)))
    for schema, datum in KEYS:
        recs.append(Rec(AvroSerializer(registry, '"string"')("v", vctx),
                        key=AvroSerializer(registry, json.dumps(schema))(datum, kctx)))
    produce(kafka_bootstrap, topic, recs)
    settings = {**apicurio_avro_settings("value", root), **apicurio_avro_settings("key", root),
                "metadata.publish": "true"}
    gtopic, gsub = create_topic_and_subscription(f"{topic}-google")
    otopic, osub = create_topic_and_subscription(f"{topic}-ours")
    name = f"{topic}-google"
    google_connect.create_connector(name, SINK_CONNECTOR_CLASS, {
        **settings, "topics": topic, "tasks.max": "1", "cps.project": PROJECT, "cps.topic": gtopic.rsplit("/", 1)[1]})
    ours_settings = {"value.converter": "io.confluent.connect.avro.AvroConverter",
                     "value.converter.schema.registry.url": schema_registry_url,
                     "key.converter": "io.confluent.connect.avro.AvroConverter",
                     "key.converter.schema.registry.url": schema_registry_url,
                     "metadata.publish": "true", "errors.tolerance": "all"}
    ctx = run_once(spark, kafka_bootstrap, tmp_path, sink_config("probe-ours", topic, otopic.rsplit("/", 1)[1],
                                                                   **ours_settings))
    outcome = _google_outcome(google_connect, kafka_bootstrap, name, topic)
    print("GOOGLE OUTCOME", outcome)
    google = {m.attributes.get("kafka.offset"): m for m in _drain(gsub)}
    ours = {m.attributes.get("kafka.offset"): m for m in _drain(osub)}
    for off in sorted(set(google) | set(ours), key=lambda x: int(x or -1)):
        g, o = google.get(off), ours.get(off)
        print(f"\n#{off}")
        for label, m in (("G", g), ("O", o)):
            if m is None:
                print(f"  {label}: none")
                continue
            attrs = {k: v for k, v in m.attributes.items() if not k.startswith("kafka.")}
            print(f"  {label}: data={m.data!r} ok={m.ordering_key!r} attrs={attrs}")
    for r in ctx.store.read(TableRef("dlq", "probe-ours")).collect():
        print("DLQ", r.offset, r.error_class, r.error_message)

    for case, schema in FAILING.items():
        t = f"{unique_name}-f-{case}"
        create_topic(kafka_bootstrap, t)
        produce(kafka_bootstrap, t, [Rec(AvroSerializer(registry, json.dumps(schema))(
            FAILING_DATA[case], SerializationContext(t, MessageField.VALUE)), key=b"k")])
        gt, _ = create_topic_and_subscription(f"{t}-google")
        google_connect.create_connector(f"{t}-google", SINK_CONNECTOR_CLASS, {
            **apicurio_avro_settings("value", root),
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "topics": t, "tasks.max": "1", "cps.project": PROJECT, "cps.topic": gt.rsplit("/", 1)[1]})
        print("FAILING", case, _google_outcome(google_connect, kafka_bootstrap, f"{t}-google", t))
        google_connect.remove_connector(f"{t}-google")
    google_connect.remove_connector(name)
    raise AssertionError()
