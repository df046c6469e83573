"""Cloud Pub/Sub source throughput: Pub/Sub → Kafka messages/s vs. the bare clients, in one run.

    .venv/bin/python benchmarks/cps_source.py [--records 20000] [--size 1024]

Starts a local Kafka broker and Google's Pub/Sub emulator and publishes N messages of SIZE bytes
to two subscriptions of one topic. Then measures, on the same services: (1) a bare streaming-pull
subscriber receiving and acking N messages, (2) a bare idempotent producer writing N records,
(3) the connector (pull → convert → produce, ``--once``, Spark session already up, streaming
pull). The ratio compares (3) with the slower of (1) and (2).
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from _common import ENGINES, add_engine_argument, payload, results_name, table, timed_stages, write_results

from pubsub_connect.config import loader as cfg
from pubsub_connect.io.services.lifecycle import LocalServices, environment
from pubsub_connect.io.tables import TableRef
from pubsub_connect.pipelines.cps_source import STAGES
from pubsub_connect.pipelines.runtime import build_context

PROJECT = "bench-project"


def bare_subscribe(subscription_path: str, count: int) -> float:
    from google.cloud import pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()
    done = threading.Event()
    seen: set[str] = set()

    def callback(message) -> None:
        seen.add(message.message_id)
        message.ack()
        if len(seen) >= count:
            done.set()

    started = time.perf_counter()
    future = subscriber.subscribe(subscription_path, callback, flow_control=pubsub_v1.types.FlowControl(
        max_messages=1000))
    done.wait(600)
    elapsed = time.perf_counter() - started
    future.cancel()
    future.result(timeout=60)  # the client's threads are done (pending acks sent) before it closes
    subscriber.close()
    return elapsed


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # referenced until the future resolves
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def bare_produce(bootstrap: str, topic: str, count: int, size: int) -> float:
    from confluent_kafka import Producer

    create_topic(bootstrap, topic, 3)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    started = time.perf_counter()
    for seq in range(count):
        while True:
            try:
                producer.produce(topic, payload(size, seq))
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    add_engine_argument(parser)
    args = parser.parse_args()
    n = args.records
    root = Path(tempfile.mkdtemp(prefix="bench-cps-source-"))
    with LocalServices(root / "services", ("kafka", "pubsub")) as services:
        bootstrap = services.running["kafka"].endpoint
        with environment({"PUBSUB_EMULATOR_HOST": services.running["pubsub"].endpoint}):
            from google.cloud import pubsub_v1

            publisher = pubsub_v1.PublisherClient()
            subscriber = pubsub_v1.SubscriberClient()
            topic = publisher.topic_path(PROJECT, "bench")
            publisher.create_topic(request={"name": topic})
            for name in ("bare", "connector"):
                subscriber.create_subscription(request={"name": subscriber.subscription_path(PROJECT, name),
                                                        "topic": topic, "ack_deadline_seconds": 60})
            futures = [publisher.publish(topic, payload(args.size, seq)) for seq in range(n)]
            for future in futures:
                future.result(300)

            subscribe_s = bare_subscribe(subscriber.subscription_path(PROJECT, "bare"), n)
            produce_s = bare_produce(bootstrap, "bare", n, args.size)
            create_topic(bootstrap, "out", 3)  # kafka.partition.count below

            run = cfg.load_raw(
                {"name": "bench", "connector.class": "cps-source", "cps.project": PROJECT,
                 "cps.subscription": "connector", "kafka.topic": "out", "cps.useEmulator": "true",
                 "cps.streamingPull.enabled": "true", "kafka.partition.count": "3",
                 "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
                 "kafka.record.headers": "true"},
                {"bootstrap.servers": bootstrap, "storage.root": str(root / "data"), **ENGINES[args.engine],
                 "pipeline.max.records.per.batch": str(min(n, 20_000))})
            ctx = build_context(run.worker, once=True, progress=lambda _line: None)
            e2e_s, stage_times = timed_stages(ctx, run.connectors[0], STAGES)
            produced = ctx.store.row_count(TableRef("outbox", "bench"))
            ctx.spark.stop()

    rate = {"bare streaming pull": n / subscribe_s, "bare produce": n / produce_s, "connector end-to-end": n / e2e_s}
    limit = min(rate["bare streaming pull"], rate["bare produce"])
    rows = [
        ("messages x size", f"{n:,} x {args.size} B"),
        ("bare streaming pull + ack", f"{rate['bare streaming pull']:,.0f} msg/s"),
        ("bare idempotent produce", f"{rate['bare produce']:,.0f} msg/s"),
        ("connector end-to-end", f"{rate['connector end-to-end']:,.0f} msg/s ({produced:,} records)"),
        ("engine", args.engine),
        *[(f"  stage {name}", f"{secs:,.1f} s, {n / secs:,.0f} msg/s") for name, secs in stage_times.items()],
        ("ratio to the slower bare client", f"{rate['connector end-to-end'] / limit:.2f}"),
    ]
    print(table(rows))
    path = write_results(results_name("cps_source", args.engine), {
        "engine": args.engine, "records": n, "rates_msgs_per_s": rate, "stage_seconds": stage_times,
                                        "ratio": rate["connector end-to-end"] / limit})
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
