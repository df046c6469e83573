"""Run every benchmark with small-but-meaningful sizes; write a summary JSON and a PNG chart.

    .venv/bin/python benchmarks/run_all.py [--full] [--only convert,ordering] [--timeout 1800]

Each benchmark script runs in its own process (one Spark session and one set of local services
at a time, nothing shared between them), one after the other. Its output goes to
``benchmarks/results/<name>.log``; the figures come from the JSON it writes
(``benchmarks/results/<name>.json``), or — for scripts that only print — from its output.
Everything is collected in ``benchmarks/results/summary.json`` with the machine and, per
benchmark, the load average before and after (figures are only comparable at a similar load),
and drawn in ``benchmarks/results/summary.png`` when matplotlib is installed. ``--only`` re-runs
some benchmarks and updates their entries in the existing summary.

``--full`` uses the full sizes (100k-record sink runs, larger conversion runs, latency at 1,000 msg/s);
the default sizes took about 13 minutes on 2 idle cores before ``vs_google`` (Google's connector
against ours: a few minutes more per engine). ``cps_sink-fallback``, ``cps_source-fallback``,
``lite-fallback`` and ``vs_google-fallback`` run the same scripts with ``--engine fallback``, so
the end-to-end figures of both engines come from one run. ``cps_sink-continuous``,
``cps_source-continuous``, ``archive-continuous`` and ``lite-continuous`` run ``cps_sink.py`` /
``cps_source.py`` / ``archive.py`` / ``lite.py`` with ``--mode continuous`` (the connector's stages
together, default batch size); ``lite-source-continuous`` runs ``lite.py`` with ``--mode continuous
--direction source``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import RESULTS, machine, table

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Benchmark:
    name: str
    small: tuple[str, ...]
    full: tuple[str, ...]
    #: For scripts that print but write no JSON: label → regex with one number group.
    printed: tuple[tuple[str, str], ...] = ()
    #: Run on the fallback engine (the Python Kafka source and delta-rs) instead of the native one.
    fallback: bool = False
    #: The script, when the name does not say it (``<script>[-continuous][-fallback]``).
    script_name: str = ""

    @property
    def script(self) -> str:
        return self.script_name or self.name.removesuffix("-fallback").removesuffix("-continuous")


BENCHMARKS = (
    Benchmark("cps_sink", ("--records", "100000"), ("--records", "1000000")),
    # The same sink with its stages running together at the default batch size, as deployed.
    Benchmark("cps_sink-continuous", ("--mode", "continuous", "--records", "100000"),
              ("--mode", "continuous", "--records", "500000")),
    Benchmark("convert", ("--records", "100000", "--reference-records", "20000", "--rounds", "3"),
              ("--records", "400000", "--reference-records", "50000", "--rounds", "5")),
    Benchmark("source_convert", ("--records", "100000", "--reference-records", "20000", "--rounds", "3"),
              ("--records", "400000", "--reference-records", "50000", "--rounds", "5")),
    Benchmark("ordering", ("--records", "50000", "--rounds", "2"), ("--records", "100000", "--rounds", "4")),
    # --full at the rate of the latency goal (1,000 msg/s), long enough for a first and last third
    Benchmark("latency", ("--rate", "50", "--seconds", "20"), ("--rate", "1000", "--seconds", "60")),
    Benchmark("kafka_source", ("--records", "1000000", "--rounds", "3", "--min-ratio", "0"),
              ("--records", "3000000", "--rounds", "3", "--min-ratio", "0"),
              printed=(("ratio", r"ratio reader/bare: ([\d.]+)"),
                       ("reader_records_per_s", r"python reader -> noop sink:\s+([\d,]+) records/s"),
                       ("bare_records_per_s", r"bare confluent-kafka consumer: ([\d,]+) records/s"))),
    Benchmark("blockgzip", ("--records", "50000", "--rounds", "3"), ("--records", "100000", "--rounds", "5"),
              printed=(("ratio_events", r"\[events\][\s\S]*?ratio writer/zlib: ([\d.]+)"),
                       ("ratio_small", r"\[small\][\s\S]*?ratio writer/zlib: ([\d.]+)"))),
    Benchmark("cps_source", ("--records", "20000"), ("--records", "100000")),
    # The emulator's streaming pull serves ~2,000 msg/s: 100k records take a minute to drain.
    Benchmark("cps_source-continuous", ("--mode", "continuous", "--records", "50000"),
              ("--mode", "continuous", "--records", "100000")),
    # full: 200k-record micro-batches (one 1M-record batch of 1 KB would be ~1 GB of Arrow in a 2g driver)
    Benchmark("archive", ("--records", "100000"), ("--records", "1000000", "--batch", "200000")),
    Benchmark("archive-continuous", ("--mode", "continuous", "--records", "200000"),
              ("--mode", "continuous", "--records", "500000")),
    Benchmark("lite", ("--records", "100000"), ("--records", "1000000")),
    Benchmark("lite-continuous", ("--mode", "continuous", "--records", "100000"),
              ("--mode", "continuous", "--records", "500000")),
    # The Lite source's micro-batches are ~58k messages (partition flow control): below ~500k the
    # 10-90% window holds only a few of them.
    Benchmark("lite-source-continuous", ("--mode", "continuous", "--direction", "source", "--records", "200000"),
              ("--mode", "continuous", "--direction", "source", "--records", "500000"), script_name="lite"),
    # Google's connector in Kafka Connect and ours, both directions; the source at cps_source's sizes.
    Benchmark("vs_google", ("--records", "50000", "--source-records", "20000"),
              ("--records", "100000", "--source-records", "100000")),
    # The same end-to-end runs on the fallback engine, for the side-by-side figures.
    Benchmark("cps_sink-fallback", ("--records", "100000"), ("--records", "1000000"), fallback=True),
    Benchmark("cps_source-fallback", ("--records", "20000"), ("--records", "100000"), fallback=True),
    Benchmark("lite-fallback", ("--records", "100000"), ("--records", "1000000"), fallback=True),
    Benchmark("vs_google-fallback", ("--records", "50000", "--source-records", "20000"),
              ("--records", "100000", "--source-records", "100000"), fallback=True),
)


def run_one(bench: Benchmark, full: bool, timeout_s: float) -> dict[str, Any]:
    """Run one script; returns its status, duration and figures (JSON written during this run)."""
    script = HERE / f"{bench.script}.py"
    json_path = RESULTS / f"{bench.name}.json"
    log_path = RESULTS / f"{bench.name}.log"
    args = (*(bench.full if full else bench.small), *(("--engine", "fallback") if bench.fallback else ()))
    started_wall = time.time()
    started = time.monotonic()
    load_before = os.getloadavg()
    with open(log_path, "w") as log:
        try:
            proc = subprocess.run([sys.executable, str(script), *args], cwd=HERE, stdout=log,
                                  stderr=subprocess.STDOUT, timeout=timeout_s, check=False)
            status = "ok" if proc.returncode == 0 else f"exit {proc.returncode}"
        except subprocess.TimeoutExpired:
            status = f"timeout after {timeout_s:.0f} s"
    entry: dict[str, Any] = {"args": list(args), "status": status, "seconds": round(time.monotonic() - started, 1),
                             "finished": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "load_average_before": load_before,
                             "load_average_after": os.getloadavg(), "log": str(log_path.relative_to(HERE))}
    if json_path.exists() and json_path.stat().st_mtime >= started_wall:
        entry["results"] = json.loads(json_path.read_text())
    output = log_path.read_text(errors="replace")
    if bench.printed:
        figures: dict[str, float] = {}
        for label, pattern in bench.printed:
            match = re.search(pattern, output)
            if match:
                figures[label] = float(match.group(1).replace(",", ""))
        entry["results"] = figures
    if status != "ok":
        entry["output_tail"] = output[-2000:]
    return entry


def headline(name: str, results: dict[str, Any]) -> list[tuple[str, float, str]]:
    """The figures worth a bar: ``(label, value, kind)`` where kind is ``ratio`` or ``seconds``."""
    out: list[tuple[str, float, str]] = []
    if name == "cps_sink" and "ratio" in results:
        out.append(("sink e2e / slower bare client", results["ratio"], "ratio"))
    elif name == "cps_sink-continuous" and "ratio" in results:
        out.append(("sink continuous steady / slower bare client", results["ratio"], "ratio"))
    elif name == "convert":
        for converter, figures in results.get("converters", {}).items():
            baseline = "per-record mapping" if converter.startswith("lite") else "ref"
            out.append((f"convert {converter}: batch/{baseline} per core", figures["ratio_per_core"], "ratio"))
    elif name == "ordering" and "ratio" in results:
        out.append(("ordering partition/none", results["ratio"], "ratio"))
    elif name == "latency":
        lat = results.get("latency", {})
        if lat:
            out.append(("latency p50", lat["p50_ms"] / 1000, "seconds"))
            out.append(("latency p99", lat["p99_ms"] / 1000, "seconds"))
        if "cold_start_s" in results:
            out.append(("cold start", results["cold_start_s"], "seconds"))
    elif name == "kafka_source" and "ratio" in results:
        out.append(("kafka reader / bare consumer", results["ratio"], "ratio"))
    elif name == "blockgzip":
        for key in ("ratio_events", "ratio_small"):
            if key in results:
                out.append((f"block-gzip / zlib ({key[6:]})", results[key], "ratio"))
    elif name == "cps_source" and "ratio" in results:
        out.append(("source e2e / slower bare client", results["ratio"], "ratio"))
    elif name == "cps_source-continuous" and "ratio" in results:
        out.append(("source continuous steady / slower bare client", results["ratio"], "ratio"))
    elif name == "archive" and "ratio" in results:
        out.append(("archive e2e / slower bare client", results["ratio"], "ratio"))
    elif name == "archive-continuous" and "ratio" in results:
        out.append(("archive continuous steady / slower bare client", results["ratio"], "ratio"))
    elif name == "vs_google":
        for direction in ("sink", "source"):
            if "ratio" in results.get(direction, {}):
                out.append((f"{direction}: ours / Google's connector", results[direction]["ratio"], "ratio"))
    elif name == "lite-continuous" and "ratio" in results:
        out.append(("lite sink continuous steady / slower bare client", results["ratio"], "ratio"))
    elif name == "lite-source-continuous" and "ratio" in results:
        out.append(("lite source continuous steady / slower bare client", results["ratio"], "ratio"))
    elif name == "lite":
        for direction in ("sink", "source"):
            if f"{direction}_ratio" in results:
                out.append((f"lite {direction} e2e / slower bare client", results[f"{direction}_ratio"], "ratio"))
    return out


def plot(bars: list[tuple[str, float, str]], path: Path, title: str) -> bool:
    """A two-panel bar chart (ratios; seconds). False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    ratios = [(label, value) for label, value, kind in bars if kind == "ratio"]
    seconds = [(label, value) for label, value, kind in bars if kind == "seconds"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 0.45 * max(len(ratios), len(seconds), 4) + 1.5),
                             gridspec_kw={"width_ratios": [3, 2]})
    for ax, data, xlabel in ((axes[0], ratios, "ratio (same run; 1.0 = as fast as the reference)"),
                             (axes[1], seconds, "seconds (lower is better)")):
        labels = [label for label, _ in data][::-1]
        values = [value for _, value in data][::-1]
        ax.barh(labels, values, color="#4878a8")
        for y, value in enumerate(values):
            ax.text(value, y, f" {value:.2f}", va="center", fontsize=8)
        ax.set_xlabel(xlabel)
        if data is ratios:
            ax.axvline(1.0, color="grey", linestyle="--", linewidth=1)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="the full sizes (slower)")
    parser.add_argument("--only", default="", help="comma-separated benchmark names")
    parser.add_argument("--timeout", type=float, default=1800, help="per benchmark, seconds")
    args = parser.parse_args()
    only = {n.strip() for n in args.only.split(",") if n.strip()}
    unknown = only - {b.name for b in BENCHMARKS}
    if unknown:
        parser.error(f"unknown benchmark(s) {sorted(unknown)}; choose from {[b.name for b in BENCHMARKS]}")
    RESULTS.mkdir(exist_ok=True)

    summary_path = RESULTS / "summary.json"
    summary: dict[str, Any] = {"benchmarks": {}}
    if only and summary_path.exists():  # --only updates those entries of the last summary
        summary = json.loads(summary_path.read_text())
    summary.update({"machine": machine(), "updated": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                    "sizes": "full" if args.full else "small"})
    for bench in BENCHMARKS:
        if only and bench.name not in only:
            continue
        if not (HERE / f"{bench.script}.py").exists():
            summary["benchmarks"][bench.name] = {"status": "not present"}
            continue
        print(f"running {bench.name} …", flush=True)
        entry = run_one(bench, args.full, args.timeout)
        summary["benchmarks"][bench.name] = entry
        print(f"  {entry['status']} in {entry['seconds']:.0f} s (log: {entry['log']})", flush=True)

    bars = [(label + (" (fallback)" if name.endswith("-fallback") else ""), value, kind)
            for name, entry in summary["benchmarks"].items()
            for label, value, kind in headline(name.removesuffix("-fallback"), entry.get("results", {}))]
    summary["headline"] = [{"figure": label, "value": value, "kind": kind} for label, value, kind in bars]
    summary_path.write_text(json.dumps(summary, indent=2))
    rows = [(label, f"{value:.2f}" + (" s" if kind == "seconds" else "")) for label, value, kind in bars]
    rows += [(name, entry["status"]) for name, entry in summary["benchmarks"].items() if entry["status"] != "ok"]
    if rows:
        print(table(rows))
    loads = [e["load_average_before"][0] for e in summary["benchmarks"].values() if "load_average_before" in e]
    load = f"{min(loads):.1f}-{max(loads):.1f}" if loads else "?"
    title = (f"pubsub-connect benchmarks ({summary['sizes']} sizes), {summary['machine']['cpus']} CPUs, "
             f"1-min load average at each start: {load}, {summary['updated']}")
    png = RESULTS / "summary.png"
    if bars and plot(bars, png, title):
        print(f"plot: {png}")
    elif bars:
        print("plot skipped: matplotlib is not installed (pip install matplotlib)")
    print(f"summary: {summary_path}")
    return 0 if all(e["status"] in ("ok", "not present") for e in summary["benchmarks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
