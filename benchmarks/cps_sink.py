"""Cloud Pub/Sub sink throughput: end-to-end messages/s vs. the bare clients, in one run.

    .venv/bin/python benchmarks/cps_sink.py [--mode once|continuous] [--records 100000] [--size 1024]

Starts a local Kafka broker and Google's Pub/Sub emulator, produces N records of SIZE bytes,
then measures, on the same services: (1) a bare confluent-kafka consumer reading them, (2) the
official publisher alone publishing N messages, (3) the connector (ingest → convert → publish,
Spark session already up). The ratio compares (3) with the slower of (1) and (2), which bounds
what any Kafka → Pub/Sub mover can reach here.

``--mode once`` (the default) runs the stages one after the other to completion, as
``pubsub-connect run --once`` does, with the whole backlog in one micro-batch per stage: the
best case for throughput. ``--mode continuous`` runs them together, as ``pubsub-connect run``
does, with the product's default batch size and trigger interval: what a deployed connector
draining a backlog of N records reaches. The three stages then overlap but share the cores, and
a backlog larger than ``pipeline.max.records.per.batch`` is taken in several micro-batches.
The rates come from the publish stage's progress events (a publish micro-batch completes only
when Pub/Sub accepted all its messages): the total time from starting the stages until all N
were published, and the steady-state rate between 10% and 90% of N (without start-up and tail),
which the ratio uses in this mode. A streaming-pull subscriber proves that every record arrived
once; its arrival times are not the rate, since the emulator delivers to subscribers at about
2,000 msg/s, slower than the sink publishes.

Both modes report the peak resident memory of the driver's Python process, of Spark's JVM and
of the Python workers (:class:`_common.PeakRss`), because Spark's memory is mostly outside this
process and a connector that keeps up but needs more memory than the cluster has is no good.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _common import (
    ENGINES,
    PeakRss,
    StreamingSubscriber,
    add_engine_argument,
    bare_consume,
    bare_publish,
    create_pubsub_topic,
    in_child_process,
    produce,
    quiet_context,
    results_name,
    table,
    timed_stages,
    write_results,
)
from _streaming import run_together, stage_rows

from pubsub_connect.config import loader as cfg
from pubsub_connect.io.services.lifecycle import LocalServices, environment
from pubsub_connect.pipelines.cps_sink import STAGES
from pubsub_connect.pipelines.maintenance import maintained_while_running

PROJECT = "bench-project"


class DistinctReceiver(StreamingSubscriber):
    """A streaming-pull subscriber that acks everything and records when each *distinct* message
    first arrived (redeliveries do not count), keyed by the sequence id that
    :func:`_common.payload` puts at the start of each record — and the sink copies into the
    message body."""

    def __init__(self, subscription: str, expected: int):
        from google.cloud import pubsub_v1

        self.expected = expected
        self.seen: set[int] = set()
        #: Monotonic arrival time of each distinct message, in arrival order.
        self.arrivals: list[float] = []
        self.duplicates = 0
        self.done = threading.Event()
        # A larger window than the default 1,000 outstanding messages: the emulator's delivery is
        # slow enough without the subscriber holding it back as well.
        super().__init__(subscription, pubsub_v1.types.FlowControl(max_messages=10_000,
                                                                   max_bytes=200 * 1024 * 1024))

    def on_message(self, message: Any) -> None:
        now = time.monotonic()
        message.ack()
        seq = int(message.data[:12])
        with self.lock:
            if seq in self.seen:
                self.duplicates += 1
                return
            self.seen.add(seq)
            self.arrivals.append(now)
            if len(self.arrivals) >= self.expected:
                self.done.set()

    def count(self) -> int:
        with self.lock:
            return len(self.arrivals)


def run_continuous(ctx: Any, connector: Any, receiver: DistinctReceiver, n: int,
                   timeout_s: float) -> dict[str, Any]:
    """Run the stages together until all ``n`` messages were published and received (or
    ``timeout_s`` passed). The rates come from the publish stage; the receiver proves that every
    record arrived, once."""
    result = run_together(ctx, connector, STAGES, n, timeout_s, receiver.done.is_set, "cps_sink")
    with receiver.lock:
        arrivals = list(receiver.arrivals)
    started = result.pop("started")
    return {**result, "first_s": arrivals[0] - started, "received_s": arrivals[n - 1] - started,
            "duplicates": receiver.duplicates}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("once", "continuous"), default="once",
                        help="once: the stages one after the other (run --once); continuous: together (run)")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--max-records-per-batch", type=int, default=None,
                        help="pipeline.max.records.per.batch (default: N in once mode, the product's default "
                             "in continuous mode)")
    parser.add_argument("--maintain-every", type=float, default=0.0, metavar="SECONDS",
                        help="continuous mode: run maintain (retention with outbox.retention.ms=0, compaction, "
                             "VACUUM) beside the stages this often, as run and the worker do (0: never)")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="continuous mode: seconds to wait for all N messages")
    add_engine_argument(parser)
    args = parser.parse_args()
    n = args.records
    continuous = args.mode == "continuous"
    batch = args.max_records_per_batch or (None if continuous else n)
    root = Path(tempfile.mkdtemp(prefix="bench-cps-sink-"))
    with LocalServices(root / "services", ("kafka", "pubsub")) as services:
        bootstrap = services.running["kafka"].endpoint
        with environment({"PUBSUB_EMULATOR_HOST": services.running["pubsub"].endpoint}):
            produce_s = produce(bootstrap, "bench", n, args.size)
            # in child processes: their memory must not count as the connector driver's
            consume_s = in_child_process(bare_consume, bootstrap, "bench", n)
            publish_s = in_child_process(bare_publish, PROJECT, "bare", n, args.size)
            subscription = create_pubsub_topic(PROJECT, "sink", subscribe=continuous)
            receiver = DistinctReceiver(subscription, n) if subscription else None
            run = cfg.load_raw(
                {"name": "bench", "connector.class": "cps-sink", "topics": "bench", "cps.project": PROJECT,
                 "cps.topic": "sink", "cps.useEmulator": "true", "tasks.max": str(args.tasks),
                 **({"outbox.retention.ms": "0"} if args.maintain_every else {})},
                {"bootstrap.servers": bootstrap, "storage.root": str(root / "data"), **ENGINES[args.engine],
                 **({"pipeline.max.records.per.batch": str(batch)} if batch else {})})
            try:
                with PeakRss() as memory:
                    t0 = time.perf_counter()
                    ctx = quiet_context(run.worker, once=not continuous)
                    session_s = time.perf_counter() - t0
                    try:
                        if receiver is not None:
                            with maintained_while_running(ctx, run.connectors[0], args.maintain_every,
                                                          contextlib.nullcontext):
                                result = run_continuous(ctx, run.connectors[0], receiver, n, args.timeout)
                        else:
                            e2e_s, stage_times = timed_stages(ctx, run.connectors[0], STAGES)
                    finally:
                        ctx.spark.stop()
            finally:
                if receiver is not None:
                    receiver.close()

    rate = {"bare consume": n / consume_s, "bare publish": n / publish_s}
    limit = min(rate["bare consume"], rate["bare publish"])
    mb = n * args.size / 1e6
    peak = memory.peak_mb
    head = [
        ("records x size", f"{n:,} x {args.size} B ({mb:,.0f} MB)"),
        ("produce (setup)", f"{n / produce_s:,.0f} msg/s"),
        ("bare consume (confluent-kafka)", f"{rate['bare consume']:,.0f} msg/s"),
        ("bare publish (official client)", f"{rate['bare publish']:,.0f} msg/s"),
    ]
    memory_rows = [
        ("peak RSS driver (python)", f"{peak['driver_python']:,.0f} MB"),
        ("peak RSS Spark JVM", f"{peak['jvm']:,.0f} MB"),
        ("peak RSS python workers (sum)", f"{peak['python_workers']:,.0f} MB (up to {memory.max_workers} processes)"),
    ]
    results: dict[str, Any] = {"engine": args.engine, "mode": args.mode, "records": n, "size": args.size,
                               "max_records_per_batch": batch, "peak_rss_mb": peak}
    if continuous:
        rate["connector end-to-end"] = n / result["total_s"]
        rate["connector steady state"] = result["steady_msgs_per_s"]
        ratio = rate["connector steady state"] / limit
        rows = [
            *head,
            ("engine / mode", f"{args.engine} / continuous, max records per batch: {batch or 'default'}"
                              + (f", maintain every {args.maintain_every:g} s" if args.maintain_every else "")),
            ("connector end-to-end (published)", f"{rate['connector end-to-end']:,.0f} msg/s, "
                                                 f"{result['total_s']:,.1f} s in {result['publish_batches']} "
                                                 "publish batches"),
            ("connector steady state (10-90%)", f"{rate['connector steady state']:,.0f} msg/s over "
                                                f"{result['steady_span_s']:,.1f} s"),
            ("received by a subscriber", f"all {n:,} distinct, first after {result['first_s']:,.1f} s, last after "
                                         f"{result['received_s']:,.1f} s (the emulator's delivery rate)"),
            *stage_rows(result["stage_batch_ms"]),
            ("redelivered (not counted)", f"{result['duplicates']:,}"),
            ("spark session start (excluded)", f"{session_s:,.1f} s"),
            *memory_rows,
            ("ratio steady state / slower bare", f"{ratio:.2f}"),
        ]
        results.update({"maintain_every_s": args.maintain_every, "rates_msgs_per_s": rate,
                        "total_seconds": result["total_s"],
                        "first_message_seconds": result["first_s"], "steady_span_seconds": result["steady_span_s"],
                        "last_received_seconds": result["received_s"],
                        "duplicates": result["duplicates"], "stage_batch_ms": result["stage_batch_ms"],
                        "ratio": ratio})
        name = results_name("cps_sink-continuous", args.engine)
    else:
        rate["connector end-to-end"] = n / e2e_s
        ratio = rate["connector end-to-end"] / limit
        rows = [
            *head,
            ("connector end-to-end", f"{rate['connector end-to-end']:,.0f} msg/s, {mb / e2e_s:,.1f} MB/s"),
            ("engine", args.engine),
            *[(f"  stage {name}", f"{secs:,.1f} s, {n / secs:,.0f} msg/s") for name, secs in stage_times.items()],
            ("spark session start (excluded)", f"{session_s:,.1f} s"),
            *memory_rows,
            ("ratio to the slower bare client", f"{ratio:.2f}"),
        ]
        results.update({"rates_msgs_per_s": rate, "stage_seconds": stage_times, "ratio": ratio})
        name = results_name("cps_sink", args.engine)
    print(table(rows))
    path = write_results(name, results)
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
