"""Pub/Sub Lite sink and source throughput: end-to-end messages/s vs. the bare clients, in one run.

    .venv/bin/python benchmarks/lite.py [--mode once|continuous] [--direction sink|source]
                                        [--pipeline-mode staged|fused] [--records 50000] [--size 1024] [--partitions 3]

There is no Lite emulator; like the tests, this runs against the local Lite gRPC server of
``tests/lite_server``, started in its own process (so it does not share a GIL with the clients
it serves) and spoken to over TLS by the official ``google-cloud-pubsublite`` client, unmodified.
Both directions are measured on the same services and data:

- **sink** (Kafka → Lite): (1) a bare confluent-kafka consumer reading the N records, (2) the
  official Lite ``PublisherClient`` alone publishing N messages, (3) the Lite sink connector
  (ingest → convert → publish, ``--once``, Spark session already up). Ratio: (3) / slower of (1), (2).
- **source** (Lite → Kafka): (1) the official Lite ``SubscriberClient`` alone receiving and acking
  the N messages, (2) a bare idempotent Kafka producer (the setup's produce of the same N
  records), (3) the Lite source connector (pull → convert → produce, ``--once``) reading what the
  sink published. Ratio: (3) / slower of (1), (2).

``--mode continuous`` runs one direction's stages together, as ``pubsub-connect run`` does (the
product's default batch size and trigger), against the same bare clients: the steady-state rate
between 10% and 90% of N delivered. ``--direction sink`` (the default): from the publish stage's
progress (a Lite publish batch completes only when every message has an offset); Lite's head
offsets prove that every record arrived. ``--direction source``: N messages published to Lite by
the official publisher, read by the bare subscriber on one subscription and by the source on
another; the rate from the produce stage's progress (a produce batch completes when its Kafka
transaction committed); a ``read_committed`` consumer proves that Kafka holds all N.
``--pipeline-mode fused`` runs the source's one fused query instead (the rate from its batches,
each complete once its transaction committed).

A run whose connectors did not move every record fails instead of printing a rate.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _common import (
    ENGINES,
    add_engine_argument,
    bare_consume,
    create_kafka_topic,
    payload,
    produce,
    quiet_context,
    results_name,
    table,
    timed_stages,
    write_results,
)
from _streaming import run_together, stage_rows

from pubsub_connect.config import loader as cfg
from pubsub_connect.io.services.lifecycle import LocalServices
from pubsub_connect.pipelines import lite_sink, lite_source

PROJECT = "bench-project"
ZONE = "us-central1-a"
TESTS_DIR = Path(__file__).resolve().parent.parent / "tests"


class LiteServerProcess:
    """``python -m lite_server`` in a child process; sets this process up to trust it.

    The trust roots must be in the environment before the first gRPC channel and before the
    Spark JVM (whose Python workers publish and read) starts: the Lite client reads
    ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`` once per process."""

    def __init__(self, cert_dir: Path):
        self.proc = subprocess.Popen([sys.executable, "-m", "lite_server", "--cert-dir", str(cert_dir)],
                                     cwd=TESTS_DIR, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        info = json.loads(self.proc.stdout.readline())
        self.endpoint: str = info["endpoint"]
        os.environ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = info["cert"]
        for var in ("https_proxy", "HTTPS_PROXY", "grpc_proxy", "http_proxy", "HTTP_PROXY"):
            os.environ.pop(var, None)  # a proxy would intercept the loopback TLS connection
        os.environ["NO_PROXY"] = os.environ["no_proxy"] = "localhost,127.0.0.1"

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def client_kwargs(self) -> dict[str, Any]:
        from google.api_core.client_options import ClientOptions
        from google.auth.credentials import AnonymousCredentials

        return {"credentials": AnonymousCredentials(), "client_options": ClientOptions(api_endpoint=self.endpoint)}


@contextmanager
def lite_and_kafka(prefix: str) -> Iterator[tuple[Path, LiteServerProcess, str]]:
    """A scratch directory, the local Lite server and a local Kafka broker (its bootstrap
    address), all stopped on the way out."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    server = LiteServerProcess(root / "lite")
    try:
        with LocalServices(root / "services", ("kafka",)) as services:
            yield root, server, services.running["kafka"].endpoint
    finally:
        server.close()


