"""This project's Cloud Pub/Sub connectors vs. Google's, on the same records, broker and emulator.

    .venv/bin/python benchmarks/vs_google.py [--records 50000] [--source-records 20000] [--size 1024]
                                             [--direction both|sink|source] [--tasks 2] [--source-tasks 1]
                                             [--measure both|throughput|latency] [--rate 1000] [--source-rate 500]
                                             [--seconds 60]

The reference is Google's Pub/Sub Group Kafka Connector 1.3.3, unmodified, in a Kafka Connect
3.9.1 standalone worker: the harness of the differential tests (``tests/reference``), which
reaches the emulator through loopback fronts (TLS front, CONNECT proxy, token endpoint; the Java
client speaks only TLS to Google's endpoint). Ours runs as the other benchmarks run it: its
stages one after the other (``--once``) in a Spark session already up.

- **sink** (Kafka → Pub/Sub): N records of SIZE bytes in one Kafka topic (3 partitions) are read
  by Google's ``CloudPubSubSinkConnector`` into one Pub/Sub topic and by our sink into another
  (ours twice: ``pipeline.mode=staged`` and ``fused``, each into a topic of its own),
  with the same ``tasks.max``, converters and batching keys (``maxBufferSize``,
  ``maxBufferBytes``, ``maxDelayThresholdMs``, ``maxOutstandingMessages``,
  ``maxOutstandingRequestBytes``). Google's run is timed from creating the connector until
  Connect has committed the offsets of all N records: Connect commits a sink task's offsets
  only after the task's ``flush`` has waited for every publish of them to be acknowledged, so
  that is the moment all N are in the topic (seen within one commit interval,
  ``offset.flush.interval.ms`` = 1 s, which can only make Google's figure lower). Ours is timed
  from the first stage's start to the end of the publish stage, which ends once every publish
  is acknowledged.
- **source** (Pub/Sub → Kafka): M messages (``--source-records``) published once to a topic
  with three subscriptions; Google's ``CloudPubSubSourceConnector`` writes one to Kafka topic A,
  ours the others to topics of their own, same keys on all (streaming pull, ``kafka.partition.count``,
  converters). Ours runs in both modes, ``pipeline.mode=staged`` (pull, convert, produce) and
  ``pipeline.mode=fused`` (one stage), each on its own subscription and Kafka topic. Google's run
  is timed from creating the connector until topic A's end offsets add up to M; ours from the first
  stage's start to the end of the last (produce, or the fused stage).

- **sink latency** (``--measure latency``): each side runs continuously while a producer sends
  ``--rate`` records a second for ``--seconds`` into a Kafka topic of its own, each stamped with its
  produce time (a header, published as an attribute: ``headers.publish=true``); a streaming-pull
  subscriber in a child process (``latency.py``'s) takes each message's receive time minus that
  stamp. Three sides in one run: Google's connector, ours with ``pipeline.mode=staged`` and ours
  with ``pipeline.mode=fused``. Each is warmed up with one record first. Reported: received,
  p50/p90/p99/max, p50 of the first and last third produced (steady or falling behind), and CPU
  seconds per message over the producing window and the drain (Google's: the Connect JVM; ours:
  the Spark JVM, its Python workers and this process without the producer's thread).
- **source latency** (``--measure latency``, ``--direction source``): the same three sides, each
  running continuously while a child process publishes ``--source-rate`` messages a second for
  ``--seconds`` to a Pub/Sub topic of the side's own, each stamped with its publish time (an
  attribute, which ``kafka.record.headers=true`` turns into a Kafka header on both connectors;
  the publisher's default batching, up to 10 ms, counts in every side's latency). A Kafka
  consumer in a child process of its own (a group of its own, ``read_committed``: our source
  writes transactions, Google's does not) takes each record's receive time minus that stamp.
  Same keys on every side (streaming pull, ``kafka.partition.count``, converters, ``tasks.max`` =
  ``--source-tasks``; our fused mode runs one puller whatever ``tasks.max`` says), a warm-up
  message first, and the same figures as the sink's. The publisher runs in a process of its own
  because the Pub/Sub client spends most of its CPU outside the calling thread, so none of it
  counts as ours; ours is the Spark JVM, its Python workers and this process (where our pullers run).

Afterwards (untimed) each side's output is read back: every sequence id must be there (the
duplicates are counted and shown), or the run fails instead of printing a rate. Connect worker
and Spark session start-up are excluded from every figure; a connector's own start (Connect:
created → tasks ``RUNNING``; ours: each stage's query start) is included. CPU seconds per side
are read from ``/proc``: Google's = the Connect JVM; ours = the Spark JVM with its Python
workers plus this process (the driver). The loopback fronts run in this process and cost CPU
during Google's runs only; that is reported on its own line.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import (
    ENGINES,
    add_engine_argument,
    cpu_delta,
    create_kafka_topic,
    payload,
    produce,
    quiet_context,
    results_name,
    table,
    timed_stages,
    tree_cpu_seconds,
    write_results,
)

from pubsub_connect.config import loader as cfg
from pubsub_connect.io.services.lifecycle import LocalServices, environment
from pubsub_connect.io.services.process import ServiceError
from pubsub_connect.io.tables import BRONZE, TableRef
from pubsub_connect.pipelines import cps_sink, cps_source
from pubsub_connect.pipelines.context import PipelineContext

#: The reference harness lives with the differential tests that use it; its modules import each
#: other as top-level packages of ``tests/`` (pytest's rootdir layout), so that directory goes
#: on the path, as pytest puts it.
TESTS_DIR = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS_DIR))

from integration.kafka_tls import make_server_tls  # noqa: E402
from reference.connect import (  # noqa: E402
    CONNECT_VERSION,
    GOOGLE_CONNECTOR_VERSION,
    SINK_CONNECTOR_CLASS,
    SOURCE_CONNECTOR_CLASS,
    ConnectStandalone,
)
from reference.fronts import (  # noqa: E402
    FRONT_DNS_NAMES,
    FRONT_IP_ADDRESSES,
    GoogleApiFronts,
    write_fake_service_account,
)

PROJECT = "bench-project"
PARTITIONS = 3
BYTES_CONVERTER = "org.apache.kafka.connect.converters.ByteArrayConverter"
STRING_CONVERTER = "org.apache.kafka.connect.storage.StringConverter"
#: How often the end of a reference run is looked for (committed offsets, end offsets).
POLL_S = 0.1
#: How long one side may take before the run is declared failed.
RUN_TIMEOUT_S = 1800.0
#: Our sides of a throughput comparison: result key → (``pipeline.mode``, label in the table).
#: The sink runs staged only; the source both ways.
OURS_SIDES = {"ours": ("staged", "ours"), "ours_fused": ("fused", "ours (pipeline.mode=fused)")}


def seq_of(value: bytes) -> int:
    """The sequence id a :func:`_common.payload` body starts with."""
    return int(value[:12])


class Cpu:
    """CPU seconds of the processes a side runs in, between :meth:`start` and :meth:`stop`."""

    def __init__(self, jvm_pid: int, include_self: bool):
        self.jvm_pid = jvm_pid
        self.include_self = include_self
        self.seconds = 0.0

    def start(self) -> Cpu:
        self._tree = tree_cpu_seconds(self.jvm_pid)
        self._self = time.process_time()
        return self

    def stop(self) -> float:
        self.seconds = cpu_delta(self._tree, tree_cpu_seconds(self.jvm_pid))
        if self.include_self:
            self.seconds += time.process_time() - self._self
        return self.seconds


def wait_until(done: Callable[[], bool], check: Callable[[], None], what: str) -> None:
    """Poll ``done`` until it holds; ``check`` raises when waiting is pointless (a failed task)."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    polls = 0
    while not done():
        polls += 1
        if polls % 10 == 0:  # a REST call each second, not each poll
            check()
        if time.monotonic() > deadline:
            raise ServiceError(f"{what} did not finish within {RUN_TIMEOUT_S:.0f} s")
        time.sleep(POLL_S)


