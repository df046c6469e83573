# Databricks notebook source
# MAGIC %md
# MAGIC # Checkpoint offsets
# MAGIC
# MAGIC The last committed source offsets of every stage of a connector, read from the stage's
# MAGIC Spark checkpoint (`offsets/<N>` of the last `commits/<N>`): for Kafka sources the next
# MAGIC offset per topic-partition — the Kafka Connect offsets of the original connector — and
# MAGIC with `bootstrap_servers` the end offsets and lag; for table sources the Delta version.

# COMMAND ----------

import importlib.util
import sys
from pathlib import Path

# The bundle's wheel or an install of the project; opened from the bundle's workspace files
# without either, the notebook uses the synced src/ next to it.
if importlib.util.find_spec("pubsub_connect") is None:
    sys.path.insert(0, str(Path.cwd().parent / "src"))

from pubsub_connect.explore import checkpoints, context, output

# COMMAND ----------

params = context.notebook_params(globals(), {
    "connector": "../resources/config/cps_sink.properties",
    "storage_root": "./.pubsub-connect",
    "catalog": "",
    "schema": "",
    "bootstrap_servers": "",
})
connector = context.connector_ref(params["connector"])
store = context.open_store(params["storage_root"], params["catalog"], params["schema"])
states = checkpoints.connector_checkpoints(store, connector)
print(f"connector {connector.name}: {len(states)} checkpoint(s) under {store.root}")

# COMMAND ----------

for state in states:
    print(f"\n{state.stage}: last committed batch {state.last_committed}, "
          f"pending batch {state.pending if state.pending is not None else '-'} ({state.path})")
    if state.partition_offsets():
        ends = None
        if params["bootstrap_servers"]:
            topics = {topic for topic, _ in state.partition_offsets()}
            ends = checkpoints.kafka_end_offsets(params["bootstrap_servers"], topics)
        print(output.format_table(checkpoints.offset_rows(state, ends)))
    else:
        print(f"position: {checkpoints.describe_position(state.committed)}")
