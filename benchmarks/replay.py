"""Replay from bronze against the publish stage, on the same records.

    .venv/bin/python benchmarks/replay.py [--records 1000000] [--size 1024] [--batch-size 100000]

Starts a local Kafka broker and Google's Pub/Sub emulator, produces N records of SIZE bytes and
runs a Cloud Pub/Sub sink's stages one after the other (``run --once``: one micro-batch per stage),
timing its publish stage, which publishes the N converted rows of the outbox. Then
``pubsub-connect replay`` (the same function) publishes the same N records from bronze to another
topic: it converts them again with the connector's data model and publishes them, chunk by chunk.
The ratio is the replay's rate over the publish stage's (the goal: at least 0.8). Both topics
have no subscription, so the emulator accepts and drops the messages, as in the other benchmarks.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import (
    ENGINES,
    create_pubsub_topic,
    produce,
    quiet_context,
    results_name,
    table,
    timed_stages,
    write_results,
)

from pubsub_connect.config import loader as cfg
from pubsub_connect.io.services.lifecycle import LocalServices, environment
from pubsub_connect.pipelines.cps_sink import STAGES
from pubsub_connect.pipelines.replay.ranges import replay_range
from pubsub_connect.pipelines.replay.run import replay
from pubsub_connect.pipelines.replay.sink import sink_replay

PROJECT = "bench-project"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=100_000, help="replay's offsets per partition per chunk")
    args = parser.parse_args()
    n = args.records
    root = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    with LocalServices(root / "services", ("kafka", "pubsub")) as services:
        bootstrap = services.running["kafka"].endpoint
        with environment({"PUBSUB_EMULATOR_HOST": services.running["pubsub"].endpoint}):
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
                _, stage_seconds = timed_stages(ctx, connector, STAGES)
                chosen = replay_range([f"bench:{p}:0-" for p in range(3)], None, None, "timestamp")
                started = time.perf_counter()
                report = replay(ctx, connector, chosen, sink_replay(connector, "backfill"),
                                batch_size=args.batch_size, progress=lambda line: None)
                replay_s = time.perf_counter() - started
            finally:
                ctx.spark.stop()
    assert report.records == report.published == n, report
    publish_rate, replay_rate = n / stage_seconds["publish"], n / replay_s
    ratio = replay_rate / publish_rate
    rows = [
        ("records x size", f"{n:,} x {args.size} B"),
        *[(f"  stage {name}", f"{secs:,.1f} s, {n / secs:,.0f} msg/s") for name, secs in stage_seconds.items()],
        ("replay (bronze -> model -> Pub/Sub)",
         f"{replay_s:,.1f} s, {replay_rate:,.0f} msg/s in {report.chunks} chunks"),
        ("ratio replay / publish stage", f"{ratio:.2f}"),
    ]
    print(table(rows))
    results: dict[str, Any] = {"records": n, "size": args.size, "batch_size": args.batch_size,
                               "stage_seconds": stage_seconds, "replay_seconds": replay_s, "chunks": report.chunks,
                               "ratio": ratio}
    print(f"\nresults: {write_results(results_name('replay', 'native'), results)}")


if __name__ == "__main__":
    main()
