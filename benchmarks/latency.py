"""End-to-end latency (Kafka produce → Pub/Sub receive) in continuous mode, and cold start.

    .venv/bin/python benchmarks/latency.py [--rate 50] [--seconds 30] [--mode staged|fused] [--trigger-ms MS]
                                           [--skip-cold-start] [--spark KEY=VALUE ...]

Starts a local Kafka broker and Google's Pub/Sub emulator, then measures:

1. **Cold start**: seconds from launching ``pubsub-connect run --worker … sink.properties``
   (a subprocess, continuous mode, one record already waiting in Kafka) until a streaming-pull
   subscriber receives that record — what a user waits for after typing the command: Python
   imports, Spark start-up, three streaming queries, first micro-batches, the publish. The
   subprocess is then stopped with SIGTERM (a clean stop; a micro-batch cut short runs again on restart).
2. **Latency**: the sink running continuously in this process (``run_stages`` with
   ``once=False`` in a thread, stopped by an event), records produced at a fixed modest rate
   for a fixed time with the produce wall-clock time in a header (``headers.publish=true``
   turns it into an attribute); each message's latency is its receive time minus that stamp
   (same machine, same clock). Before timing, one record is sent through to warm everything up.
   Reported: p50, p90, p99 and max in milliseconds, and how many arrived. The subscriber runs in
   a child process of its own (``--receiver child``, the default): in this process its callbacks
   (a thousand a second) would take the interpreter lock from the sink's driver, whose every
   micro-batch makes many Py4J calls, and a user's subscriber does not share the connector's
   process. ``--receiver in-process`` measures the old way, for comparison.

In the staged mode the latency floor is the trigger interval (``pipeline.trigger.interval.ms``,
default 1000 ms) times the three chained stages (ingest → convert → publish, each a micro-batch
over Delta). ``--mode fused`` runs the one fused query (``pipeline.mode=fused``), whose trigger
interval is 0 unless ``--trigger-ms`` sets one.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import StreamingSubscriber, create_kafka_topic, create_pubsub_topic, quiet_context, table, write_results
from _streaming import StagesThread, stage_batch_times, stage_rows

from pubsub_connect.config import loader as cfg
from pubsub_connect.io.services.lifecycle import LocalServices, environment

PROJECT = "bench-project"
STAMP = "produced_ns"


class Latencies:
    """What a latency receiver records: each stamped message's latency (its receive time minus
    its :data:`STAMP`, same machine, same clock) and the first arrival, stamped or not (the
    warm-up's). Subclasses differ only in how they receive; they call :meth:`arrived`."""

    def __init__(self, *args: Any) -> None:
        self.lock = threading.Lock()
        self.latencies_ms: list[float] = []
        #: (produce stamp, latency) pairs, to see whether latency grows during the run (backlog).
        self.samples: list[tuple[int, float]] = []
        self.first_at: float | None = None
        self.first = threading.Event()
        super().__init__(*args)

    def arrived(self, stamp: str | bytes | None, now_ns: int, now: float) -> None:
        """One message received at ``now_ns`` (wall clock) / ``now`` (monotonic)."""
        with self.lock:
            if self.first_at is None:
                self.first_at = now
                self.first.set()
            if stamp is not None:
                latency_ms = (now_ns - int(stamp)) / 1e6
                self.latencies_ms.append(latency_ms)
                self.samples.append((int(stamp), latency_ms))

    def count(self) -> int:
        with self.lock:
            return len(self.latencies_ms)

    def close(self) -> None:
        raise NotImplementedError


class Receiver(Latencies, StreamingSubscriber):
    """A streaming-pull subscriber recording each message's latency (the stamp: an attribute)."""

    def on_message(self, message: Any) -> None:
        now_ns, now = time.time_ns(), time.monotonic()
        message.ack()
        self.arrived(message.attributes.get(STAMP), now_ns, now)

    def close(self) -> None:
        StreamingSubscriber.close(self)


class KafkaReceiver(Latencies):
    """A Kafka consumer (a group of its own, from the earliest offset, ``read_committed``: what a
    reader of an exactly-once source sees) recording each record's latency (the stamp: a header),
    polling in a thread of its own. One record per poll: a batch call would wait to fill its batch."""

    def __init__(self, bootstrap: str, topic: str):
        from confluent_kafka import Consumer

        super().__init__()
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"latency-{topic}-{time.time_ns()}",
                                   "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                                   "enable.auto.commit": False})
        self._consumer.subscribe([topic])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="latency-consumer", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            message = self._consumer.poll(0.1)
            if message is None:
                continue
            now_ns, now = time.time_ns(), time.monotonic()
            if message.error() is None:
                self.arrived(dict(message.headers() or ()).get(STAMP), now_ns, now)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self._consumer.close()


#: How often a receiver in a child process tells the parent its count and first arrival.
SHARE_EVERY_S = 0.05


def _receive_until_stopped(receiver_type: type[Latencies], args: tuple[Any, ...], first: Any, count: Any,
                           stop: Any, results: Any) -> None:
    """The child process's body: receive until ``stop`` is set, telling the parent of the first
    arrival and of the count through shared memory; then send the (stamp, latency) pairs."""
    receiver = receiver_type(*args)
    try:
        while not stop.wait(SHARE_EVERY_S):
            count.value = receiver.count()
            if receiver.first.is_set() and not first.is_set():
                first.set()
    finally:
        receiver.close()
        with receiver.lock:
            results.send(list(receiver.samples))
        results.close()


class ReceiverProcess:
    """A latency receiver (``receiver_type(*args)``: a :class:`Receiver` of a subscription, a
    :class:`KafkaReceiver` of a topic) in a spawned child process, with the parent's side of its
    interface: ``first``, :meth:`count`, and the samples from :meth:`close`."""

    def __init__(self, receiver_type: type[Latencies], *args: Any):
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self.first = context.Event()
        self._count = context.Value("q", 0)
        self._stop = context.Event()
        self._results, child_end = context.Pipe(duplex=False)
        self._process = context.Process(target=_receive_until_stopped, name="latency-receiver", daemon=True,
                                        args=(receiver_type, args, self.first, self._count, self._stop, child_end))
        self._process.start()
        child_end.close()

    def count(self) -> int:
        return int(self._count.value)

    def close(self) -> list[tuple[int, float]]:
        """Stop the child and return its (produce stamp, latency ms) pairs; the child is gone after."""
        self._stop.set()
        try:
            if not self._results.poll(60):
                raise RuntimeError("the receiver process sent no samples within 60 s")
            try:
                return self._results.recv()
            except EOFError:
                self._process.join(30)
                raise RuntimeError(f"the receiver process ended (exit code {self._process.exitcode}) without "
                                   "sending its samples; its error is above") from None
        finally:
            self._process.join(30)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()


def create_topic_and_subscription(name: str) -> str:
    subscription = create_pubsub_topic(PROJECT, name)
    assert subscription is not None
    return subscription


def worker_setting(item: str) -> tuple[str, str]:
    """``KEY=VALUE`` of ``--spark`` as a pair; anything else is refused in one line by argparse."""
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {item!r}")
    return key, value


def sink_keys(name: str) -> dict[str, str]:
    return {"name": name, "connector.class": "cps-sink", "topics": name, "cps.project": PROJECT, "cps.topic": name,
            "cps.useEmulator": "true", "tasks.max": "2", "headers.publish": "true"}


def producer(bootstrap: str) -> Any:
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": True})


def at_rate(rate: float, seconds: float, send: Callable[[int], None]) -> int:
    """``send(seq)`` for ``rate * seconds`` sequence numbers at a fixed rate; returns how many."""
    total = int(rate * seconds)
    interval = 1.0 / rate
    next_at = time.monotonic()
    for seq in range(total):
        next_at += interval
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        send(seq)
    return total


def produce_at_rate(p: Any, topic: str, rate: float, seconds: float) -> int:
    """``rate * seconds`` records to ``topic`` at a fixed rate, each stamped with its produce time
    (header :data:`STAMP`, nanoseconds); returns how many."""

    def send(seq: int) -> None:
        p.produce(topic, b"%012d" % seq, headers=[(STAMP, str(time.time_ns()).encode())])
        p.poll(0)

    total = at_rate(rate, seconds, send)
    p.flush(30)
    return total


@functools.cache
def _publisher_client() -> Any:
    """The publisher of this (child) process: one client, its channel open after the warm-up."""
    from google.cloud import pubsub_v1

    return pubsub_v1.PublisherClient()


def publish(topic: str, data: bytes) -> None:
    """One unstamped message to the Pub/Sub ``topic`` (a path), waited for: the warm-up."""
    _publisher_client().publish(topic, data).result(120)


def publish_at_rate(topic: str, rate: float, seconds: float) -> int:
    """``rate * seconds`` messages to the Pub/Sub ``topic`` (a path) at a fixed rate, each stamped
    with its publish time (attribute :data:`STAMP`, nanoseconds), with the client's default
    batching (up to 10 ms); returns how many once all were accepted."""
    client = _publisher_client()
    futures: list[Any] = []
    total = at_rate(rate, seconds, lambda seq: futures.append(
        client.publish(topic, b"%012d" % seq, **{STAMP: str(time.time_ns())})))
    for future in futures:
        future.result(300)
    return total


class PublisherProcess:
    """:func:`publish` and :func:`publish_at_rate` in a spawned child process of its own: the
    Pub/Sub client spends most of its CPU outside the calling thread (its batch threads, gRPC's),
    so a publisher thread's CPU could not be told apart from the process it runs in, and its
    Python would compete for that process's interpreter lock."""

    def __init__(self) -> None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))

    def publish(self, topic: str, data: bytes) -> None:
        self._pool.submit(publish, topic, data).result(300)

    def publish_at_rate(self, topic: str, rate: float, seconds: float) -> int:
        return self._pool.submit(publish_at_rate, topic, rate, seconds).result()

    def close(self) -> None:
        self._pool.shutdown()


