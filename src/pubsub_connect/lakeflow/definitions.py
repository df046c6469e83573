"""The source file of every connector's Lakeflow Declarative Pipeline.

A pipeline's ``libraries`` name this file; the pipeline runtime (Databricks, or
``spark-pipelines`` locally) executes it with a ``spark`` session in its globals. The
connector it defines comes from the pipeline's configuration (see
:mod:`pubsub_connect.lakeflow.conf`), so one file serves every connector.
"""

from pyspark import pipelines as dp

from pubsub_connect.lakeflow.conf import load_from_conf, pipeline_store, runtime_conf
from pubsub_connect.lakeflow.datasets import define

_run_config = load_from_conf(runtime_conf(spark))  # noqa: F821 - the pipeline runtime provides `spark`
_connector = _run_config.connectors[0]
_store = pipeline_store(spark, _run_config.worker, _connector.name, _connector.kind)  # noqa: F821
define(spark, dp, _run_config, _store)  # noqa: F821