def committed_total(bootstrap: str, group: str, topic: str) -> Callable[[], int]:
    """Records of ``topic`` whose offsets ``group`` has committed (a read of the group's offsets,
    without joining it)."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]

    def total() -> int:
        try:
            committed = consumer.committed(partitions, timeout=10)
        except KafkaException as exc:  # the group's coordinator still loading or moving: ask again
            if exc.args[0].retriable() or exc.args[0].code() == KafkaError.NOT_COORDINATOR:
                return 0
            raise
        return sum(max(tp.offset, 0) for tp in committed)

    return total


def end_offsets_total(bootstrap: str, topic: str) -> Callable[[], int]:
    """The sum of ``topic``'s end offsets: its record count while nothing writes transactionally."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-offsets-{time.time_ns()}"})

    def total() -> int:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                   for p in range(PARTITIONS))

    return total


def kafka_seqs(bootstrap: str, topic: str) -> collections.Counter[int]:
    """Every committed record of ``topic`` by sequence id, read to the end of each partition."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-check-{time.time_ns()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "fetch.max.bytes": 52_428_800})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in range(PARTITIONS)}
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen: collections.Counter[int] = collections.Counter()
    deadline = time.monotonic() + 600
    while True:
        # Transaction markers take offsets too: done when every partition's position is at its end.
        positions = {tp.partition: tp.offset for tp in consumer.position(
            [TopicPartition(topic, p) for p in range(PARTITIONS)])}
        if all(positions[p] >= end for p, end in ends.items()):
            break
        if time.monotonic() > deadline:
            raise ServiceError(f"reading {topic} back: at {positions}, ends {ends}")
        for message in consumer.consume(10_000, timeout=1.0):
            if message.error() is None:
                seen[seq_of(message.value())] += 1
    consumer.close()
    return seen


def pubsub_seqs(subscription: str, count: int) -> collections.Counter[int]:
    """Pull (and ack) ``subscription`` until ``count`` distinct sequence ids arrived."""
    from google.api_core import exceptions as gexc
    from google.cloud import pubsub_v1

    client = pubsub_v1.SubscriberClient()
    seen: collections.Counter[int] = collections.Counter()
    deadline = time.monotonic() + 600
    while len(seen) < count:
        if time.monotonic() > deadline:
            raise ServiceError(f"reading {subscription} back: {len(seen):,} of {count:,} ids arrived")
        try:
            response = client.pull(request={"subscription": subscription, "max_messages": 1000}, timeout=10)
        except gexc.DeadlineExceeded:
            continue
        if response.received_messages:
            client.acknowledge(request={"subscription": subscription,
                                        "ack_ids": [m.ack_id for m in response.received_messages]})
        for message in response.received_messages:
            seen[seq_of(message.message.data)] += 1
    client.close()
    return seen


def check_complete(what: str, seen: collections.Counter[int], n: int) -> int:
    """Fail unless every id 0..n-1 arrived (and nothing else); returns the duplicates seen."""
    missing = n - len(set(seen) & set(range(n)))
    unexpected = len(set(seen) - set(range(n)))
    if missing or unexpected:
        raise ServiceError(f"{what}: {missing:,} of {n:,} ids missing, {unexpected:,} unexpected")
    return sum(seen.values()) - n


def sink_settings(args: argparse.Namespace) -> dict[str, str]:
    """The keys both sinks get in every comparison: project, tasks, converters, batching."""
    return {"cps.project": PROJECT, "tasks.max": str(args.tasks), "key.converter": STRING_CONVERTER,
            "value.converter": BYTES_CONVERTER, "maxBufferSize": str(args.max_buffer_size),
            "maxBufferBytes": str(args.max_buffer_bytes), "maxDelayThresholdMs": str(args.max_delay_ms)}


def source_settings(args: argparse.Namespace) -> dict[str, str]:
    """The keys both sources run with, throughput and latency alike."""
    return {"cps.project": PROJECT, "tasks.max": str(args.source_tasks),
            "key.converter": STRING_CONVERTER, "value.converter": BYTES_CONVERTER,
            "cps.streamingPull.enabled": "true", "kafka.partition.count": str(PARTITIONS),
            "kafka.record.headers": "true"}


class Bench:
    """Services, the reference worker and our Spark session, shared by both directions."""

    def __init__(self, args: argparse.Namespace, root: Path, bootstrap: str, worker: ConnectStandalone,
                 fronts: GoogleApiFronts):
        from google.cloud import pubsub_v1

        self.args = args
        self.root = root
        self.bootstrap = bootstrap
        self.worker = worker
        self.fronts = fronts
        self.publisher = pubsub_v1.PublisherClient()
        self.subscriber = pubsub_v1.SubscriberClient()
        self.ctx: PipelineContext | None = None
        self.spark_pid = 0
        self.session_s = 0.0

    def context(self, run: cfg.RunConfig) -> PipelineContext:
        """A context for ``run``'s worker config on the one Spark session (started on first use)."""
        if self.ctx is None:
            started = time.perf_counter()
            self.ctx = quiet_context(run.worker, once=True)
            self.session_s = time.perf_counter() - started
            self.spark_pid = int(self.ctx.spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
            return self.ctx
        return PipelineContext(self.ctx.spark, run.worker, self.ctx.caps, self.ctx.store, once=True,
                               progress=lambda _line: None)

    def worker_settings(self, max_records: int) -> dict[str, str]:
        return {"bootstrap.servers": self.bootstrap, "storage.root": str(self.root / "data"),
                **ENGINES[self.args.engine], "pipeline.max.records.per.batch": str(max_records)}

    def create_subscription(self, topic: str, name: str) -> str:
        path = self.subscriber.subscription_path(PROJECT, name)
        self.subscriber.create_subscription(request={"name": path, "topic": topic, "ack_deadline_seconds": 60})
        return path

    def google_run(self, name: str, connector_class: str, settings: dict[str, str],
                   done: Callable[[], bool]) -> dict[str, float]:
        """Create Google's connector, wait until ``done``; seconds to RUNNING and to done, CPU."""
        cpu = Cpu(self.worker.pid, include_self=False).start()
        fronts_cpu = time.process_time()
        started = time.perf_counter()
        with self.worker.running(name, connector_class, settings):
            running_s = time.perf_counter() - started
            wait_until(done, lambda: self.worker.raise_if_failed(name), f"Google's {name}")
            total_s = time.perf_counter() - started
            cpu.stop()
            fronts_s = time.process_time() - fronts_cpu
        return {"seconds": total_s, "to_running_s": running_s, "cpu_s": cpu.seconds, "fronts_cpu_s": fronts_s}

    def ours_run(self, run: cfg.RunConfig, stages: Any) -> dict[str, Any]:
        ctx = self.context(run)
        cpu = Cpu(self.spark_pid, include_self=True).start()
        total_s, stage_s = timed_stages(ctx, run.connectors[0], stages)
        cpu.stop()
        return {"seconds": total_s, "stage_seconds": stage_s, "cpu_s": cpu.seconds}

    def sink(self) -> dict[str, Any]:
        """Google's sink, then ours staged and ours fused, each reading the same Kafka topic (a
        consumer group of its own) into a Pub/Sub topic of its own."""
        args, n = self.args, self.args.records
        produce(self.bootstrap, "bench", n, args.size, PARTITIONS)
        sides = ("google", *OURS_SIDES)
        # names: sink-google, sink-ours, sink-ours-fused (Pub/Sub topics and subscriptions)
        names = {side: f"sink-{side.replace('_', '-')}" for side in sides}
        subscriptions = {}
        for side in sides:
            topic = self.publisher.topic_path(PROJECT, names[side])
            self.publisher.create_topic(request={"name": topic})
            subscriptions[side] = self.create_subscription(topic, names[side])
        settings = {**sink_settings(args), "topics": "bench",
                    "maxOutstandingMessages": str(args.max_outstanding_messages),
                    "maxOutstandingRequestBytes": str(args.max_outstanding_bytes)}

        committed = committed_total(self.bootstrap, "connect-google-sink", "bench")
        results: dict[str, Any] = {
            "google": self.google_run("google-sink", SINK_CONNECTOR_CLASS, {**settings, "cps.topic": names["google"]},
                                      lambda: committed() >= n)}
        for side, (mode, _label) in OURS_SIDES.items():
            name = "ours-sink" if mode == "staged" else f"ours-sink-{mode}"
            run = cfg.load_raw({**settings, "name": name, "connector.class": "cps-sink", "cps.topic": names[side],
                                "cps.useEmulator": "true", "pipeline.mode": mode}, self.worker_settings(n))
            results[side] = self.ours_run(run, cps_sink.FUSED_STAGES if mode == "fused" else cps_sink.STAGES)
        for side, figures in results.items():
            figures["duplicates"] = check_complete(f"sink, {side}", pubsub_seqs(subscriptions[side], n), n)
        return {"records": n, "size": args.size, "settings": settings, **results}

    def source(self) -> dict[str, Any]:
        """Google's source, then ours staged and ours fused, each on a subscription of the same
        topic (so each gets the same M messages) and into a Kafka topic of its own."""
        args, n = self.args, self.args.source_records
        sides = ("google", *OURS_SIDES)
        # names: source-google, source-ours, source-ours-fused (subscriptions and Kafka topics)
        names = {side: f"source-{side.replace('_', '-')}" for side in sides}
        topic = self.publisher.topic_path(PROJECT, "source")
        self.publisher.create_topic(request={"name": topic})
        subscriptions = {side: self.create_subscription(topic, names[side]).rsplit("/", 1)[1] for side in sides}
        futures = [self.publisher.publish(topic, payload(args.size, seq)) for seq in range(n)]
        for future in futures:
            future.result(300)
        for side in sides:
            create_kafka_topic(self.bootstrap, names[side], PARTITIONS)
        settings = source_settings(args)

        end_offsets = end_offsets_total(self.bootstrap, names["google"])
        result: dict[str, Any] = {"records": n, "size": args.size, "settings": settings}
        result["google"] = self.google_run("google-source", SOURCE_CONNECTOR_CLASS,
                                           {**settings, "cps.subscription": subscriptions["google"],
                                            "kafka.topic": names["google"]},
                                           lambda: end_offsets() >= n)
        for side, (mode, _label) in OURS_SIDES.items():
            name = "ours-source" if mode == "staged" else f"ours-source-{mode}"
            run = cfg.load_raw({**settings, "name": name, "connector.class": "cps-source",
                                "cps.subscription": subscriptions[side], "kafka.topic": names[side],
                                "cps.useEmulator": "true", "pipeline.mode": mode},
                               self.worker_settings(min(n, 20_000)))
            ours = self.ours_run(run, cps_source.FUSED_STAGES if mode == "fused" else cps_source.STAGES)
            # Deliveries, not messages: a message whose lease ran out is pulled again (and dropped
            # later); both modes append every delivery to bronze.
            ours["pulled"] = self.context(run).store.row_count(TableRef(BRONZE, name))
            result[side] = ours
        for side in sides:
            result[side]["duplicates"] = check_complete(f"source, {side}", kafka_seqs(self.bootstrap, names[side]), n)
        return result


class LatencyRun:
    """One side of a latency comparison in one direction: the side's input and output topics,
    the stamped sender (whose CPU is left out of ours), the receiver in a child process
    (``latency.py``'s), and the CPU of the side's processes. Subclasses set the direction."""

    direction: str
    #: connectors' names: ``google-<name>``, ``ours-<name>-<mode>``
    name: str
    google_class: str
    ours_class: str
    #: the child-process receiver (``latency.ReceiverProcess``)
    receiver: Any

    def __init__(self, bench: Bench, side: str):
        self.bench, self.side = bench, side
        self.topic = f"{self.name}-{side}"  # the side's Kafka topic, Pub/Sub topic and subscription

    @staticmethod
    def settings(args: argparse.Namespace) -> dict[str, str]:
        """The connector keys every side of the direction runs with."""
        raise NotImplementedError

    @staticmethod
    def rate(args: argparse.Namespace) -> float:
        raise NotImplementedError

    def topic_keys(self) -> dict[str, str]:
        """The side's connector keys naming its input and output."""
        raise NotImplementedError

    def send_one(self) -> None:
        """The warm-up message, unstamped, sent and acknowledged."""
        raise NotImplementedError

    def send_at_rate(self) -> tuple[int, float]:
        """The stamped messages at the rate; how many, and the sender's CPU seconds spent in this
        process (to leave out of ours)."""
        raise NotImplementedError

    def close(self) -> None:
        pass

    def measure(self, cpu: Cpu, failed: Callable[[], None]) -> dict[str, Any]:
        """Warm up with one message, then send at the rate and wait until all arrived; the
        latency figures and CPU seconds per message (``failed`` raises when the side stopped)."""
        from latency import latency_figures

        try:
            self.send_one()
            deadline = time.monotonic() + 300
            while not self.receiver.first.wait(0.5):
                failed()
                if time.monotonic() > deadline:
                    raise ServiceError(f"{self.side}: the warm-up message did not arrive within 300 s")
            cpu.start()
            total, sender_cpu = self.send_at_rate()
            deadline = time.monotonic() + 600
            while self.receiver.count() < total and time.monotonic() < deadline:
                failed()
                time.sleep(0.2)
            cpu.stop()
        finally:
            self.close()
        cpu_s = cpu.seconds - (sender_cpu if cpu.include_self else 0.0)
        figures = latency_figures(self.receiver.close())
        return {**figures, "produced": total, "cpu_s": cpu_s, "cpu_ms_per_msg": 1000 * cpu_s / total}


class SinkLatencyRun(LatencyRun):
    """Kafka → Pub/Sub: records produced into the side's Kafka topic (a thread of this process,
    whose CPU is left out of ours), received by a streaming-pull subscriber."""

    direction, name, google_class, ours_class = "sink", "latency", SINK_CONNECTOR_CLASS, "cps-sink"

    def __init__(self, bench: Bench, side: str):
        from latency import Receiver, ReceiverProcess, producer

        super().__init__(bench, side)
        create_kafka_topic(bench.bootstrap, self.topic, PARTITIONS)
        pubsub_topic = bench.publisher.topic_path(PROJECT, self.topic)
        bench.publisher.create_topic(request={"name": pubsub_topic})
        self.receiver = ReceiverProcess(Receiver, bench.create_subscription(pubsub_topic, self.topic))
        self.producer = producer(bench.bootstrap)

    @staticmethod
    def settings(args: argparse.Namespace) -> dict[str, str]:
        return {**sink_settings(args), "headers.publish": "true"}

    @staticmethod
    def rate(args: argparse.Namespace) -> float:
        return float(args.rate)

    def topic_keys(self) -> dict[str, str]:
        return {"topics": self.topic, "cps.topic": self.topic}

    def send_one(self) -> None:
        self.producer.produce(self.topic, b"warm-up")
        self.producer.flush(30)

    def send_at_rate(self) -> tuple[int, float]:
        from latency import produce_at_rate

        produced: list[int] = []
        producer_cpu: list[float] = []

        def produce() -> None:
            started = time.thread_time()
            produced.append(produce_at_rate(self.producer, self.topic, self.rate(self.bench.args),
                                            self.bench.args.seconds))
            producer_cpu.append(time.thread_time() - started)

        thread = threading.Thread(target=produce, name="stamped-producer")
        thread.start()
        thread.join()
        return produced[0], producer_cpu[0]


class SourceLatencyRun(LatencyRun):
    """Pub/Sub → Kafka: messages published to the side's Pub/Sub topic by a child process (none
    of its CPU is this process's), received by a ``read_committed`` Kafka consumer."""

    direction, name, google_class, ours_class = "source", "source-latency", SOURCE_CONNECTOR_CLASS, "cps-source"

    def __init__(self, bench: Bench, side: str):
        from latency import KafkaReceiver, PublisherProcess, ReceiverProcess

        super().__init__(bench, side)
        create_kafka_topic(bench.bootstrap, self.topic, PARTITIONS)
        self.pubsub_topic = bench.publisher.topic_path(PROJECT, self.topic)
        bench.publisher.create_topic(request={"name": self.pubsub_topic})
        bench.create_subscription(self.pubsub_topic, self.topic)
        self.receiver = ReceiverProcess(KafkaReceiver, bench.bootstrap, self.topic)
        self.publisher = PublisherProcess()

    @staticmethod
    def settings(args: argparse.Namespace) -> dict[str, str]:
        return source_settings(args)

    @staticmethod
    def rate(args: argparse.Namespace) -> float:
        return float(args.source_rate)

    def topic_keys(self) -> dict[str, str]:
        return {"cps.subscription": self.topic, "kafka.topic": self.topic}

    def send_one(self) -> None:
        self.publisher.publish(self.pubsub_topic, b"warm-up")

    def send_at_rate(self) -> tuple[int, float]:
        return self.publisher.publish_at_rate(self.pubsub_topic, self.rate(self.bench.args),
                                              self.bench.args.seconds), 0.0

    def close(self) -> None:
        self.publisher.close()


def latency_comparison(bench: Bench, run_type: type[LatencyRun]) -> dict[str, Any]:
    """The three sides of a latency comparison (Google's, ours staged, ours fused) in
    ``run_type``'s direction, one after the other on the same machine."""
    from _streaming import StagesThread

    from pubsub_connect.pipelines.runtime import connector_stages

    args = bench.args
    settings = run_type.settings(args)
    results: dict[str, Any] = {"rate": run_type.rate(args), "seconds": args.seconds, "settings": settings}
    run = run_type(bench, "google")
    name = f"google-{run.name}"
    with bench.worker.running(name, run.google_class, {**settings, **run.topic_keys()}):
        results["google"] = run.measure(Cpu(bench.worker.pid, include_self=False),
                                        lambda: bench.worker.raise_if_failed(name))
    for mode in ("staged", "fused"):
        run = run_type(bench, mode)
        config = cfg.load_raw({**settings, "name": f"ours-{run.name}-{mode}", "connector.class": run.ours_class,
                               **run.topic_keys(), "cps.useEmulator": "true", "pipeline.mode": mode},
                              bench.worker_settings(100_000))
        bench.context(config)  # the one Spark session
        assert bench.ctx is not None
        ctx = PipelineContext(bench.ctx.spark, config.worker, bench.ctx.caps, bench.ctx.store, once=False,
                              progress=lambda _line: None)
        connector = config.connectors[0]
        running = StagesThread(ctx, connector, connector_stages(connector))
        try:
            def failed(running: Any = running, mode: str = mode) -> None:
                if not running.running():
                    running.stop()
                    raise ServiceError(f"ours ({mode}) stopped")

            results[mode] = run.measure(Cpu(bench.spark_pid, include_self=True), failed)
        finally:
            running.stop()
    return results


LATENCY_RUNS: tuple[type[LatencyRun], ...] = (SinkLatencyRun, SourceLatencyRun)


def latency_rows(direction: str, result: dict[str, Any]) -> list[tuple[str, str]]:
    google = result["google"]
    sent = "produced" if direction == "sink" else "published"
    rows = [(f"[{direction} latency] {sent}", f"{result['rate']:g} msg/s for {result['seconds']:g} s per side, "
                                              f"tasks.max={result['settings']['tasks.max']}"),
            ("  1-min load average at start", f"{result['load_average_before'][0]:.1f}")]
    for side, label in (("google", "Google's connector"), ("staged", "ours, pipeline.mode=staged"),
                        ("fused", "ours, pipeline.mode=fused")):
        figures = result[side]
        rows += [
            (label, f"p50 {figures['p50_ms']:,.0f} / p90 {figures['p90_ms']:,.0f} / p99 {figures['p99_ms']:,.0f} / "
                    f"max {figures['max_ms']:,.0f} ms; {figures['received']:,} of {figures['produced']:,} received"),
            ("  p50 first / last third; p99 last third",
             f"{figures['p50_first_third_ms']:,.0f} / {figures['p50_last_third_ms']:,.0f} ms; "
             f"{figures['p99_last_third_ms']:,.0f} ms"),
            ("  CPU per message", f"{figures['cpu_ms_per_msg']:.2f} ms ({figures['cpu_s']:,.1f} s)"),
        ]
        if side != "google":
            rows.append(("  ratio ours/Google's", f"p50 {figures['p50_ms'] / google['p50_ms']:.2f}, p99 "
                                                  f"{figures['p99_ms'] / google['p99_ms']:.2f}, CPU per message "
                                                  f"{figures['cpu_ms_per_msg'] / google['cpu_ms_per_msg']:.2f}"))
    return rows


def rows_for(direction: str, result: dict[str, Any]) -> list[tuple[str, str]]:
    """The table of a throughput comparison: Google's side, then each of ours in ``result``
    (:data:`OURS_SIDES`). Adds the rates and ratios to ``result``: ``<side>_msgs_per_s``,
    ``ratio`` / ``ratio_per_cpu_s`` for ``ours`` and ``ratio_<mode>`` / ``ratio_per_cpu_s_<mode>``
    for the others."""
    n, google = result["records"], result["google"]
    google_rate = n / google["seconds"]
    result["google_msgs_per_s"] = google_rate
    rows = [
        (f"[{direction}] messages x size", f"{n:,} x {result['size']} B, tasks.max={result['settings']['tasks.max']}"),
        ("  1-min load average at start", f"{result['load_average_before'][0]:.1f}"),
        ("Google's connector", f"{google_rate:,.0f} msg/s ({google['seconds']:,.1f} s, of which created → RUNNING "
                               f"{google['to_running_s']:,.1f} s; {google['duplicates']:,} duplicates)"),
        ("  CPU (Connect JVM)", f"{google['cpu_s']:,.1f} s, {n / google['cpu_s']:,.0f} msg per CPU-s"),
        ("  loopback fronts (this process)", f"{google['fronts_cpu_s']:,.1f} s CPU"),
    ]
    for side, (mode, label) in OURS_SIDES.items():
        if side not in result:
            continue
        ours = result[side]
        ours_rate = n / ours["seconds"]
        suffix = "" if side == "ours" else f"_{mode}"
        per_cpu_s = (n / ours["cpu_s"]) / (n / google["cpu_s"]) if ours["cpu_s"] else 0.0
        result.update({f"{side}_msgs_per_s": ours_rate, f"ratio{suffix}": ours_rate / google_rate,
                       f"ratio_per_cpu_s{suffix}": per_cpu_s})
        rows += [
            (f"{label} end-to-end",
             f"{ours_rate:,.0f} msg/s ({ours['seconds']:,.1f} s; {ours['duplicates']:,} duplicates)"),
            *[(f"  stage {name}", f"{secs:,.1f} s, {n / secs:,.0f} msg/s")
              for name, secs in ours["stage_seconds"].items()],
            *([("  deliveries pulled", f"{ours['pulled']:,} for {n:,} messages")] if "pulled" in ours else []),
            ("  CPU (Spark JVM + workers + driver)", f"{ours['cpu_s']:,.1f} s, {n / ours['cpu_s']:,.0f} msg per CPU-s"),
            (f"ratio {label}/Google's",
             f"{result[f'ratio{suffix}']:.2f} (per CPU-second: {result[f'ratio_per_cpu_s{suffix}']:.2f})"),
        ]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=50_000, help="sink records")
    parser.add_argument("--source-records", type=int, default=20_000,
                        help="source messages (the emulator's streaming pull is slow: see cps_source.py)")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--direction", choices=("both", "sink", "source"), default="both")
    parser.add_argument("--measure", choices=("both", "throughput", "latency"), default="both",
                        help="throughput (a backlog, --once), latency (the connectors running continuously), or both")
    parser.add_argument("--rate", type=float, default=1000.0, help="sink latency: records produced per second")
    parser.add_argument("--source-rate", type=float, default=500.0,
                        help="source latency: messages published per second")
    parser.add_argument("--seconds", type=float, default=60.0, help="latency: how long to produce / publish")
    parser.add_argument("--tasks", type=int, default=2, help="the sinks' tasks.max")
    parser.add_argument("--source-tasks", type=int, default=1, help="the sources' tasks.max")
    parser.add_argument("--max-buffer-size", type=int, default=100, help="maxBufferSize (both sinks)")
    parser.add_argument("--max-buffer-bytes", type=int, default=9_500_000, help="maxBufferBytes (both sinks)")
    parser.add_argument("--max-delay-ms", type=int, default=100, help="maxDelayThresholdMs (both sinks)")
    parser.add_argument("--max-outstanding-messages", type=int, default=2**63 - 1,
                        help="maxOutstandingMessages (both sinks)")
    parser.add_argument("--max-outstanding-bytes", type=int, default=2**63 - 1,
                        help="maxOutstandingRequestBytes (both sinks)")
    add_engine_argument(parser)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-vs-google-"))
    results: dict[str, Any] = {"engine": args.engine, "reference": f"Google's connector {GOOGLE_CONNECTOR_VERSION} "
                               f"in Kafka Connect {CONNECT_VERSION} standalone"}
    rows: list[tuple[str, str]] = []
    with LocalServices(root / "services", ("kafka", "pubsub")) as services:
        bootstrap = services.running["kafka"].endpoint
        emulator = services.running["pubsub"].endpoint
        tls = make_server_tls(root / "google-api-tls", FRONT_DNS_NAMES, FRONT_IP_ADDRESSES)
        with environment({"PUBSUB_EMULATOR_HOST": emulator}), GoogleApiFronts(emulator, tls) as fronts:
            credentials = write_fake_service_account(root / "google-connect" / "service-account.json",
                                                     fronts.token_uri, PROJECT)
            started = time.perf_counter()
            with ConnectStandalone(root / "google-connect", bootstrap, fronts, credentials) as worker:
                connect_s = time.perf_counter() - started
                bench = Bench(args, root, bootstrap, worker, fronts)
                try:
                    for run_type in LATENCY_RUNS:
                        if args.measure in ("latency", "both") and args.direction in (run_type.direction, "both"):
                            load = os.getloadavg()
                            key = f"{run_type.direction}_latency"
                            results[key] = {**latency_comparison(bench, run_type), "load_average_before": load}
                            latency_table = latency_rows(run_type.direction, results[key])
                            rows += latency_table
                            print(table(latency_table) + "\n", flush=True)
                    for direction in ("sink", "source"):
                        if args.measure in ("throughput", "both") and args.direction in (direction, "both"):
                            load = os.getloadavg()  # figures are only comparable at a similar load
                            results[direction] = {**getattr(bench, direction)(), "load_average_before": load}
                            direction_rows = rows_for(direction, results[direction])
                            rows += direction_rows
                            # as soon as it is known: the other direction may take long or fail
                            print(table(direction_rows) + "\n", flush=True)
                finally:
                    if bench.ctx is not None:
                        bench.ctx.spark.stop()
            if fronts.activity.refused:
                raise ServiceError(f"the reference tried to reach other hosts: {fronts.activity.refused}")
    rows += [("engine (ours)", args.engine),
             ("reference", results["reference"]),
             ("excluded: Connect worker start", f"{connect_s:,.1f} s"),
             ("excluded: Spark session start", f"{bench.session_s:,.1f} s")]
    print(table(rows))
    path = write_results(results_name("vs_google", args.engine), results)
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