def latency_figures(samples: list[tuple[int, float]]) -> dict[str, float]:
    """p50/p90/p99/max/mean of (produce stamp, latency ms) pairs, and whether it held steady: the
    median of the first and of the last third produced, and the last third's p99."""
    got = sorted(lat for _, lat in samples)
    if not got:
        raise RuntimeError("no message arrived")

    def pct(values: list[float], q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))]

    by_stamp = [lat for _, lat in sorted(samples)]
    third = max(1, len(by_stamp) // 3)
    last_third = sorted(by_stamp[-third:])
    return {"received": len(got), "p50_ms": pct(got, 0.50), "p90_ms": pct(got, 0.90), "p99_ms": pct(got, 0.99),
            "max_ms": got[-1], "mean_ms": statistics.fmean(got),
            "p50_first_third_ms": statistics.median(by_stamp[:third]),
            "p50_last_third_ms": statistics.median(last_third), "p99_last_third_ms": pct(last_third, 0.99)}


def cold_start(bootstrap: str, workdir: Path, timeout_s: float) -> float:
    """Seconds from launching ``pubsub-connect run`` to the first message received."""
    name = "cold"
    create_kafka_topic(bootstrap, name, 1)
    receiver = Receiver(create_topic_and_subscription(name))
    p = producer(bootstrap)
    p.produce(name, b"cold start", headers=[(STAMP, str(time.time_ns()).encode())])
    p.flush(30)
    (workdir / "worker.properties").write_text(
        f"bootstrap.servers={bootstrap}\nstorage.root={workdir / 'storage'}\nspark.master=local[2]\n")
    (workdir / "sink.properties").write_text("".join(f"{k}={v}\n" for k, v in sink_keys(name).items()))
    log_path = workdir / "cold-start.log"
    with open(log_path, "w") as log:
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "pubsub_connect.cli", "run", "--worker", "worker.properties",
                                 "sink.properties"], cwd=workdir, stdout=log, stderr=subprocess.STDOUT,
                                env=dict(os.environ), start_new_session=True)
        try:
            while not receiver.first.wait(0.5):
                if proc.poll() is not None:
                    raise RuntimeError(f"pubsub-connect run exited with {proc.returncode}; see {log_path}")
                if time.monotonic() - started > timeout_s:
                    raise RuntimeError(f"no message within {timeout_s:.0f} s; see {log_path}")
            assert receiver.first_at is not None
            return receiver.first_at - started
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:  # its own process group: the JVM child goes too
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
            receiver.close()


