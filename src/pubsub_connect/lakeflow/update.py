"""One update of a local declarative pipeline, run in a process of its own:
``python -m pubsub_connect.lakeflow.update SPEC.yml``, with ``{"spark_conf": {…},
"configuration": {…}}`` on standard input: the Spark settings and the pipeline's configuration,
which may hold secrets (``--set`` values, ``spark.*`` keys) and so are never written to a file.

Why not the ``spark-pipelines`` script: it starts the Spark Connect server that runs the
pipeline with the fixed port 15002 on every interface, without the session's static settings
(Delta's jars and catalog, a Hive metastore so that a second update finds the tables of the
first); those can only be given through Spark's launcher environment. Here the server is a
plugin of a local Spark session built with exactly those settings, bound to 127.0.0.1 on a free
port and guarded by a random token; the definitions are registered and the update is run with
``pyspark.pipelines``' own functions, as the script does.

Why a process of its own: a Python process has one Spark driver, and the job stages of
``pubsub-connect pipeline run`` (pull before, publish after) already have theirs.

Output: one JSON object per line on stdout — ``{"event": message}`` for each pipeline event,
then ``{"result": "COMPLETED"}`` or ``{"result": "FAILED", "error": first line}`` — and exit code
0 or 1. Everything else (Spark's own logging) goes to stderr, which the caller keeps in a log.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import socket
import sys
from pathlib import Path
from typing import Any

from pubsub_connect.model.error_text import first_line

#: The event with which the pipeline runtime reports a successful update.
COMPLETED_MESSAGE = "Run is COMPLETED."


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


#: The caller's channel for events: the real stdout. ``sys.stdout`` itself is pointed at stderr,
#: since the runtime and the definitions print too.
_EVENTS = sys.stdout


def _emit(record: dict[str, Any]) -> None:
    _EVENTS.write(json.dumps(record) + "\n")
    _EVENTS.flush()


def start_server(spark_conf: dict[str, str]) -> str:
    """A local Spark session with the Spark Connect plugin; returns the client URL."""
    from pyspark.sql import SparkSession

    port, token = _free_port(), secrets.token_hex(16)
    builder = SparkSession.builder.master(spark_conf.pop("spark.master", "local[*]")).appName("pubsub-connect-pipeline")
    conf = {
        **spark_conf,
        "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.connect.authenticate.token": token,
    }
    for key, value in conf.items():
        builder = builder.config(key, value)
    classic = builder.getOrCreate()
    classic.sparkContext.setLogLevel(spark_conf.get("spark.log.level", "WARN"))
    return f"sc://localhost:{port}/;token={token}"


def run_update(spec_path: Path, url: str, configuration: dict[str, str]) -> bool:
    """Register the spec's definitions and run one update with ``configuration`` (in place of
    the spec's); True when it completed."""
    from pyspark.pipelines.cli import load_pipeline_spec, register_definitions
    from pyspark.pipelines.spark_connect_graph_element_registry import SparkConnectGraphElementRegistry
    from pyspark.pipelines.spark_connect_pipeline import create_dataflow_graph, start_run
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    spec = dataclasses.replace(load_pipeline_spec(spec_path), configuration=configuration)
    # pyspark.sql.functions build Spark Connect columns only in this mode (the process also has
    # the classic session that hosts the server, and the functions would build classic ones)
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    # the Connect session class itself: the generic builder refuses a remote session in a process
    # that has a classic one (here: the server's host session)
    builder = RemoteSparkSession.builder.remote(url)
    for key, value in spec.configuration.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    completed = False
    try:
        graph_id = create_dataflow_graph(spark, default_catalog=spec.catalog, default_database=spec.database,
                                         sql_conf=spec.configuration)
        registry = SparkConnectGraphElementRegistry(spark, graph_id)
        register_definitions(spec_path, registry, spec, spark, graph_id)
        events = start_run(spark, graph_id, full_refresh=[], full_refresh_all=False, refresh=[], dry=False,
                           storage=spec.storage)
        try:
            for result in events:
                if "pipeline_event_result" in result:
                    message = result["pipeline_event_result"].event.message
                    completed = completed or message.strip() == COMPLETED_MESSAGE
                    _emit({"event": message})
        except Exception:
            # After the completion event the event stream can still end in an error of the
            # client's own (an unknown response for a Python worker's accumulator): the update
            # itself completed, so that error is not the update's.
            if not completed:
                raise
    finally:
        spark.stop()
    return completed


def main(argv: list[str] | None = None) -> int:
    (spec,) = (argv if argv is not None else sys.argv[1:])[:1]
    settings = json.loads(sys.stdin.read())
    spark_conf, configuration = dict(settings["spark_conf"]), dict(settings["configuration"])
    sys.stdout = sys.stderr
    # the Python the pipeline's UDF workers run must have this package (and its settings) too
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    try:
        completed = run_update(Path(spec), start_server(spark_conf), configuration)
    except Exception as exc:
        _emit({"result": "FAILED", "error": first_line(str(exc)) or type(exc).__name__})
        return 1
    _emit({"result": "COMPLETED" if completed else "FAILED", "error": None if completed else "no completion event"})
    return 0 if completed else 1


if __name__ == "__main__":
    sys.exit(main())
