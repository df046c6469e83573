# Databricks notebook source
# MAGIC %md
# MAGIC # Replay from bronze
# MAGIC
# MAGIC Publish a range of a sink connector's bronze table again, through its current data model and
# MAGIC publisher settings, to its topic or to `to_topic` (the backfill of a new subscription's topic):
# MAGIC what `pubsub-connect replay` and the bundle's `<connector>_replay` job do.
# MAGIC
# MAGIC Parameters (widgets on Databricks, `--name value` when run as a script): `connector` and
# MAGIC `worker` (the .properties files; secret references are read from the cluster's scope),
# MAGIC `offsets` (`topic:partition:first-last` ranges separated by spaces) or `since`/`until`
# MAGIC (ISO-8601) on `time_column` (`timestamp` or `ingest_time`), `to_topic`, and `dry_run`
# MAGIC (`true`, the default, converts and counts without publishing).

# COMMAND ----------

import importlib.util
import os
import sys
from pathlib import Path

# The bundle's wheel or an install of the project; opened from the bundle's workspace files
# without either, the notebook uses the synced src/ next to it.
if importlib.util.find_spec("pubsub_connect") is None:
    sys.path.insert(0, str(Path.cwd().parent / "src"))

from pubsub_connect import jobs
from pubsub_connect.explore import context
from pubsub_connect.io.databricks_secrets import SECRET_SCOPE_ENV, SecretResolver
from pubsub_connect.pipelines.replay import replay_from_parameters
from pubsub_connect.pipelines.runtime import build_context

# COMMAND ----------

params = context.notebook_params(globals(), {
    "connector": "../resources/config/cps_sink.properties",
    "worker": "../resources/config/worker.properties",
    "offsets": "",
    "since": "",
    "until": "",
    "time_column": "timestamp",
    "to_topic": "",
    "dry_run": "true",
})
run_config = jobs.load_run_config(params["connector"], params["worker"] or None, [],
                                  SecretResolver(None, os.environ.get(SECRET_SCOPE_ENV)))
connector = run_config.connectors[0]
ctx = build_context(run_config.worker, once=True, progress=print)

# COMMAND ----------

report = replay_from_parameters(ctx, connector, params["offsets"], params["since"], params["until"],
                                params["time_column"], params["to_topic"], params["dry_run"])
