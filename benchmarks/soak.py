"""A Cloud Pub/Sub sink running for a long time: does it stay as fast, as small and as lean?

    .venv/bin/python benchmarks/soak.py [--mode staged|fused] [--commits 20000] [--rate 200]
                                        [--trigger-ms 100] [--maintain-every SECONDS] [--max-minutes M]
                                        [--deleted-file-retention MINUTES] [--dir DIR [--resume | --report]]

Starts a local Kafka broker and Google's Pub/Sub emulator and runs the sink continuously (``run``'s
code, in this process) with a short trigger while records arrive at a steady ``--rate``, each
stamped with its produce time, until each of the connector's tables has ``--commits`` Delta
commits (20,000 are the commits of about six hours at the default 1 s trigger) or
``--max-minutes`` pass. With ``--maintain-every`` maintenance runs beside the stages as ``run``
runs it (retention with ``outbox.retention.ms=0`` so that each turn deletes, compaction, VACUUM).
VACUUM removes a replaced file only after the table's ``delta.deletedFileRetentionDuration`` (Delta's
seven days), so within hours the disk only grows; ``--deleted-file-retention`` creates the tables
with a shorter one (as a user may set it), which shows where the disk levels off.

It prints, for the first 10 %, the middle and the last 10 % of the run: each stage's micro-batch
duration (p50, p99, from Spark's progress), the end-to-end latency (produce → a subscriber
in a child process; p50, p99; and apart for the records sent during a maintenance turn, whose
deletion holds the stages' appends), files per table, bytes on disk (tables, checkpoints), and memory
(the driver's Python RSS, the Spark JVM's old generation after its last collection and its RSS).
The figures the goals read are the ratios last 10 % / first 10 % of the batch durations (at most
1.2), and whether files, disk and memory stay bounded.

A soak may take longer than one sitting: ``--dir`` keeps everything (the broker's data, the tables,
the checkpoints, and each run's samples in ``segments.jsonl``), and ``--resume`` continues the
soak in it with the settings it began with. The broker starts again on its data, the connector
from its checkpoints (as after a redeploy), and the report covers every run, from the first
batch of the first to the last of this one. ``--report`` prints that report again without running.
Ctrl-C or SIGTERM ends a run as ``--max-minutes`` does, its samples kept.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import signal
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from _common import ENGINES, quiet_context, results_name, rss_mb, spark_jvm_pid, table, write_results
from _streaming import StagesThread
from latency import STAMP, Receiver, ReceiverProcess, create_topic_and_subscription, producer, sink_keys

from pubsub_connect.config import loader as cfg
from pubsub_connect.io.kafka.admin import create_topic
from pubsub_connect.io.services.lifecycle import LocalServices, environment
from pubsub_connect.io.tables import KINDS, TableRef
from pubsub_connect.pipelines.maintenance import maintained_while_running
from pubsub_connect.pipelines.runtime import connector_stages

NAME = "soak"
#: Settings a resumed soak keeps from its first run: its figures compare one connector over time.
KEPT_ON_RESUME = ("mode", "rate", "trigger_ms", "maintain_every", "deleted_file_retention")
#: Delta gives a new table this session default as its ``delta.deletedFileRetentionDuration``.
DELETED_FILE_RETENTION_DEFAULT = "spark.databricks.delta.properties.defaults.deletedFileRetentionDuration"


class SteadyProducer:
    """Records at a fixed rate, each stamped with its produce time, on a thread of its own."""

    def __init__(self, bootstrap: str, topic: str, rate: float, first: int = 0):
        self._producer = producer(bootstrap)
        self._topic, self._rate = topic, rate
        self._stop = threading.Event()
        self.first = first
        self.sent = first
        self._thread = threading.Thread(target=self._run, name="soak-producer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        interval, next_at = 1.0 / self._rate, time.monotonic()
        while not self._stop.is_set():
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self._producer.produce(self._topic, b"%012d" % self.sent, headers=[(STAMP, str(time.time_ns()).encode())])
            self._producer.poll(0)
            self.sent += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self._producer.flush(30)


class BatchLog:
    """Every completed micro-batch of the running queries: (stage, batch id, wall time, duration ms),
    read from ``recentProgress`` often enough that none is missed (it keeps the last 100)."""

    def __init__(self, spark: Any):
        self._spark = spark
        self.batches: dict[tuple[str, int], tuple[float, float]] = {}

    def poll(self) -> None:
        for query in self._spark.streams.active:
            stage = (query.name or "").rsplit(".", 1)[-1]
            for progress in query.recentProgress:
                if int(progress.get("numInputRows") or 0) > 0:
                    duration = float(progress["durationMs"].get("triggerExecution", 0))
                    self.batches.setdefault((stage, int(progress["batchId"])), (time.time(), duration))


def _folder_bytes(path: Path) -> tuple[int, int, int]:
    """(files, bytes, files of Delta logs) under ``path``: what a local file system lists for each
    snapshot of a table is its whole ``_delta_log`` folder."""
    files = size = log_files = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            try:
                size += os.stat(os.path.join(root, name)).st_size
                files += 1
                log_files += Path(root).name == "_delta_log"
            except FileNotFoundError:  # removed meanwhile (VACUUM, Spark's checkpoint clean-up)
                pass
    return files, size, log_files


def _jvm_memory_mb(ctx: Any) -> tuple[float, float]:
    """The Spark JVM's old generation after its last collection (what stays), and its RSS."""
    jvm = ctx.spark.sparkContext._jvm
    old = 0
    for pool in jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans():
        if "Old Gen" in pool.getName() and pool.getCollectionUsage() is not None:
            old = pool.getCollectionUsage().getUsed()
    jvm_pid = spark_jvm_pid(os.getpid())
    return old / 2**20, rss_mb(jvm_pid) if jvm_pid is not None else 0.0


