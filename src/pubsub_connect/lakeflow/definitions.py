"""The source file of every connector's Lakeflow Declarative Pipeline.

A pipeline's ``libraries`` name this file; the pipeline runtime (Databricks, or
``spark-pipelines`` locally) executes it with its session (see :func:`_pipeline_session`). The
connector it defines comes from the pipeline's configuration (see
:mod:`pubsub_connect.lakeflow.conf`), so one file serves every connector.
"""

from pubsub_connect.io.spark_versions import check_spark

check_spark()  # the pipeline runtime's Spark, before anything imports what an unsupported one lacks

from pyspark import pipelines as dp  # noqa: E402 - after the check
from pyspark.sql import SparkSession  # noqa: E402

from pubsub_connect.lakeflow.conf import load_from_conf, pipeline_store, runtime_conf  # noqa: E402
from pubsub_connect.lakeflow.datasets import define  # noqa: E402


def _pipeline_session() -> SparkSession:
    """The pipeline's session: Databricks and Spark 4.2's runner put ``spark`` in this file's
    globals; Spark 4.1's runner does not, and registers the definitions with its active session."""
    provided = globals().get("spark")
    return provided if provided is not None else SparkSession.active()


_spark = _pipeline_session()
_run_config = load_from_conf(runtime_conf(_spark))
_connector = _run_config.connectors[0]
_store = pipeline_store(_spark, _run_config.worker, _connector.name, _connector.kind)
define(_spark, dp, _run_config, _store)
