"""What a long Delta log costs each append on a local file system, and what trimming it gives back.

    .venv/bin/python benchmarks/delta_log.py [--commits 20000] [--appends 60]

A bronze table as the stages keep it (the store's ``append_batch``: one marked commit of a small
micro-batch, a checkpoint every 100 commits) is appended to ``--appends`` times on a fresh log
(the baseline); then its log gets the files ``--commits`` commits leave (each commit's JSON and
checksum, and the local file system's ``.crc`` beside each, and a checkpoint every 100: written
directly, as commits that changed no data, the checkpoints copies of the table's last one, since
committing 20,000 times through Spark takes over an hour), and it is appended
to again; then maintenance's trim (:func:`pubsub_connect.io.delta_log.trim`, from the checkpoint
before the appender's newest marked commit, which a restart searches for) removes what came
before, and it is appended to once more.

Printed per state: the files in ``_delta_log``, one listing of it by Hadoop's local file system
(what Delta does for every snapshot), and the append's p50 and mean, with its ratio to the
baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import local_session, results_name, table, write_results

from pubsub_connect.io.delta_log import trim
from pubsub_connect.io.tables import BRONZE, STAGE_TABLE_PROPERTIES, SparkDeltaTableStore, TableRef
from pubsub_connect.pipelines.maintenance import newest_marks_from

APP_ID = "bench/ingest@delta-log"


class Appender:
    """Appends one small micro-batch after the other to a bronze table, timing each."""

    def __init__(self, spark: Any, root: Path):
        self.spark = spark
        self.store = SparkDeltaTableStore(spark, str(root))
        self.table = TableRef(BRONZE, "bench")
        self.batch = spark.range(100).selectExpr("id", "repeat('x', 100) AS payload").cache()
        self.store.ensure(self.table, self.batch.schema)
        self.log = Path(self.store.path(self.table)) / "_delta_log"
        self.next_batch = 0
        jvm = spark.sparkContext._jvm
        self._hadoop_log = jvm.org.apache.hadoop.fs.Path(str(self.log))
        self._fs = self._hadoop_log.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def version(self) -> int:
        return max(int(name[:20]) for name in os.listdir(self.log) if name.endswith(".json") and name[:20].isdigit())

    def append(self) -> float:
        started = time.perf_counter()
        self.store.append_batch(self.table, self.batch, APP_ID, self.next_batch)
        self.next_batch += 1
        return (time.perf_counter() - started) * 1000

    def listing_ms(self) -> float:
        timings = []
        for _ in range(5):
            started = time.perf_counter()
            self._fs.listStatus(self._hadoop_log)
            timings.append((time.perf_counter() - started) * 1000)
        return statistics.median(timings)

    def measured(self, appends: int) -> dict[str, float]:
        """``appends`` appends from the commit after a checkpoint on (every state starts alike)."""
        interval = int(STAGE_TABLE_PROPERTIES["delta.checkpointInterval"])
        while (self.version() + 1) % interval:
            self.append()
        self.append()  # writes a checkpoint
        durations = [self.append() for _ in range(appends)]
        return {"log_files": len(os.listdir(self.log)), "listing_ms": self.listing_ms(),
                "append_p50_ms": statistics.median(durations), "append_mean_ms": statistics.mean(durations)}

    def add_commits(self, count: int) -> int:
        """The files of ``count`` commits that changed no data, ending just before a checkpoint's
        version; returns how many."""
        interval = int(STAGE_TABLE_PROPERTIES["delta.checkpointInterval"])
        first = self.version() + 1
        last = ((first + count) // interval) * interval - 1
        line = json.dumps({"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "WRITE",
                                          "operationParameters": {"mode": "Append"}, "isBlindAppend": True}})
        checkpoint = f"{self.version() // interval * interval:020d}.checkpoint.parquet"
        parquet, parquet_crc = (self.log / checkpoint).read_bytes(), (self.log / f".{checkpoint}.crc").read_bytes()
        for version in range(first, last + 1):
            for name in (f"{version:020d}.json", f"{version:020d}.crc"):
                (self.log / name).write_text(line + "\n" if name.endswith(".json") else "")
                (self.log / f".{name}.crc").write_bytes(b"")
            if version % interval == 0:  # where Delta writes a checkpoint: the table's last one again
                (self.log / f"{version:020d}.checkpoint.parquet").write_bytes(parquet)
                (self.log / f".{version:020d}.checkpoint.parquet.crc").write_bytes(parquet_crc)
        return last - first + 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=20_000, help="commits whose log files are added")
    parser.add_argument("--appends", type=int, default=60, help="appends timed per state")
    args = parser.parse_args()
    spark, _ = local_session(2, "bench-delta-log")
    appender = Appender(spark, Path(tempfile.mkdtemp(prefix="bench-delta-log-")))
    for _ in range(30):  # warm-up: the JVM's code, the table's first checkpoint
        appender.append()
    states = {"fresh log": appender.measured(args.appends)}
    added = appender.add_commits(args.commits)
    started = time.perf_counter()
    appender.append()  # the snapshot reads the added commits once
    first_append_s = time.perf_counter() - started
    states[f"+{added:,} commits"] = appender.measured(args.appends)
    trimmed = trim(appender.log, newest_marks_from(appender.log, appender.version()))
    states[f"trimmed ({trimmed.removed:,} files removed)"] = appender.measured(args.appends)
    spark.stop()
    base = states["fresh log"]["append_p50_ms"]
    rows = [(state, f"{s['log_files']:,} log files, listing {s['listing_ms']:,.1f} ms, append p50 "
                    f"{s['append_p50_ms']:,.0f} ms (mean {s['append_mean_ms']:,.0f}), "
                    f"{s['append_p50_ms'] / base:.2f} x fresh") for state, s in states.items()]
    rows.append(("first append after the added commits", f"{first_append_s:,.1f} s (reads them once)"))
    print(table(rows))
    results = {"args": vars(args), "states": states, "first_append_s": first_append_s}
    print(f"\nresults: {write_results(results_name('delta-log', 'native'), results)}")


if __name__ == "__main__":
    main()
