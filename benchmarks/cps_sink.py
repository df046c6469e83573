"""Cloud Pub/Sub sink throughput: end-to-end messages/s vs. the bare clients, in one run.

    .venv/bin/python benchmarks/cps_sink.py [--records 100000] [--size 1024]

Starts a local Kafka broker and Google's Pub/Sub emulator, produces N records of SIZE bytes,
then measures, on the same services: (1) a bare confluent-kafka consumer reading them, (2) the
official publisher alone publishing N messages, (3) the connector (ingest → convert → publish,
``--once``, Spark session already up). The ratio compares (3) with the slower of (1) and (2),
which bounds what any Kafka → Pub/Sub mover can reach here.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _common import (
    ENGINES,
    add_engine_argument,
    bare_consume,
    bare_publish,
    produce,
    results_name,
    table,
    timed_stages,
    write_results,
)

from pubsub_connect.config import loader as cfg
from pubsub_connect.io.services.lifecycle import LocalServices, environment
from pubsub_connect.pipelines.cps_sink import STAGES
from pubsub_connect.pipelines.runtime import build_context

PROJECT = "bench-project"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--tasks", type=int, default=2)
    add_engine_argument(parser)
    args = parser.parse_args()
    n = args.records
    root = Path(tempfile.mkdtemp(prefix="bench-cps-sink-"))
    with LocalServices(root / "services", ("kafka", "pubsub")) as services:
        bootstrap = services.running["kafka"].endpoint
        with environment({"PUBSUB_EMULATOR_HOST": services.running["pubsub"].endpoint}):
            produce_s = produce(bootstrap, "bench", n, args.size)
            consume_s = bare_consume(bootstrap, "bench", n)
            publish_s = bare_publish(PROJECT, "bare", n, args.size)

            from google.cloud import pubsub_v1

            publisher = pubsub_v1.PublisherClient()
            publisher.create_topic(request={"name": publisher.topic_path(PROJECT, "sink")})
            run = cfg.load_raw(
                {"name": "bench", "connector.class": "cps-sink", "topics": "bench", "cps.project": PROJECT,
                 "cps.topic": "sink", "cps.useEmulator": "true", "tasks.max": str(args.tasks)},
                {"bootstrap.servers": bootstrap, "storage.root": str(root / "data"), **ENGINES[args.engine],
                 "pipeline.max.records.per.batch": str(n)})
            t0 = time.perf_counter()
            ctx = build_context(run.worker, once=True, progress=lambda _line: None)
            session_s = time.perf_counter() - t0
            e2e_s, stage_times = timed_stages(ctx, run.connectors[0], STAGES)
            ctx.spark.stop()

    rate = {"bare consume": n / consume_s, "bare publish": n / publish_s, "connector end-to-end": n / e2e_s}
    limit = min(rate["bare consume"], rate["bare publish"])
    mb = n * args.size / 1e6
    rows = [
        ("records x size", f"{n:,} x {args.size} B ({mb:,.0f} MB)"),
        ("produce (setup)", f"{n / produce_s:,.0f} msg/s"),
        ("bare consume (confluent-kafka)", f"{rate['bare consume']:,.0f} msg/s"),
        ("bare publish (official client)", f"{rate['bare publish']:,.0f} msg/s"),
        ("connector end-to-end", f"{rate['connector end-to-end']:,.0f} msg/s, {mb / e2e_s:,.1f} MB/s"),
        ("engine", args.engine),
        *[(f"  stage {name}", f"{secs:,.1f} s, {n / secs:,.0f} msg/s") for name, secs in stage_times.items()],
        ("spark session start (excluded)", f"{session_s:,.1f} s"),
        ("ratio to the slower bare client", f"{rate['connector end-to-end'] / limit:.2f}"),
    ]
    print(table(rows))
    path = write_results(results_name("cps_sink", args.engine), {
        "engine": args.engine, "records": n, "size": args.size, "rates_msgs_per_s": rate,
                                      "stage_seconds": stage_times, "ratio": rate["connector end-to-end"] / limit})
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
