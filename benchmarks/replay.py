"""Replay from bronze against the stage that sends, on the same records.

    .venv/bin/python benchmarks/replay.py [--connector cps_sink|cps_source] [--records 1000000] [--size 1024]
                                          [--batch-size 100000]

Starts a local Kafka broker and Google's Pub/Sub emulator, produces N records of SIZE bytes and
runs a Cloud Pub/Sub sink's stages one after the other (``run --once``: one micro-batch per stage),
timing its publish stage, which publishes the N converted rows of the outbox. Then
``pubsub-connect replay`` (the same function) publishes the same N records from bronze to another
topic: it converts them again with the connector's data model and publishes them, chunk by chunk.
The ratio is the replay's rate over the publish stage's (the goal: at least 0.8). Both topics
have no subscription, so the emulator accepts and drops the messages, as in the other benchmarks.

``--connector cps_source``: a Cloud Pub/Sub source's bronze of N messages (written straight into
the table, as its pull stage lands them: the emulator's pull rate is not what is measured) goes
through its convert and produce stages (``--once``), timing produce, which writes the N converted
records to Kafka in one transaction; then the replay produces the same N messages from bronze to
another Kafka topic, converting them again, one transaction per chunk. The ratio is the replay's
rate over the produce stage's.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import (
    ENGINES,
    create_kafka_topic,
    create_pubsub_topic,
    produce,
    quiet_context,
    results_name,
    table,
    timed_stages,
    write_results,
)

from pubsub_connect.config import loader as cfg
from pubsub_connect.config.keys import CPS_SOURCE
from pubsub_connect.io.services.lifecycle import LocalServices, environment
from pubsub_connect.io.tables import BRONZE, TableRef
from pubsub_connect.model.schemas import PUBSUB_BRONZE
from pubsub_connect.pipelines import cps_sink, cps_source
from pubsub_connect.pipelines.replay.ranges import ReplayRange, replay_range
from pubsub_connect.pipelines.replay.run import ReplayReport, replay, replay_steps

PROJECT = "bench-project"


def timed_replay(ctx: Any, connector: cfg.ConnectorConfig, chosen: ReplayRange,
                 batch_size: int) -> tuple[float, ReplayReport]:
    """The replay of ``chosen`` to the topic ``backfill``: its seconds and report."""
    started = time.perf_counter()
    report = replay(ctx, connector, chosen, replay_steps(ctx, connector, "backfill"), batch_size=batch_size,
                    progress=lambda line: None)
    return time.perf_counter() - started, report


def sink(args: argparse.Namespace, root: Path, services: LocalServices) -> tuple[dict[str, float], float,
                                                                            ReplayReport]:
    """The Cloud Pub/Sub sink: its stages' seconds, then the replay's seconds and report."""
    n = args.records
    bootstrap = services.running["kafka"].endpoint
    produce(bootstrap, "bench", n, args.size)
    create_pubsub_topic(PROJECT, "sink", subscribe=False)
    create_pubsub_topic(PROJECT, "backfill", subscribe=False)
    run = cfg.load_raw(
        {"name": "bench", "connector.class": "cps-sink", "topics": "bench", "cps.project": PROJECT,
         "cps.topic": "sink", "cps.useEmulator": "true", "tasks.max": str(args.tasks)},
        {"bootstrap.servers": bootstrap, "storage.root": str(root / "data"), **ENGINES["native"],
         "pipeline.max.records.per.batch": str(n), "pipeline.max.bytes.per.trigger": "0"})
    ctx = quiet_context(run.worker, once=True)
    connector = run.connectors[0]
    try:
        _, stage_seconds = timed_stages(ctx, connector, cps_sink.STAGES)
        chosen = replay_range([f"bench:{p}:0-" for p in range(3)], None, None, "timestamp")
        return (stage_seconds, *timed_replay(ctx, connector, chosen, args.batch_size))
    finally:
        ctx.spark.stop()


def source(args: argparse.Namespace, root: Path, services: LocalServices) -> tuple[dict[str, float], float,
                                                                              ReplayReport]:
    """The Cloud Pub/Sub source: bronze written as its pull lands it, its convert and produce
    stages' seconds, then the replay's seconds and report."""
    from pyspark.sql import functions as F

    n = args.records
    bootstrap = services.running["kafka"].endpoint
    for topic in ("source", "backfill"):
        create_kafka_topic(bootstrap, topic, 3)
    run = cfg.load_raw(
        {"name": "bench-source", "connector.class": "CloudPubSubSourceConnector", "cps.project": PROJECT,
         "cps.subscription": "bench", "kafka.topic": "source", "cps.useEmulator": "true",
         "kafka.partition.count": "3", "tasks.max": str(args.tasks)},
        {"bootstrap.servers": bootstrap, "storage.root": str(root / "data"), **ENGINES["native"],
         "pipeline.max.records.per.batch": str(n), "pipeline.max.bytes.per.trigger": "0"})
    ctx = quiet_context(run.worker, once=True)
    connector = run.connectors[0]
    try:
        bronze = TableRef(BRONZE, connector.name)
        ctx.store.ensure(bronze, PUBSUB_BRONZE)
        body = F.concat(F.lpad(F.col("id").cast("string"), 12, "0"), F.lit("x" * (args.size - 12))).cast("binary")
        messages = ctx.spark.range(n).select(
            F.concat(F.lit("m-"), F.col("id").cast("string")).alias("message_id"), body.alias("data"),
            F.create_map().cast("map<string,string>").alias("attributes"), F.lit("").alias("ordering_key"),
            F.timestamp_millis(F.lit(1_764_900_000_000) + F.col("id")).alias("publish_time"),
            F.lit(None).cast("int").alias("delivery_attempt"), F.lit(f"projects/{PROJECT}/subscriptions/bench")
            .alias("subscription"), F.current_timestamp().alias("ingest_time"))
        ctx.store.append_batch(bronze, messages, "bench-pull", 0)
        _, stage_seconds = timed_stages(ctx, connector, cps_source.STAGES[1:])
        chosen = replay_range([], "2000-01-01T00:00:00Z", None, "ingest_time", CPS_SOURCE)
        return (stage_seconds, *timed_replay(ctx, connector, chosen, args.batch_size))
    finally:
        ctx.spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connector", choices=("cps_sink", "cps_source"), default="cps_sink")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=100_000, help="replay's records (a sink: offsets per "
                        "partition) per chunk")
    args = parser.parse_args()
    n = args.records
    root = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    with LocalServices(root / "services", ("kafka", "pubsub")) as services, \
            environment({"PUBSUB_EMULATOR_HOST": services.running["pubsub"].endpoint}):
        stage_seconds, replay_s, report = (sink if args.connector == "cps_sink" else source)(args, root, services)
    assert report.records == report.published == n, report
    sender = "publish" if args.connector == "cps_sink" else "produce"
    send_rate, replay_rate = n / stage_seconds[sender], n / replay_s
    ratio = replay_rate / send_rate
    destination = "Pub/Sub" if args.connector == "cps_sink" else "Kafka"
    rows = [
        ("connector, records x size", f"{args.connector}, {n:,} x {args.size} B"),
        *[(f"  stage {name}", f"{secs:,.1f} s, {n / secs:,.0f} msg/s") for name, secs in stage_seconds.items()],
        (f"replay (bronze -> model -> {destination})",
         f"{replay_s:,.1f} s, {replay_rate:,.0f} msg/s in {report.chunks} chunks"),
        (f"ratio replay / {sender} stage", f"{ratio:.2f}"),
    ]
    print(table(rows))
    results: dict[str, Any] = {"connector": args.connector, "records": n, "size": args.size,
                               "batch_size": args.batch_size, "stage_seconds": stage_seconds,
                               "replay_seconds": replay_s, "chunks": report.chunks, "ratio": ratio}
    name = "replay" if args.connector == "cps_sink" else "replay-source"
    print(f"\nresults: {write_results(results_name(name, 'native'), results)}")


if __name__ == "__main__":
    main()