def latency(bootstrap: str, workdir: Path, rate: float, seconds: float, trigger_ms: int | None,
            drain_timeout_s: float, spark_conf: dict[str, str] | None = None,
            receiver_in_process: bool = False, mode: str = "staged") -> dict[str, Any]:
    """Latencies of ``rate * seconds`` records through the continuously running sink."""
    from pubsub_connect.pipelines.runtime import connector_stages

    name = "latency"
    create_kafka_topic(bootstrap, name, 1)
    subscription = create_topic_and_subscription(name)
    receiver: Receiver | ReceiverProcess = (
        Receiver(subscription) if receiver_in_process else ReceiverProcess(Receiver, subscription))
    samples: list[tuple[int, float]] = []
    trigger = {} if trigger_ms is None else {"pipeline.trigger.interval.ms": str(trigger_ms)}
    worker = cfg.validate_worker({"bootstrap.servers": bootstrap, "storage.root": str(workdir / "storage"),
                                  "spark.master": "local[2]", "pipeline.mode": mode, **trigger, **(spark_conf or {})})
    connector = cfg.validate_connector(sink_keys(name), f"<{name}>", worker=worker)
    ctx = quiet_context(worker, once=False)
    running = StagesThread(ctx, connector, connector_stages(connector))
    p = producer(bootstrap)
    try:
        # Warm-up: one record all the way through before timing.
        p.produce(name, b"warm-up")
        p.flush(30)
        if not receiver.first.wait(300) or running.errors:
            raise RuntimeError(f"warm-up record not received: {running.errors[:1]}")
        total = produce_at_rate(p, name, rate, seconds)
        deadline = time.monotonic() + drain_timeout_s
        while receiver.count() < total and time.monotonic() < deadline and running.running():
            time.sleep(0.2)
        stages = stage_batch_times(ctx)
        running.stop()
        ingest_ms = ingest_latencies(ctx, name)
    finally:
        try:
            running.stop()
        finally:
            if isinstance(receiver, ReceiverProcess):
                samples = receiver.close()
            else:
                receiver.close()
                samples = list(receiver.samples)
            ctx.spark.stop()
    # Steady state or a growing backlog? Median latency of the first and the last third produced;
    # and the last third's p99: the tail once the JIT has compiled the stages' paths.
    figures = latency_figures(samples)

    def pct(values: list[float], q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))] if values else 0.0

    return {"produced": total, **figures,
            "ingest_p50_ms": pct(ingest_ms, 0.50), "ingest_p99_ms": pct(ingest_ms, 0.99),
            "stage_batch_ms": stages, "rate": rate, "seconds": seconds, "mode": mode,
            "trigger_ms": effective_trigger_ms(worker, mode),
            "receiver": "in-process" if receiver_in_process else "child"}


