# Databricks notebook source
# MAGIC %md
# MAGIC # Throughput and latency
# MAGIC
# MAGIC Rows committed per time bucket to the connector's tables, from their Delta history (each
# MAGIC micro-batch of a stage is one commit), and the ingest latency per bucket: how long after
# MAGIC its own timestamp a record landed in bronze. Plotted when matplotlib is available.

# COMMAND ----------

import importlib.util
import sys
from pathlib import Path

# The bundle's wheel or an install of the project; opened from the bundle's workspace files
# without either, the notebook uses the synced src/ next to it.
if importlib.util.find_spec("pubsub_connect") is None:
    sys.path.insert(0, str(Path.cwd().parent / "src"))

from pubsub_connect.explore import context, history, output
from pubsub_connect.io.tables import BRONZE, DLQ, OUTBOX

# COMMAND ----------

params = context.notebook_params(globals(), {
    "connector": "../resources/config/cps_sink.properties",
    "storage_root": "./.pubsub-connect",
    "catalog": "",
    "schema": "",
    "bucket_seconds": "60",
})
connector = context.connector_ref(params["connector"])
store = context.open_store(params["storage_root"], params["catalog"], params["schema"])
bucket = int(params["bucket_seconds"])

# COMMAND ----------

# MAGIC %md ## Throughput

# COMMAND ----------

series = {}
for kind in (BRONZE, OUTBOX, DLQ):
    points = history.throughput(history.table_commits(store, connector.name, kind), bucket)
    series[kind] = points
    print(f"\n{kind}: {sum(p.rows for p in points)} rows in {sum(p.commits for p in points)} commits")
    print(output.format_table([{"bucket_start": p.start, "commits": p.commits, "rows": p.rows,
                                 "rows_per_second": p.rows_per_second} for p in points]))
for kind, points in series.items():
    if points:
        output.plot_series(f"{connector.name} {kind}: rows/s per {bucket}s", [p.start for p in points],
                            {kind: [p.rows_per_second for p in points]}, "rows/s")

# COMMAND ----------

# MAGIC %md ## Ingest latency

# COMMAND ----------

latency = history.latency(store, connector.name, bucket)
print(output.format_table([{"bucket_start": p.start, "records": p.records, "p50_s": p.p50_seconds,
                             "p95_s": p.p95_seconds, "max_s": p.max_seconds} for p in latency]))
if latency:
    output.plot_series(f"{connector.name}: ingest latency", [p.start for p in latency],
                        {"p50": [p.p50_seconds for p in latency], "p95": [p.p95_seconds for p in latency]},
                        "seconds")