def lite_keys(server: LiteServerProcess, tasks: int) -> dict[str, str]:
    """The connector keys that point a Lite connector at the local server."""
    return {"pubsublite.project": PROJECT, "pubsublite.location": ZONE, "pubsublite.endpoint": server.endpoint,
            "tasks.max": str(tasks)}


def topic_path(name: str) -> str:
    return f"projects/{PROJECT}/locations/{ZONE}/topics/{name}"


def subscription_path(name: str) -> str:
    return f"projects/{PROJECT}/locations/{ZONE}/subscriptions/{name}"


def lite_admin(server: LiteServerProcess) -> Any:
    from google.cloud.pubsublite import AdminClient
    from google.cloud.pubsublite.types import CloudZone

    return AdminClient(region=CloudZone.parse(ZONE).region, **server.client_kwargs())


def create_subscription(server: LiteServerProcess, topic: str, name: str) -> None:
    """A subscription of ``topic`` from its beginning, through the official admin client."""
    from google.cloud.pubsublite import Subscription

    immediately = Subscription.DeliveryConfig.DeliveryRequirement.DELIVER_IMMEDIATELY
    lite_admin(server).create_subscription(Subscription(
        name=subscription_path(name), topic=topic_path(topic),
        delivery_config=Subscription.DeliveryConfig(delivery_requirement=immediately)))


def create_topic_and_subscription(server: LiteServerProcess, name: str, partitions: int) -> None:
    """A Lite topic and a subscription of the same name from its beginning."""
    from google.cloud.pubsublite import Topic

    capacity = Topic.PartitionConfig.Capacity(publish_mib_per_sec=4, subscribe_mib_per_sec=8)
    lite_admin(server).create_topic(Topic(name=topic_path(name), partition_config=Topic.PartitionConfig(
        count=partitions, capacity=capacity), retention_config=Topic.RetentionConfig(per_partition_bytes=30 << 30)))
    create_subscription(server, name, name)


def bare_lite_publish(server: LiteServerProcess, name: str, count: int, size: int) -> float:
    """The official Lite publisher alone, default batching, round-robin routing; returns seconds."""
    from google.cloud.pubsublite.cloudpubsub import PublisherClient

    with PublisherClient(**server.client_kwargs()) as publisher:
        started = time.perf_counter()
        futures = [publisher.publish(topic_path(name), payload(size, seq)) for seq in range(count)]
        for future in futures:
            future.result(timeout=600)
        return time.perf_counter() - started


def bare_lite_subscribe(server: LiteServerProcess, name: str, count: int, partitions: int) -> float:
    """The official Lite subscriber alone receiving and acking ``count`` messages; returns seconds."""
    from google.cloud.pubsublite.cloudpubsub import SubscriberClient
    from google.cloud.pubsublite.types import FlowControlSettings, Partition

    received = 0
    lock = threading.Lock()
    done = threading.Event()

    def callback(message: Any) -> None:
        nonlocal received
        message.ack()
        with lock:
            received += 1
            if received >= count:
                done.set()

    with SubscriberClient(**server.client_kwargs()) as subscriber:
        started = time.perf_counter()
        future = subscriber.subscribe(subscription_path(name), callback,
                                      FlowControlSettings(messages_outstanding=1000, bytes_outstanding=20 << 20),
                                      fixed_partitions={Partition(p) for p in range(partitions)})
        finished = done.wait(600)
        elapsed = time.perf_counter() - started
        future.cancel()
    if not finished:
        raise RuntimeError(f"bare subscriber received {received} of {count} messages in 600 s")
    return elapsed


def lite_head_total(server: LiteServerProcess, name: str, partitions: int) -> int:
    """How many messages the Lite topic holds (sum of its partitions' head offsets)."""
    from pubsub_connect.io.pubsublite.connection import LiteConnection
    from pubsub_connect.io.pubsublite.offsets import OffsetClient

    client = OffsetClient(LiteConnection(PROJECT, ZONE, server.endpoint), subscription_path(name))
    try:
        return sum(client.head_offsets(range(partitions)).values())
    finally:
        client.close()