def effective_trigger_ms(worker: cfg.WorkerConfig, mode: str) -> int:
    """The trigger interval the sink ran with: the worker's, or the fused query's default when unset."""
    from pubsub_connect.pipelines.fused_sink import DEFAULT_TRIGGER_MS

    setting = worker.settings["pipeline.trigger.interval.ms"]
    return DEFAULT_TRIGGER_MS if mode == "fused" and setting.origin == "default" else int(setting.value)


def ingest_latencies(ctx: Any, name: str) -> list[float]:
    """Kafka timestamp → bronze ``ingest_time`` per record, sorted. ``ingest_time`` is
    ``current_timestamp()`` of the ingest micro-batch, i.e. when that batch started: this is the
    wait for an ingest trigger, not the ingest batch's own duration."""
    from pyspark.sql import functions as F

    from pubsub_connect.io.tables import TableRef

    rows = (ctx.store.read(TableRef("bronze", name)).filter(F.col("headers").isNotNull())
            .select((F.unix_millis("ingest_time") - F.unix_millis("timestamp")).alias("ms")).collect())
    return sorted(float(row.ms) for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=50.0, help="records per second")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long to produce")
    parser.add_argument("--mode", choices=("staged", "fused"), default="staged", help="pipeline.mode")
    parser.add_argument("--trigger-ms", type=int, default=None,
                        help="pipeline.trigger.interval.ms (default: the mode's, 1000 staged, 0 fused)")
    parser.add_argument("--skip-cold-start", action="store_true")
    parser.add_argument("--timeout", type=float, default=300.0, help="cold start / drain timeout, seconds")
    parser.add_argument("--receiver", choices=("child", "in-process"), default="child",
                        help="where the latency subscriber runs: a child process of its own, or this one")
    parser.add_argument("--spark", action="append", default=[], metavar="KEY=VALUE", type=worker_setting,
                        help="a worker setting for the latency run (e.g. spark.master=local[4]); repeatable")
    args = parser.parse_args()
    spark_conf = dict(args.spark)
    root = Path(tempfile.mkdtemp(prefix="bench-latency-"))
    results: dict[str, Any] = {}
    with LocalServices(root / "services", ("kafka", "pubsub")) as services:
        bootstrap = services.running["kafka"].endpoint
        with environment({"PUBSUB_EMULATOR_HOST": services.running["pubsub"].endpoint}):
            if not args.skip_cold_start:
                (root / "cold").mkdir()
                results["cold_start_s"] = cold_start(bootstrap, root / "cold", args.timeout)
                print(f"cold start: {results['cold_start_s']:.1f} s", flush=True)
            (root / "latency").mkdir()
            results["latency"] = latency(bootstrap, root / "latency", args.rate, args.seconds, args.trigger_ms,
                                         args.timeout, spark_conf, args.receiver == "in-process", args.mode)
    lat = results["latency"]
    rows = [
        ("produced at", f"{lat['rate']:g} msg/s for {lat['seconds']:g} s, pipeline.mode={lat['mode']}, "
                        f"trigger {lat['trigger_ms']} ms"),
        ("received", f"{lat['received']:,} of {lat['produced']:,} (subscriber: {lat['receiver']})"),
        ("latency p50 / p90 / p99", f"{lat['p50_ms']:,.0f} / {lat['p90_ms']:,.0f} / {lat['p99_ms']:,.0f} ms"),
        ("latency max / mean", f"{lat['max_ms']:,.0f} / {lat['mean_ms']:,.0f} ms"),
        ("  Kafka → start of its ingest batch", f"p50 {lat['ingest_p50_ms']:,.0f} / p99 {lat['ingest_p99_ms']:,.0f} "
                                                 "ms (bronze ingest_time: the wait for a trigger)"),
        *stage_rows(lat["stage_batch_ms"]),
        ("p50 first / last third produced", f"{lat['p50_first_third_ms']:,.0f} / {lat['p50_last_third_ms']:,.0f} ms"
                                            " (growing = the sink falls behind)"),
        ("p99 of the last third produced", f"{lat['p99_last_third_ms']:,.0f} ms"),
    ]
    if "cold_start_s" in results:
        rows.append(("cold start (run → first message)", f"{results['cold_start_s']:.1f} s"))
    print(table(rows))
    path = write_results("latency", results)
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