def snapshot(ctx: Any, root: Path) -> dict[str, Any]:
    """Commits and files per table, bytes on disk, and memory, now."""
    from pubsub_connect.io import table_maintenance

    tables = {}
    for kind in KINDS:
        ref = TableRef(kind, NAME)
        if ctx.store.exists(ref):
            files = table_maintenance.describe(ctx.spark, ctx.store.sql_target(ref)).files
            tables[kind] = {"commits": ctx.store.version(ref), "files": files}
    disk = {part: _folder_bytes(root / "data" / part) for part in ("bronze", "outbox", "dlq", "checkpoints")}
    old_mb, jvm_rss_mb = _jvm_memory_mb(ctx)
    return {"at": time.time(), "tables": tables, "disk_files": {k: v[0] for k, v in disk.items()},
            "disk_mb": {k: round(v[1] / 1e6, 1) for k, v in disk.items()},
            "log_files": {k: v[2] for k, v in disk.items() if k != "checkpoints"},
            "driver_rss_mb": rss_mb(os.getpid()),
            "jvm_old_gen_mb": round(old_mb, 1), "jvm_rss_mb": round(jvm_rss_mb, 1)}


class MaintenanceTurns:
    """When each maintenance turn ran: the guard ``maintained_while_running`` enters around it."""

    def __init__(self) -> None:
        self.turns: list[tuple[float, float]] = []

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        started = time.time()
        try:
            yield
        finally:
            self.turns.append((started, time.time()))

    def during(self, at: float) -> bool:
        return any(start <= at <= end for start, end in self.turns)