def kafka_committed_count(bootstrap: str, topic: str, partitions: int, expect: int, timeout_s: float = 120) -> int:
    """Records a ``read_committed`` consumer sees in ``topic`` (stops at ``expect`` or quiet)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time_ns()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen, deadline, quiet_since = 0, time.monotonic() + timeout_s, time.monotonic()
    while seen < expect and time.monotonic() < deadline and time.monotonic() - quiet_since < 10:
        batch = [m for m in consumer.consume(10_000, timeout=1.0) if m.error() is None]
        if batch:
            seen += len(batch)
            quiet_since = time.monotonic()
    consumer.close()
    return seen


def continuous_worker(bootstrap: str, root: Path, engine: str) -> dict[str, str]:
    """Worker settings of a continuous run: the product's default batch size and trigger."""
    return {"bootstrap.servers": bootstrap, "storage.root": str(root / "data"), **ENGINES[engine]}


def stages_together(run: Any, stages: Any, n: int, timeout_s: float, delivered: Callable[[], bool], what: str,
                    last_stage: str) -> tuple[dict[str, Any], float]:
    """The connector's stages together in a new Spark session until ``delivered()``:
    :func:`run_together`'s result and the session's start-up seconds (excluded from the rates)."""
    t0 = time.perf_counter()
    ctx = quiet_context(run.worker, once=False)
    session_s = time.perf_counter() - t0
    try:
        return run_together(ctx, run.connectors[0], stages, n, timeout_s, delivered, what, last_stage), session_s
    finally:
        ctx.spark.stop()


def print_continuous(args: argparse.Namespace, bare: list[tuple[str, str]], label: str, last_stage: str,
                     rate: dict[str, float], result: dict[str, Any], proof: tuple[str, str], session_s: float,
                     ratio: float) -> None:
    """The table of a continuous run: the bare clients, then the connector (``label``) as its last
    stage delivered, the proof that every record arrived, each stage's micro-batches."""
    delivered = "published" if last_stage == "publish" else "produced"
    print(table([
        ("records x size", f"{args.records:,} x {args.size} B, {args.partitions} partitions"),
        *bare,
        ("engine / mode", f"{args.engine} / continuous, default batch size"),
        (f"{label} end-to-end ({delivered})", f"{rate[f'{label.lower()} end-to-end']:,.0f} msg/s, "
                                              f"{result['total_s']:,.1f} s in {result['publish_batches']} "
                                              f"{last_stage} batches"),
        (f"{label} steady state (10-90%)", f"{rate[f'{label.lower()} steady state']:,.0f} msg/s over "
                                           f"{result['steady_span_s']:,.1f} s"),
        proof,
        *stage_rows(result["stage_batch_ms"]),
        ("spark session start (excluded)", f"{session_s:,.1f} s"),
        ("ratio steady state / slower bare", f"{ratio:.2f}"),
    ]))


def continuous_sink(args: argparse.Namespace) -> None:
    """The Lite sink's stages together on a backlog of N records, against the same bare clients."""
    n, parts = args.records, args.partitions
    with lite_and_kafka("bench-lite-continuous-") as (root, server, bootstrap):
        produce(bootstrap, "bench", n, args.size, partitions=parts)
        consume_s = bare_consume(bootstrap, "bench", n, partitions=parts)
        create_topic_and_subscription(server, "bare", parts)
        publish_s = bare_lite_publish(server, "bare", n, args.size)
        create_topic_and_subscription(server, "sink", parts)
        sink = cfg.load_raw({"name": "bench-sink", "connector.class": "PubSubLiteSinkConnector",
                             "topics": "bench", "pubsublite.topic": "sink", **lite_keys(server, args.tasks)},
                            continuous_worker(bootstrap, root, args.engine))
        result, session_s = stages_together(sink, lite_sink.STAGES, n, args.timeout,
                                            lambda: lite_head_total(server, "sink", parts) >= n, "lite sink",
                                            "publish")
        in_lite = lite_head_total(server, "sink", parts)
    if in_lite != n:
        raise SystemExit(f"the Lite sink published {in_lite} messages for {n} records")
    rate = {"bare consume": n / consume_s, "bare lite publish": n / publish_s,
            "lite sink end-to-end": n / result["total_s"], "lite sink steady state": result["steady_msgs_per_s"]}
    ratio = rate["lite sink steady state"] / min(rate["bare consume"], rate["bare lite publish"])
    print_continuous(args, [("bare consume (confluent-kafka)", f"{rate['bare consume']:,.0f} msg/s"),
                            ("bare Lite publish (official client)", f"{rate['bare lite publish']:,.0f} msg/s")],
                     "Lite sink", "publish", rate, result, ("in Lite (head offsets)", f"{in_lite:,}"), session_s, ratio)
    path = write_results(results_name("lite-continuous", args.engine), {
        "engine": args.engine, "mode": "continuous", "records": n, "size": args.size, "partitions": parts,
        "rates_msgs_per_s": rate, "total_seconds": result["total_s"], "steady_span_seconds": result["steady_span_s"],
        "stage_batch_ms": result["stage_batch_ms"], "ratio": ratio})
    print(f"\nresults: {path}")


