# Databricks notebook source
# MAGIC %md
# MAGIC # Explore a connector
# MAGIC
# MAGIC Row counts of the connector's bronze, outbox and dead-letter tables, where each stage's
# MAGIC checkpoint stands (with the Kafka lag when `bootstrap_servers` is set), and the newest rows.
# MAGIC
# MAGIC Parameters (widgets on Databricks, `--name value` when run as a script):
# MAGIC `connector` (its .properties file, or its name), `storage_root` (the bundle's variable
# MAGIC `storage_root`), `catalog` and `schema` (empty for path tables), `shape` (`jobs`, or
# MAGIC `pipeline` for the tables of the connector's declarative pipeline), `bootstrap_servers`,
# MAGIC `samples`, `trace` (a record's journey: a sink's Kafka record as `topic/partition@offset`, a Cloud
# MAGIC Pub/Sub source's message id, a Lite source's message as `partition@offset`).

# COMMAND ----------

import importlib.util
import sys
from pathlib import Path

# The bundle's wheel or an install of the project; opened from the bundle's workspace files
# without either, the notebook uses the synced src/ next to it.
if importlib.util.find_spec("pubsub_connect") is None:
    sys.path.insert(0, str(Path.cwd().parent / "src"))

from pubsub_connect.config.keys import CPS_SOURCE, LITE_SOURCE
from pubsub_connect.explore import checkpoints, context, output, source_trace, tables, trace
from pubsub_connect.io.tables import BRONZE, DLQ, OUTBOX, TableRef

# COMMAND ----------

params = context.notebook_params(globals(), {
    "connector": "../resources/config/cps_sink.properties",
    "storage_root": "./.pubsub-connect",
    "catalog": "",
    "schema": "",
    "shape": "jobs",
    "bootstrap_servers": "",
    "samples": "5",
    "trace": "",
})
connector = context.connector_ref(params["connector"])
store = context.open_store(params["storage_root"], params["catalog"], params["schema"], shape=params["shape"],
                           connector=connector)
print(f"connector {connector.name} ({connector.kind or 'kind unknown'}), storage {store.root}")

# COMMAND ----------

# MAGIC %md ## Tables

# COMMAND ----------

counts = tables.table_counts(store, connector.name)
print(output.format_table([
    {"table": kind, "rows": rows, "location": context.table_location(store, TableRef(kind, connector.name))}
    for kind, rows in counts.items()
]))

# COMMAND ----------

# MAGIC %md ## Checkpoints and lag

# COMMAND ----------

print(checkpoints.pipeline_mode(store, connector))
states = checkpoints.connector_checkpoints(store, connector)
print(output.format_table(checkpoints.checkpoint_rows(states)))
kafka_states = [s for s in states if s.partition_offsets()]
if params["bootstrap_servers"] and kafka_states:
    for state in kafka_states:
        topics = {topic for topic, _ in state.partition_offsets()}
        ends = checkpoints.kafka_end_offsets(params["bootstrap_servers"], topics)
        print(output.format_table(checkpoints.offset_rows(state, ends)))

# COMMAND ----------

# MAGIC %md ## Newest rows

# COMMAND ----------

for kind in (BRONZE, OUTBOX, DLQ):
    rows = tables.sample_rows(store, connector.name, kind, limit=int(params["samples"]), width=60)
    print(f"\n{kind} ({len(rows)} newest)")
    print(output.format_table(rows))

# COMMAND ----------

# MAGIC %md ## Trace a record

# COMMAND ----------

if params["trace"] and connector.kind in (CPS_SOURCE, LITE_SOURCE):
    journey = source_trace.trace_message(store, connector.name,
                                         source_trace.parse_message(connector.kind, params["trace"]))
    print("\n".join(journey.lines()))
elif params["trace"]:
    topic, partition, offset = trace.parse_record(params["trace"])
    journey = trace.trace(store, connector.name, topic, partition, offset, trace.notebook_maker(params["connector"]))
    print("\n".join(journey.lines()))
