"""What compaction rewrites on a table that is kept (bronze's default), turn after turn.

    .venv/bin/python benchmarks/compaction.py [--turns 30] [--appends 20] [--kb 100]

Two Delta tables get the same appends: each turn ``--appends`` small commits of ``--kb`` kB
(new, barely compressible bytes each, as a stage's micro-batches leave them), then one compaction. The baseline
is ``OPTIMIZE`` at Delta's own threshold (every file below 1 GiB, what the command does alone);
the other is maintenance's (:func:`~pubsub_connect.pipelines.maintenance.compaction_threshold`: four
times what the table gained since its last compaction). Printed per table: the bytes compaction
rewrote (the files each ``OPTIMIZE`` replaced, which ``VACUUM`` keeps on disk for the table's
``delta.deletedFileRetentionDuration``) in all and per byte the table holds, the files after the last
turn, the seconds compaction took, and maintenance's figures over the baseline's, measured in the
same run.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import local_session, results_name, table, write_results

from pubsub_connect.io import table_maintenance
from pubsub_connect.pipelines.maintenance import compaction_threshold

#: A row's payload: hex digits of hashes of random UUIDs, which Snappy barely compresses.
ROW_BYTES = 1_024


class KeptTable:
    """A table appended to and compacted each turn, with what its compactions cost."""

    def __init__(self, spark: Any, path: Path, by_maintenance: bool):
        self.spark, self.path, self.target, self.by_maintenance = spark, str(path), f"delta.`{path}`", by_maintenance
        self.rewritten = 0
        self.compaction_s = 0.0
        self.bytes_after_last: int | None = None

    def compact(self) -> None:
        before = table_maintenance.describe(self.spark, self.target).bytes
        below = compaction_threshold(before, self.bytes_after_last) if self.by_maintenance else None
        started = time.perf_counter()
        self.rewritten += table_maintenance.optimize(self.spark, self.target, below).removed_bytes
        self.compaction_s += time.perf_counter() - started
        self.bytes_after_last = table_maintenance.describe(self.spark, self.target).bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=30, help="compactions")
    parser.add_argument("--appends", type=int, default=20, help="commits before each compaction")
    parser.add_argument("--kb", type=int, default=100, help="kB per commit")
    args = parser.parse_args()
    spark, _ = local_session(2, "bench-compaction")
    root = Path(tempfile.mkdtemp(prefix="bench-compaction-"))
    commits = 0

    def new_commit() -> Any:
        """Rows none before had (the same rows again would shrink to a dictionary when compacted;
        ``uuid()``'s seed is fixed when a plan is analysed, so the commit's number goes in too)."""
        return spark.range(args.kb * 1_000 // ROW_BYTES, numPartitions=1).selectExpr("id", (
            f"concat_ws('', transform(sequence(1, {ROW_BYTES // 64}), "
            f"i -> sha2(concat(uuid(), id, i, {commits}), 256))) AS payload"))
    tables = {"Delta's threshold (baseline)": KeptTable(spark, root / "baseline", by_maintenance=False),
              "maintenance's threshold": KeptTable(spark, root / "maintained", by_maintenance=True)}
    size = 0
    for turn in range(args.turns):
        for kept in tables.values():
            for _ in range(args.appends):
                new_commit().write.format("delta").mode("append").save(kept.path)
                commits += 1
            kept.compact()
        size = table_maintenance.describe(spark, tables["maintenance's threshold"].target).bytes
        print(f"[compaction] turn {turn + 1}/{args.turns}: "
              + ", ".join(f"{name} rewrote {kept.rewritten / 1e6:,.1f} MB" for name, kept in tables.items()),
              flush=True)
    figures = {name: {"rewritten_bytes": kept.rewritten, "rewritten_per_byte": kept.rewritten / size,
                      "files": table_maintenance.describe(spark, kept.target).files,
                      "compaction_s": kept.compaction_s} for name, kept in tables.items()}
    spark.stop()
    base, ours = figures["Delta's threshold (baseline)"], figures["maintenance's threshold"]
    rows_out = [(name, f"rewrote {f['rewritten_bytes'] / 1e6:,.1f} MB ({f['rewritten_per_byte']:.2f} per byte "
                       f"kept), {f['files']:,} files, compaction {f['compaction_s']:,.1f} s")
                for name, f in figures.items()]
    rows_out.append(("maintenance / baseline", f"rewritten {ours['rewritten_bytes'] / base['rewritten_bytes']:.3f}, "
                                               f"compaction time {ours['compaction_s'] / base['compaction_s']:.2f}"))
    print(f"{args.turns} turns of {args.appends} commits of {args.kb} kB: {size / 1e6:,.1f} MB in each table")
    print(table(rows_out))
    results = {"args": vars(args), "table_bytes": size, "tables": figures}
    print(f"\nresults: {write_results(results_name('compaction', 'native'), results)}")


if __name__ == "__main__":
    main()
