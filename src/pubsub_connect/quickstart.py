"""``pubsub-connect quickstart``: the Cloud Pub/Sub sink on the embedded default, in one command.

It does what Google's README quickstart does by hand, against local services: start a Kafka
broker and Google's Pub/Sub emulator, create a Kafka topic with sample records (from
``fixtures/quickstart/records.jsonl``), a Pub/Sub topic and subscription, run the sink connector
once (ingest → convert → publish), then pull what arrived and print a few messages and the counts.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from pubsub_connect.config import loader as cfg
from pubsub_connect.io.kafka.admin import create_topic
from pubsub_connect.io.kafka.librdkafka import with_client_logger
from pubsub_connect.io.services.lifecycle import LocalServices, environment
from pubsub_connect.io.services.process import ServiceError

KAFKA_TOPIC = "quickstart"
PROJECT = "quickstart-project"
PUBSUB_TOPIC = "quickstart-topic"
SUBSCRIPTION = "quickstart-subscription"

_BUILTIN_SAMPLES = [
    {"key": "dog", "value": "the quick brown fox", "headers": {"source": "quickstart"}},
    {"key": None, "value": "the lazy dog", "headers": {}},
]


def sample_records(count: int) -> list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]]:
    """``count`` records cycling through the fixture samples, each with a sequence header."""
    path = Path(__file__).resolve().parents[2] / "fixtures" / "quickstart" / "records.jsonl"
    samples = ([json.loads(line) for line in path.read_text().splitlines() if line.strip()]
               if path.exists() else _BUILTIN_SAMPLES)
    records = []
    for seq in range(count):
        sample = samples[seq % len(samples)]
        key = sample["key"].encode() if sample["key"] is not None else None
        headers = [(k, v.encode()) for k, v in sample["headers"].items()] + [("seq", str(seq).encode())]
        records.append((key, sample["value"].encode(), headers))
    return records


def _produce(bootstrap: str, count: int) -> None:
    from confluent_kafka import Producer

    # False for a second quickstart on the same storage root: the broker kept the topic
    create_topic({"bootstrap.servers": bootstrap}, KAFKA_TOPIC, 3)
    producer = Producer(with_client_logger({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                            "linger.ms": 5}))
    for key, value, headers in sample_records(count):
        producer.produce(KAFKA_TOPIC, value=value, key=key, headers=headers)
    if producer.flush(60) != 0:
        raise ServiceError("could not produce the sample records to the local broker")


def _create_pubsub(emulator_host: str) -> tuple[str, str]:
    from pubsub_connect.io.pubsub.admin import ensure_subscription, ensure_topic
    from pubsub_connect.io.pubsub.credentials import Connection
    from pubsub_connect.io.pubsub.publisher import publisher_client
    from pubsub_connect.io.pubsub.subscriber import subscriber_client

    connection = Connection.for_emulator(PROJECT, emulator_host)
    topic_path = connection.topic_path(PUBSUB_TOPIC)
    subscription_path = connection.subscription_path(SUBSCRIPTION)
    from pubsub_connect.io.pubsub.publisher import PublisherConfig

    ensure_topic(publisher_client(PublisherConfig(connection, PUBSUB_TOPIC)), topic_path)
    ensure_subscription(subscriber_client(connection), subscription_path, topic_path)
    return topic_path, subscription_path


def _pull_all(emulator_host: str, subscription_path: str, expected: int, timeout_s: float = 60) -> list:
    from pubsub_connect.io.pubsub.credentials import Connection
    from pubsub_connect.io.pubsub.leases import ack
    from pubsub_connect.io.pubsub.subscriber import pull_batch, subscriber_client

    subscriber = subscriber_client(Connection.for_emulator(PROJECT, emulator_host))
    received: dict[str, object] = {}
    deadline = time.monotonic() + timeout_s
    while len(received) < expected and time.monotonic() < deadline:
        batch = pull_batch(subscriber, subscription_path, 1000, timeout=5)
        if batch:
            ack(subscriber, subscription_path, [m.ack_id for m in batch])
        for message in batch:
            received[message.message_id] = message
    return list(received.values())


def write_connector_config(path: Path) -> Path:
    path.write_text(
        "# The Cloud Pub/Sub sink, exactly as Google's connector is configured\n"
        "name=quickstart-sink\n"
        "connector.class=com.google.pubsub.kafka.sink.CloudPubSubSinkConnector\n"
        f"topics={KAFKA_TOPIC}\n"
        f"cps.project={PROJECT}\n"
        f"cps.topic={PUBSUB_TOPIC}\n"
        "cps.useEmulator=true\n"
        "key.converter=org.apache.kafka.connect.storage.StringConverter\n"
        "value.converter=org.apache.kafka.connect.converters.ByteArrayConverter\n"
        "metadata.publish=true\n"
        "headers.publish=true\n"
        "tasks.max=2\n"
    )
    return path


def run_quickstart(storage_root: str | None, records: int) -> int:
    from pubsub_connect.pipelines.runner.supervisor import run_stages
    from pubsub_connect.pipelines.runtime import build_context, connector_stages

    root = Path(storage_root or tempfile.mkdtemp(prefix="pubsub-connect-quickstart-")).resolve()
    root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with LocalServices(root / "services", ("kafka", "pubsub")) as services:
        bootstrap = services.running["kafka"].endpoint
        emulator = services.running["pubsub"].endpoint
        print(f"kafka   up at {bootstrap}\npubsub  emulator up at {emulator}", flush=True)
        with environment({"PUBSUB_EMULATOR_HOST": emulator}):
            _produce(bootstrap, records)
            print(f"produced {records} records to Kafka topic '{KAFKA_TOPIC}' (3 partitions)", flush=True)
            _, subscription_path = _create_pubsub(emulator)
            connector_file = write_connector_config(root / "quickstart-sink.properties")
            run = cfg.load([connector_file], overrides=[f"bootstrap.servers={bootstrap}",
                                                        f"storage.root={root / 'data'}"])
            (connector,) = run.connectors
            print(f"running {connector.name} once ({connector_file})", flush=True)
            ctx = build_context(run.worker, once=True, progress=lambda line: print(line, flush=True))
            print(f"engine: {ctx.caps.describe()}", flush=True)
            try:
                run_stages(ctx, connector, connector_stages(connector, ctx.progress))
            finally:
                ctx.spark.stop()
            messages = _pull_all(emulator, subscription_path, records)
    print(f"\npulled {len(messages)} of {records} messages from {subscription_path}; for example:")
    for message in sorted(messages, key=lambda m: int(m.attributes.get("seq", 0)))[:3]:
        attributes = json.dumps(dict(sorted(message.attributes.items())))
        print(f"  data={message.data!r} attributes={attributes}")
    print(f"tables and checkpoints: {root / 'data'}  ({time.monotonic() - started:.1f} s)")
    if len(messages) != records:
        print(f"error: expected {records} messages, got {len(messages)}")
        return 1
    return 0
