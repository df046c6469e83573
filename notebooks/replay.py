# Databricks notebook source
# MAGIC %md
# MAGIC # Replay from bronze
# MAGIC
# MAGIC Send a range of a connector's bronze table again, through its current data model and client
# MAGIC settings, to its topic or to `to_topic`: a sink's Kafka records published to Pub/Sub (the backfill
# MAGIC of a new subscription's topic), a source's messages produced to Kafka, one transaction per chunk.
# MAGIC What `pubsub-connect replay` and the bundle's `<connector>_replay` jobs do.
# MAGIC
# MAGIC Parameters (widgets on Databricks, `--name value` when run as a script): `connector` and
# MAGIC `worker` (the .properties files; secret references are read from the cluster's scope),
# MAGIC `offsets` (ranges separated by spaces: a sink's `topic:partition:first-last`, a Lite source's
# MAGIC `partition:first-last`) or `since`/`until` (ISO-8601) on `time_column` (empty: a sink's record
# MAGIC `timestamp`, a source's `publish_time`; or `ingest_time`), `to_topic`, `replay_id` (empty: named by
# MAGIC the range and destination) and `dry_run` (`true`, the default, converts and counts without sending).

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
from pubsub_connect.pipelines.replay.run import replay_from_parameters
from pubsub_connect.pipelines.runtime import build_context

# COMMAND ----------

params = context.notebook_params(globals(), {
    "connector": "../resources/config/cps_sink.properties",
    "worker": "../resources/config/worker.properties",
    "offsets": "",
    "since": "",
    "until": "",
    "time_column": "",
    "to_topic": "",
    "replay_id": "",
    "dry_run": "true",
})
run_config = jobs.load_run_config(params["connector"], params["worker"] or None, [],
                                  SecretResolver(None, os.environ.get(SECRET_SCOPE_ENV)))
connector = run_config.connectors[0]
ctx = build_context(run_config.worker, once=True, progress=print)

# COMMAND ----------

report = replay_from_parameters(ctx, connector, params["offsets"], params["since"], params["until"],
                                params["time_column"], params["to_topic"], params["dry_run"], params["replay_id"])
