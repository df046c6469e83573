"""Cloud Pub/Sub source throughput: Pub/Sub → Kafka messages/s vs. the bare clients, in one run.

    .venv/bin/python benchmarks/cps_source.py [--mode once|continuous] [--records 20000] [--size 1024]

Starts a local Kafka broker and Google's Pub/Sub emulator and publishes N messages of SIZE bytes
to two subscriptions of one topic. Then measures, on the same services: (1) a bare streaming-pull
subscriber receiving and acking N messages, (2) a bare idempotent producer writing N records,
(3) the connector (pull → convert → produce, Spark session already up, streaming pull). The
ratio compares (3) with the slower of (1) and (2).

``--mode once`` (the default) runs the stages one after the other, as ``pubsub-connect run
--once`` does; its pull stage ends after 3 s without a message. ``--mode continuous`` runs them
together, as ``pubsub-connect run`` does: the rates come from the produce stage's progress
events (a produce micro-batch completes when its Kafka transaction committed), the ratio from
the steady state between 10% and 90% of N, and a ``read_committed`` consumer proves that every
record arrived in Kafka once.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from _common import (
    ENGINES,
    add_engine_argument,
    create_kafka_topic,
    payload,
    quiet_context,
    results_name,
    table,
    timed_stages,
    write_results,
)
from _streaming import run_together, stage_rows

from pubsub_connect.config import loader as cfg
from pubsub_connect.io.services.lifecycle import LocalServices, environment
from pubsub_connect.io.tables import TableRef
from pubsub_connect.pipelines.cps_source import STAGES

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


def bare_produce(bootstrap: str, topic: str, count: int, size: int) -> float:
    from confluent_kafka import Producer

    create_kafka_topic(bootstrap, topic, 3)
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


def committed_exactly_once(bootstrap: str, topic: str, n: int, partitions: int = 3) -> bool:
    """Whether a ``read_committed`` consumer reads exactly the ``n`` sequence ids ``0..n-1`` from
    ``topic`` (each payload starts with its id), reading up to the current end offsets."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-check-{time.time_ns()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "fetch.max.bytes": 52_428_800})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        seqs: list[int] = []
        positions = dict.fromkeys(range(partitions), 0)
        # a transaction's commit marker takes an offset no record is read at: done once every
        # partition's position (next offset to read) reached its end; a transaction still open
        # there holds the position back, and the caller asks again later
        deadline = time.monotonic() + 60
        while any(positions[p] < ends[p] for p in range(partitions)):
            if time.monotonic() > deadline:
                return False
            messages = consumer.consume(10_000, timeout=1.0)
            if not messages:
                positions = {tp.partition: tp.offset for tp in consumer.position(
                    [TopicPartition(topic, p) for p in range(partitions)])}
                continue
            for message in messages:
                if message.error() is None:
                    seqs.append(int(message.value()[:12]))
                    positions[message.partition()] = message.offset() + 1
        return len(seqs) == n and set(seqs) == set(range(n))
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("once", "continuous"), default="once",
                        help="once: the stages one after the other (run --once); continuous: together (run)")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--timeout", type=float, default=1800,
                        help="continuous mode: seconds to wait for all N records in Kafka")
    add_engine_argument(parser)
    args = parser.parse_args()
    n = args.records
    continuous = args.mode == "continuous"
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
            create_kafka_topic(bootstrap, "out", 3)  # kafka.partition.count below

            run = cfg.load_raw(
                {"name": "bench", "connector.class": "cps-source", "cps.project": PROJECT,
                 "cps.subscription": "connector", "kafka.topic": "out", "cps.useEmulator": "true",
                 "cps.streamingPull.enabled": "true", "kafka.partition.count": "3",
                 "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
                 "kafka.record.headers": "true"},
                {"bootstrap.servers": bootstrap, "storage.root": str(root / "data"), **ENGINES[args.engine],
                 "pipeline.max.records.per.batch": str(min(n, 20_000))})
            ctx = quiet_context(run.worker, once=not continuous)
            if continuous:
                together = run_together(ctx, run.connectors[0], STAGES, n, args.timeout,
                                        lambda: committed_exactly_once(bootstrap, "out", n), "cps_source",
                                        last_stage="produce")
            else:
                e2e_s, stage_times = timed_stages(ctx, run.connectors[0], STAGES)
            produced = ctx.store.row_count(TableRef("outbox", "bench"))
            # deliveries, not messages: a message whose lease ran out is pulled again
            pulled = ctx.store.row_count(TableRef("bronze", "bench"))
            ctx.spark.stop()

    rate = {"bare streaming pull": n / subscribe_s, "bare produce": n / produce_s}
    limit = min(rate["bare streaming pull"], rate["bare produce"])
    head = [
        ("messages x size", f"{n:,} x {args.size} B"),
        ("bare streaming pull + ack", f"{rate['bare streaming pull']:,.0f} msg/s"),
        ("bare idempotent produce", f"{rate['bare produce']:,.0f} msg/s"),
        ("deliveries pulled", f"{pulled:,} for {n:,} messages"),
    ]
    if continuous:
        rate["connector end-to-end"] = n / together["total_s"]
        rate["connector steady state"] = together["steady_msgs_per_s"]
        ratio = rate["connector steady state"] / limit
        rows = [
            *head,
            ("engine / mode", f"{args.engine} / continuous"),
            ("connector end-to-end (produced)", f"{rate['connector end-to-end']:,.0f} msg/s, "
                                                f"{together['total_s']:,.1f} s in {together['publish_batches']} "
                                                f"produce batches ({produced:,} outbox records)"),
            ("connector steady state (10-90%)", f"{rate['connector steady state']:,.0f} msg/s over "
                                                f"{together['steady_span_s']:,.1f} s"),
            ("in Kafka (read_committed)", f"all {n:,}, each once"),
            *stage_rows(together["stage_batch_ms"]),
            ("ratio steady state / slower bare", f"{ratio:.2f}"),
        ]
        details: dict[str, object] = {"total_seconds": together["total_s"],
                                      "steady_span_seconds": together["steady_span_s"],
                                      "stage_batch_ms": together["stage_batch_ms"]}
        name = results_name("cps_source-continuous", args.engine)
    else:
        rate["connector end-to-end"] = n / e2e_s
        ratio = rate["connector end-to-end"] / limit
        rows = [
            *head,
            ("connector end-to-end", f"{rate['connector end-to-end']:,.0f} msg/s ({produced:,} records)"),
            ("engine", args.engine),
            *[(f"  stage {name}", f"{secs:,.1f} s, {n / secs:,.0f} msg/s") for name, secs in stage_times.items()],
            ("ratio to the slower bare client", f"{ratio:.2f}"),
        ]
        details = {"stage_seconds": stage_times}
        name = results_name("cps_source", args.engine)
    print(table(rows))
    path = write_results(name, {"engine": args.engine, "mode": args.mode, "records": n, "deliveries": pulled,
                                "rates_msgs_per_s": rate,
                                **details, "ratio": ratio})
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
