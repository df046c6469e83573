"""Ordering keys: ``orderingKeySource=partition`` vs. ``none`` sink throughput on one partition.

    .venv/bin/python benchmarks/ordering.py [--records 50000] [--size 1024] [--rounds 1] [--min-ratio 0.5]

Why: Google's connector publishes with ordering keys one message at a time per key; on a
single Kafka partition (one key) its throughput drops from 3,533 to 127 msg/s (3.6 %). Ours
publishes a key's messages in Kafka order in full batches (``maxBufferSize``), one batch in
flight per key, so the ratio must stay close to 1.

Starts a local Kafka broker and Google's Pub/Sub emulator, produces N records of SIZE bytes to
a one-partition topic, then runs the sink in-process (ingest → convert → publish, ``--once``,
one Spark session started before timing) twice on the same records: once with
``orderingKeySource=none`` and once with ``partition`` (each run a new connector name, so it
reads the topic from the start). With ``--rounds`` > 1 the order alternates. A warm-up
connector on a small topic runs first (Python workers, JIT, first-query costs).
Reported: end-to-end msg/s and the publish stage's msg/s per setting, and partition/none; the exit
status is 1 when the end-to-end ratio is below ``--min-ratio`` (default 0.5: an order of magnitude
above the original's 0.04, with room for the noise of a shared machine).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
from pathlib import Path

from _common import produce, quiet_context, table, timed_stages, write_results

from pubsub_connect.config import loader as cfg
from pubsub_connect.io.services.lifecycle import LocalServices, environment
from pubsub_connect.pipelines.context import PipelineContext
from pubsub_connect.pipelines.cps_sink import STAGES

PROJECT = "bench-project"
_RECORDS = re.compile(r"\] batch=\d+ records=(\d+)")


def run_connector(ctx: PipelineContext, lines: list[str], name: str, topic: str, ordering: str,
                  tasks: int) -> dict[str, float]:
    """One sink run; returns seconds per stage and end to end, and the messages published."""
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    publisher.create_topic(request={"name": publisher.topic_path(PROJECT, name)})
    connector = cfg.validate_connector(
        {"name": name, "connector.class": "cps-sink", "topics": topic, "cps.project": PROJECT, "cps.topic": name,
         "cps.useEmulator": "true", "tasks.max": str(tasks), "orderingKeySource": ordering}, f"<{name}>")
    del lines[:]
    end_to_end, timings = timed_stages(ctx, connector, STAGES)
    timings["end_to_end"] = end_to_end
    timings["published"] = float(sum(int(m.group(1)) for line in lines if f"[{name}.publish]" in line
                                     for m in [_RECORDS.search(line)] if m))
    return timings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--min-ratio", type=float, default=0.5)
    args = parser.parse_args()
    n = args.records
    root = Path(tempfile.mkdtemp(prefix="bench-ordering-"))
    runs: dict[str, list[dict[str, float]]] = {"none": [], "partition": []}
    with LocalServices(root / "services", ("kafka", "pubsub")) as services:
        bootstrap = services.running["kafka"].endpoint
        with environment({"PUBSUB_EMULATOR_HOST": services.running["pubsub"].endpoint}):
            produce(bootstrap, "bench", n, args.size, partitions=1)
            produce(bootstrap, "warmup", 1000, args.size, partitions=1)
            lines: list[str] = []
            worker = cfg.validate_worker({"bootstrap.servers": bootstrap, "storage.root": str(root / "data"),
                                          "pipeline.max.records.per.batch": str(n)})
            ctx = quiet_context(worker, once=True, progress=lines.append)
            try:
                run_connector(ctx, lines, "warmup", "warmup", "partition", args.tasks)
                for round_no in range(args.rounds):
                    order = ("none", "partition") if round_no % 2 == 0 else ("partition", "none")
                    for ordering in order:
                        timings = run_connector(ctx, lines, f"r{round_no}-{ordering}", "bench", ordering,
                                                args.tasks)
                        if timings["published"] != n:
                            raise RuntimeError(f"{ordering}: published {timings['published']:.0f} of {n}")
                        runs[ordering].append(timings)
                        print(f"round {round_no + 1} {ordering:9s}: end-to-end {n / timings['end_to_end']:,.0f} "
                              f"msg/s, publish stage {n / timings['publish']:,.0f} msg/s", flush=True)
            finally:
                ctx.spark.stop()

    def rate(ordering: str, key: str) -> float:
        return n / statistics.median(t[key] for t in runs[ordering])

    e2e = {o: rate(o, "end_to_end") for o in runs}
    pub = {o: rate(o, "publish") for o in runs}
    ratio = e2e["partition"] / e2e["none"]
    rows = [
        ("records x size", f"{n:,} x {args.size} B, one Kafka partition, tasks.max={args.tasks}, "
                           f"median of {args.rounds}"),
        ("orderingKeySource=none", f"end-to-end {e2e['none']:,.0f} msg/s, publish stage {pub['none']:,.0f} msg/s"),
        ("orderingKeySource=partition", f"end-to-end {e2e['partition']:,.0f} msg/s, "
                                        f"publish stage {pub['partition']:,.0f} msg/s"),
        ("ratio partition/none (end-to-end)", f"{ratio:.2f}"),
        ("ratio partition/none (publish stage)", f"{pub['partition'] / pub['none']:.2f}"),
        ("Google's connector (reported)", "127 / 3,533 msg/s = 0.04"),
    ]
    print(table(rows))
    path = write_results("ordering", {"records": n, "size": args.size, "rounds": args.rounds, "tasks": args.tasks,
                                      "end_to_end_msgs_per_s": e2e, "publish_stage_msgs_per_s": pub,
                                      "ratio": ratio, "ratio_publish_stage": pub["partition"] / pub["none"],
                                      "runs": runs, "original_connector_ratio": 127 / 3533})
    print(f"\nresults: {path}")
    if ratio < args.min_ratio:
        print(f"FAIL: ratio {ratio:.2f} below {args.min_ratio}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