class MaintenanceSteps:
    """How long each step of maintenance took, and when: the product's own calls, timed by
    wrapping them where ``maintain`` looks them up (on their modules, at each call). What makes a
    turn longer as the tables age is then visible step by step."""

    #: step → (module, function) as ``pipelines/maintenance.py`` calls them.
    STEPS = {"describe": ("table_maintenance", "describe"), "retention": ("table_maintenance", "delete_held_at"),
             "held back": ("table_maintenance", "count_added_after"), "optimize": ("table_maintenance", "optimize"),
             "vacuum": ("table_maintenance", "vacuum"), "log trim": ("delta_log", "trim"),
             "log marks": ("delta_log", "commits")}

    def __init__(self) -> None:
        self.times: list[tuple[float, str, float]] = []  # (ended at, step, seconds)

    def install(self) -> None:
        from pubsub_connect.io import delta_log, table_maintenance

        modules = {"table_maintenance": table_maintenance, "delta_log": delta_log}
        for step, (module, name) in self.STEPS.items():
            setattr(modules[module], name, self._timed(step, getattr(modules[module], name)))

    def _timed(self, step: str, call: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            try:
                return call(*args, **kwargs)
            finally:
                if threading.current_thread().name.startswith("maintain-"):  # not the soak's own snapshots
                    self.times.append((time.time(), step, time.monotonic() - started))
        return timed

    def per_turn(self, turns: list[tuple[float, float]]) -> list[dict[str, float]]:
        """Seconds per step within each turn."""
        found = []
        for start, end in turns:
            steps: dict[str, float] = {}
            for at, step, seconds in self.times:
                if start <= at <= end:
                    steps[step] = steps.get(step, 0.0) + seconds
            found.append({step: round(seconds, 1) for step, seconds in steps.items()})
        return found


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def windows(items: list[Any]) -> dict[str, list[Any]]:
    """The first 10 %, the middle 10 % and the last 10 % of ``items`` (in their order)."""
    tenth = max(1, len(items) // 10)
    middle = max(0, len(items) // 2 - tenth // 2)
    return {"first": items[:tenth], "middle": items[middle:middle + tenth], "last": items[-tenth:]}


class Segments:
    """The runs of one soak in its folder, one JSON line each: what a resumed soak reports with its
    own run (batches, maintenance turns and steps, latencies, snapshots, seconds, records sent)."""

    def __init__(self, folder: Path):
        self.path = folder / "segments.jsonl"

    def load(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def heads(self) -> list[dict[str, Any]]:
        """Each run's settings, seconds and records sent, read in a child process. A long run's samples
        are hundreds of MB as Python objects, and what this process holds is one of the soak's figures
        (the driver's RSS): a resumed run measures only itself."""
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as reader:
            return reader.submit(_run_heads, self).result()

    def append(self, segment: dict[str, Any]) -> None:
        with open(self.path, "a") as out:
            out.write(json.dumps(segment, separators=(",", ":")) + "\n")


def _run_heads(segments: Segments) -> list[dict[str, Any]]:
    return [{key: run[key] for key in ("args", "seconds", "sent")} for run in segments.load()]


def _maintenance_lines(line: str) -> None:
    if line.startswith(f"[{NAME}.maintain]"):
        print(line, flush=True)


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """The command line's settings as JSON holds them."""
    return {key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()}


def _arguments() -> tuple[argparse.Namespace, list[dict[str, Any]]]:
    """The command line, and the heads of the earlier runs of the soak it resumes (none for a new
    soak: ``Segments.heads``)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("staged", "fused"), default="staged")
    parser.add_argument("--commits", type=int, default=20_000, help="Delta commits per table to reach")
    parser.add_argument("--rate", type=float, default=200.0, help="records per second")
    parser.add_argument("--trigger-ms", type=int, default=100)
    parser.add_argument("--maintain-every", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument("--max-minutes", type=float, default=360.0, help="of this run")
    parser.add_argument("--deleted-file-retention", type=float, metavar="MINUTES",
                        help="the tables' delta.deletedFileRetentionDuration (default: Delta's, seven days)")
    parser.add_argument("--snapshot-every", type=float, default=60.0, metavar="SECONDS")
    parser.add_argument("--dir", type=Path, help="the soak's folder (default: a new temporary one)")
    again = parser.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true",
                       help="continue the soak in --dir with the settings it began with")
    again.add_argument("--report", action="store_true", help="print the report of the soak in --dir so far, and stop")
    args = parser.parse_args()
    earlier: list[dict[str, Any]] = []
    if args.resume or args.report:
        if args.dir is None:
            parser.error("--resume and --report read the soak of a --dir")
        earlier = Segments(args.dir).heads()
        if not earlier:
            flag = "--resume" if args.resume else "--report"
            parser.error(f"{flag}: {args.dir} holds no soak (no {Segments(args.dir).path.name})")
        for key in KEPT_ON_RESUME:  # a soak begun before a setting existed ran with its default
            setattr(args, key, earlier[0]["args"].get(key, parser.get_default(key)))
    elif args.dir is not None and args.dir.exists() and any(args.dir.iterdir()):
        parser.error(f"--dir {args.dir} is not empty: add --resume to continue the soak in it")
    return args, earlier


def _stop_requested() -> threading.Event:
    """Set by Ctrl-C or SIGTERM: the run then ends as at ``--max-minutes``, its samples kept for a
    ``--resume`` (a soak is stopped when its machine is needed)."""
    stopping = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopping.set())
    return stopping


def main() -> None:
    args, earlier = _arguments()
    if args.report:
        report(args, Segments(args.dir).load())
        return
    root = args.dir or Path(tempfile.mkdtemp(prefix="bench-soak-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"[soak] in {root}" + (f", run {len(earlier) + 1}" if earlier else ""), flush=True)
    with LocalServices(root / "services", ("kafka", "pubsub")) as services:
        bootstrap = services.running["kafka"].endpoint
        with environment({"PUBSUB_EMULATOR_HOST": services.running["pubsub"].endpoint}):
            create_topic({"bootstrap.servers": bootstrap}, NAME, 2)  # False when resumed: it is there
            receiver = ReceiverProcess(Receiver, create_topic_and_subscription(NAME))
            keys = {**sink_keys(NAME), "pipeline.mode": args.mode,
                    **({"outbox.retention.ms": "0", "bronze.retention.ms": "0"} if args.maintain_every else {})}
            worker = {"bootstrap.servers": bootstrap, "storage.root": str(root / "data"), **ENGINES["native"],
                      "pipeline.trigger.interval.ms": str(args.trigger_ms)}
            if args.deleted_file_retention is not None:  # read when a table is created: a resumed soak's are
                worker[DELETED_FILE_RETENTION_DEFAULT] = f"interval {args.deleted_file_retention:g} minutes"
            run = cfg.load_raw(keys, worker)
            connector = run.connectors[0]
            # maintenance's report lines (rows deleted, files, what held retention back), not the stages'
            ctx = quiet_context(run.worker, once=False, progress=_maintenance_lines)
            batches = BatchLog(ctx.spark)
            turns = MaintenanceTurns()
            steps = MaintenanceSteps()
            if args.maintain_every:
                steps.install()
            snapshots: list[dict[str, Any]] = []
            produce = SteadyProducer(bootstrap, NAME, args.rate, first=sum(s["sent"] for s in earlier))
            started = time.monotonic()
            stopping = _stop_requested()
            try:
                with maintained_while_running(ctx, connector, args.maintain_every, turns.guard):
                    stages = StagesThread(ctx, connector, connector_stages(connector))
                    next_snapshot = started
                    while (stages.running() and not stopping.is_set()
                           and time.monotonic() - started < args.max_minutes * 60):
                        batches.poll()
                        if time.monotonic() >= next_snapshot:
                            snapshots.append(snapshot(ctx, root))
                            next_snapshot += args.snapshot_every
                            tables = snapshots[-1]["tables"]
                            print(f"[soak] {time.monotonic() - started:,.0f} s, {produce.sent:,} sent: " + ", ".join(
                                f"{kind} {t['commits']:,} commits {t['files']:,} files" for kind, t in tables.items())
                                + f"; log files {snapshots[-1]['log_files']}", flush=True)
                            # bronze, and the outbox in the staged mode: the tables every batch commits to
                            written = [t["commits"] for kind, t in tables.items() if kind != "dlq"]
                            if written and min(written) >= args.commits:
                                break
                        stopping.wait(2)
                    batches.poll()
                    snapshots.append(snapshot(ctx, root))
                    stages.stop()
            finally:
                produce.close()
                latencies = receiver.close()
                ctx.spark.stop()
    this_run = {"args": _settings(args), "seconds": time.monotonic() - started, "sent": produce.sent - produce.first,
                "batches": [[stage, batch, at, ms] for (stage, batch), (at, ms) in batches.batches.items()],
                "turns": turns.turns, "steps": steps.times, "snapshots": snapshots, "latencies": latencies}
    Segments(root).append(this_run)
    del latencies, this_run  # the report reads every run's samples from the folder, this one's too
    report(args, Segments(root).load())


def report(args: argparse.Namespace, segments: list[dict[str, Any]]) -> None:
    """The figures of every run of the soak (one, unless it was resumed), as one run's."""
    seconds = sum(segment["seconds"] for segment in segments)
    batches: dict[tuple[str, int], tuple[float, float]] = {}
    for segment in segments:  # a batch cut short by a run's stop is run again under its id: the first counts
        for stage, batch, at, ms in segment["batches"]:
            batches.setdefault((stage, batch), (at, ms))
    turns, steps = MaintenanceTurns(), MaintenanceSteps()
    turns.turns = [tuple(turn) for segment in segments for turn in segment["turns"]]
    steps.times = [tuple(step) for segment in segments for step in segment["steps"]]
    latencies = [tuple(sample) for segment in segments for sample in segment["latencies"]]
    snapshots = [snap for segment in segments for snap in segment["snapshots"]]
    maintained = f", maintenance every {args.maintain_every:g} s" if args.maintain_every else ""
    if args.deleted_file_retention is not None:
        maintained += f", deleted files kept {args.deleted_file_retention:g} min"
    runs = (f" in {len(segments)} runs (" + ", ".join(f"{segment['seconds'] / 60:,.1f}" for segment in segments)
            + " min)") if len(segments) > 1 else ""
    rows: list[tuple[str, str]] = [
        ("mode / trigger / rate", f"{args.mode} / {args.trigger_ms} ms / {args.rate:g} msg/s{maintained}"),
        ("ran", f"{seconds / 60:,.1f} min{runs}")]
    results: dict[str, Any] = {"args": _settings(args),
                               "seconds": seconds, "runs": [segment["seconds"] for segment in segments],
                               "stages": {}, "snapshots": snapshots}
    for stage in sorted({stage for stage, _ in batches}):
        durations = [ms for (name, _), (_, ms) in sorted(batches.items(), key=lambda item: item[0][1])
                     if name == stage]
        parts = windows(durations)
        figures = {w: {"p50": statistics.median(v), "p99": _pct(v, 0.99)} for w, v in parts.items() if v}
        ratio = {q: figures["last"][q] / figures["first"][q] for q in ("p50", "p99")}
        results["stages"][stage] = {"batches": len(durations), **figures, "ratio_last_first": ratio}
        rows.append((f"  {stage}: {len(durations):,} batches", ", ".join(
            f"{w} p50 {f['p50']:,.0f} ms p99 {f['p99']:,.0f} ms" for w, f in figures.items())
            + f"; last/first p50 {ratio['p50']:.2f}, p99 {ratio['p99']:.2f}"))
    if turns.turns:
        took = [end - start for start, end in turns.turns]
        during = [ms for (at, ms) in batches.values() if turns.during(at)]
        outside = [ms for (at, ms) in batches.values() if not turns.during(at)]
        results["maintenance"] = {"turns": len(took), "seconds": took, "batch_p50_during_ms": statistics.median(
            during) if during else None, "batch_p50_outside_ms": statistics.median(outside) if outside else None}
        rows.append((f"  maintenance: {len(took)} turns", f"{statistics.mean(took):,.1f} s each on average "
                     f"(longest {max(took):,.1f} s), {sum(took) / seconds:.1%} of the run; batch p50 "
                     f"{results['maintenance']['batch_p50_during_ms'] or 0:,.0f} ms during a turn, "
                     f"{results['maintenance']['batch_p50_outside_ms'] or 0:,.0f} ms outside"))
        per_turn = steps.per_turn(turns.turns)
        results["maintenance"]["steps_s"] = per_turn
        for which, index in (("first", 0), ("last", -1)):
            rows.append((f"  maintenance, {which} turn", ", ".join(
                f"{step} {secs:,.1f} s" for step, secs in sorted(per_turn[index].items(), key=lambda kv: -kv[1]))))
    by_stamp = [lat for _, lat in sorted(latencies)]
    if by_stamp:
        lat = {w: {"p50": statistics.median(v), "p99": _pct(v, 0.99)} for w, v in windows(by_stamp).items() if v}
        results["latency_ms"] = lat
        rows.append((f"  latency ({len(by_stamp):,} received)",
                     ", ".join(f"{w} p50 {f['p50']:,.0f} ms p99 {f['p99']:,.0f} ms" for w, f in lat.items())))
        if turns.turns:  # a turn's deletion holds the stages' appends: what the records sent meanwhile wait
            split = {"during a turn": [ms for ns, ms in latencies if turns.during(ns / 1e9)],
                     "outside": [ms for ns, ms in latencies if not turns.during(ns / 1e9)]}
            results["latency_by_turn_ms"] = {w: {"records": len(v), "p50": statistics.median(v),
                                                 "p99": _pct(v, 0.99)} for w, v in split.items() if v}
            rows.append(("  latency by when sent", ", ".join(
                f"{w} ({f['records']:,}) p50 {f['p50']:,.0f} ms p99 {f['p99']:,.0f} ms"
                for w, f in results["latency_by_turn_ms"].items())))
    for when, snap in windows(snapshots).items():
        if not snap:
            continue
        s = snap[0] if when != "last" else snap[-1]
        rows.append((f"  {when}: tables", ", ".join(f"{k} {v['commits']:,} commits {v['files']:,} files"
                                                     for k, v in s["tables"].items())))
        rows.append((f"  {when}: disk", ", ".join(f"{k} {s['disk_files'][k]:,} files {s['disk_mb'][k]:,.1f} MB"
                                                   for k in s["disk_mb"])))
        rows.append((f"  {when}: Delta logs", ", ".join(f"{k} {n:,} files" for k, n in s["log_files"].items())))
        rows.append((f"  {when}: memory", f"driver RSS {s['driver_rss_mb']:,.0f} MB, JVM old gen after GC "
                                          f"{s['jvm_old_gen_mb']:,.0f} MB, JVM RSS {s['jvm_rss_mb']:,.0f} MB"))
    if len(snapshots) >= 10:  # does the disk level off? the tables' folders over each tenth of the run
        # Within a tenth the folders rise and fall with the turns (a compaction's output lands at once, the
        # files it replaced go only after the deleted-file retention), so one sample may be a crest or a
        # trough: each tenth's lowest and highest show whether the whole band climbs.
        mb = [sum(size for kind, size in snap["disk_mb"].items() if kind in KINDS) for snap in snapshots]
        bands = [mb[len(mb) * i // 10:len(mb) * (i + 1) // 10] for i in range(10)]
        results["disk_mb_by_tenth"] = [[min(band), max(band)] for band in bands]
        rows.append(("  disk over each tenth", ", ".join(f"{min(band):,.0f}-{max(band):,.0f}" for band in bands)
                     + " MB (tables, lowest-highest)"))
    print(table(rows))
    name = results_name(f"soak-{args.mode}{'-maintained' if args.maintain_every else ''}", "native")
    print(f"\nresults: {write_results(name, results)}")


if __name__ == "__main__":
    main()