def continuous_source(args: argparse.Namespace) -> None:
    """The Lite source's stages together on a backlog of N messages, against the same bare clients."""
    n, parts = args.records, args.partitions
    with lite_and_kafka("bench-lite-source-continuous-") as (root, server, bootstrap):
        produce_s = produce(bootstrap, "bench", n, args.size, partitions=parts)
        create_topic_and_subscription(server, "bare", parts)
        create_subscription(server, "bare", "connector")  # the connector's own cursors
        publish_s = bare_lite_publish(server, "bare", n, args.size)
        subscribe_s = bare_lite_subscribe(server, "bare", n, parts)
        create_kafka_topic(bootstrap, "from-lite", parts)
        source = cfg.load_raw({"name": "bench-source", "connector.class": "PubSubLiteSourceConnector",
                               "pubsublite.subscription": "connector", "kafka.topic": "from-lite",
                               **lite_keys(server, args.tasks)}, continuous_worker(bootstrap, root, args.engine))
        fused = args.pipeline_mode == "fused"
        result, session_s = stages_together(
            source, lite_source.FUSED_STAGES if fused else lite_source.STAGES, n, args.timeout,
            lambda: kafka_committed_count(bootstrap, "from-lite", parts, n) >= n, "lite source",
            "fused" if fused else "produce")
        in_kafka = kafka_committed_count(bootstrap, "from-lite", parts, n)
    if in_kafka != n:
        raise SystemExit(f"the Lite source produced {in_kafka} records for {n} messages")
    rate = {"bare lite publish": n / publish_s, "bare lite subscribe": n / subscribe_s, "bare produce": n / produce_s,
            "lite source end-to-end": n / result["total_s"], "lite source steady state": result["steady_msgs_per_s"]}
    ratio = rate["lite source steady state"] / min(rate["bare lite subscribe"], rate["bare produce"])
    print_continuous(args, [
        ("bare Lite publish (official client, setup)", f"{rate['bare lite publish']:,.0f} msg/s"),
        ("bare Lite subscribe + ack (official client)", f"{rate['bare lite subscribe']:,.0f} msg/s"),
        ("bare produce (confluent-kafka, idempotent)", f"{rate['bare produce']:,.0f} msg/s"),
    ], "Lite source", "fused" if fused else "produce", rate, result, ("in Kafka (read_committed)", f"{in_kafka:,}"),
        session_s, ratio)
    path = write_results(results_name(f"lite-source-continuous-{args.pipeline_mode}", args.engine), {
        "engine": args.engine, "mode": "continuous", "pipeline_mode": args.pipeline_mode, "direction": "source",
        "records": n, "size": args.size,
        "partitions": parts, "rates_msgs_per_s": rate, "total_seconds": result["total_s"],
        "steady_span_seconds": result["steady_span_s"], "stage_batch_ms": result["stage_batch_ms"], "ratio": ratio})
    print(f"\nresults: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("once", "continuous"), default="once",
                        help="once: sink then source, stages one after the other (run --once); continuous: one "
                             "direction's stages together (run)")
    parser.add_argument("--direction", choices=("sink", "source"), default="sink",
                        help="continuous mode: the Lite sink or the Lite source")
    parser.add_argument("--pipeline-mode", choices=("staged", "fused"), default="staged",
                        help="continuous source: the connector's pipeline.mode")
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="continuous mode: seconds to wait for all N messages")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=2)
    add_engine_argument(parser)
    args = parser.parse_args()
    if args.mode == "continuous":
        (continuous_source if args.direction == "source" else continuous_sink)(args)
        return
    n, parts = args.records, args.partitions
    with lite_and_kafka("bench-lite-") as (root, server, bootstrap):
        produce_s = produce(bootstrap, "bench", n, args.size, partitions=parts)
        consume_s = bare_consume(bootstrap, "bench", n, partitions=parts)
        create_topic_and_subscription(server, "bare", parts)
        publish_s = bare_lite_publish(server, "bare", n, args.size)
        subscribe_s = bare_lite_subscribe(server, "bare", n, parts)

        create_topic_and_subscription(server, "sink", parts)
        create_kafka_topic(bootstrap, "from-lite", parts)
        worker = {"bootstrap.servers": bootstrap, "storage.root": str(root / "data"), **ENGINES[args.engine],
                  "pipeline.max.records.per.batch": str(n)}
        keys = lite_keys(server, args.tasks)
        sink = cfg.load_raw({"name": "bench-sink", "connector.class": "PubSubLiteSinkConnector",
                             "topics": "bench", "pubsublite.topic": "sink", **keys}, worker)
        source = cfg.load_raw({"name": "bench-source", "connector.class": "PubSubLiteSourceConnector",
                               "pubsublite.subscription": "sink", "kafka.topic": "from-lite", **keys}, worker)
        t0 = time.perf_counter()
        ctx = quiet_context(sink.worker, once=True)
        session_s = time.perf_counter() - t0
        try:
            sink_s, sink_stages = timed_stages(ctx, sink.connectors[0], lite_sink.STAGES)
            in_lite = lite_head_total(server, "sink", parts)
            if in_lite != n:
                raise RuntimeError(f"the Lite sink published {in_lite} of {n} records")
            source_s, source_stages = timed_stages(ctx, source.connectors[0], lite_source.STAGES)
            in_kafka = kafka_committed_count(bootstrap, "from-lite", parts, n)
            if in_kafka != n:
                raise RuntimeError(f"the Lite source produced {in_kafka} of {n} messages to Kafka")
        finally:
            ctx.spark.stop()

    rate = {"bare consume": n / consume_s, "bare lite publish": n / publish_s, "lite sink end-to-end": n / sink_s,
            "bare lite subscribe": n / subscribe_s, "bare produce": n / produce_s,
            "lite source end-to-end": n / source_s}
    sink_ratio = rate["lite sink end-to-end"] / min(rate["bare consume"], rate["bare lite publish"])
    source_ratio = rate["lite source end-to-end"] / min(rate["bare lite subscribe"], rate["bare produce"])
    mb = n * args.size / 1e6
    rows = [
        ("records x size", f"{n:,} x {args.size} B ({mb:,.0f} MB), {parts} partitions"),
        ("bare consume (confluent-kafka)", f"{rate['bare consume']:,.0f} msg/s"),
        ("bare Lite publish (official client)", f"{rate['bare lite publish']:,.0f} msg/s"),
        ("Lite sink end-to-end", f"{rate['lite sink end-to-end']:,.0f} msg/s, {mb / sink_s:,.1f} MB/s"),
        *[(f"  stage {name}", f"{secs:,.1f} s") for name, secs in sink_stages.items()],
        ("  ratio to the slower bare client", f"{sink_ratio:.2f}"),
        ("bare Lite subscribe + ack (official client)", f"{rate['bare lite subscribe']:,.0f} msg/s"),
        ("bare produce (confluent-kafka, idempotent)", f"{rate['bare produce']:,.0f} msg/s"),
        ("Lite source end-to-end", f"{rate['lite source end-to-end']:,.0f} msg/s, {mb / source_s:,.1f} MB/s"),
        *[(f"  stage {name}", f"{secs:,.1f} s") for name, secs in source_stages.items()],
        ("  ratio to the slower bare client", f"{source_ratio:.2f}"),
        ("spark session start (excluded)", f"{session_s:,.1f} s"),
    ]
    print(table(rows))
    path = write_results(results_name("lite", args.engine), {
        "engine": args.engine, "records": n, "size": args.size, "partitions": parts, "rates_msgs_per_s": rate,
                                  "sink_stage_seconds": sink_stages, "source_stage_seconds": source_stages,
                                  "sink_ratio": sink_ratio, "source_ratio": source_ratio})
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
