"""Builds a :class:`PipelineContext` from a worker config and looks up a connector's stages.

Kept apart from ``base`` so that importing the stage types does not start Spark, and from the
CLI so that notebooks and Databricks job entry points build the very same context.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pubsub_connect.config import loader as cfg
from pubsub_connect.config.keys import ARCHIVE, CPS_SINK, CPS_SOURCE, LITE_SINK, LITE_SOURCE
from pubsub_connect.io.spark import Capabilities, build_session, capabilities
from pubsub_connect.io.tables import TableStore, table_store
from pubsub_connect.pipelines.context import PipelineContext, Stage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: connector kind → module (under pubsub_connect.pipelines) exposing ``STAGES``.
PIPELINE_MODULES = {
    CPS_SINK: "cps_sink",
    CPS_SOURCE: "cps_source",
    LITE_SINK: "lite_sink",
    LITE_SOURCE: "lite_source",
    ARCHIVE: "archive.stage",
}


class NotAvailableError(RuntimeError):
    """The connector kind has no pipeline in this build."""


def stages_for(kind: str, mode: str = "staged") -> Sequence[Stage]:
    """A connector kind's stages in ``mode`` (``pipeline.mode``): its module's ``FUSED_STAGES``
    when fused and it has them, else its ``STAGES`` (see :func:`has_fused_form`)."""
    module_name = PIPELINE_MODULES[kind]
    try:
        module = importlib.import_module(f"pubsub_connect.pipelines.{module_name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"pubsub_connect.pipelines.{module_name}":
            raise NotAvailableError(f"the {kind} connector is not available in this version") from None
        raise
    if mode == "fused" and hasattr(module, "FUSED_STAGES"):
        return module.FUSED_STAGES
    return module.STAGES


def connector_stages(config: cfg.ConnectorConfig, progress: Callable[[str], None] | None = None) -> Sequence[Stage]:
    """The stages a connector runs, by its ``pipeline.mode``. A connector asked to run fused that
    has no fused form runs staged, and ``progress`` says so (the archive is one query either way)."""
    mode = str(config.get("pipeline.mode"))
    stages = stages_for(config.kind, mode)
    if mode == "fused" and len(stages) > 1 and progress is not None:
        progress(f"[{config.name}] pipeline.mode=fused: the {config.kind} connector has no fused form; "
                 "it runs staged")
    return stages


def apply_tasks_max(run_config: cfg.RunConfig) -> None:
    """``tasks.max`` (Connect's task count: a connector's parallelism) → the session's
    ``spark.sql.shuffle.partitions``, unless the worker sets it.

    The stages apply ``tasks.max`` themselves where they choose their parallelism (publish
    partitions of the sinks, pullers of the Pub/Sub source); the shuffles of the convert stages
    (joins, aggregations) take the session's partition count, so this sets that count to the
    same number. A session is shared by the connectors of one run: the largest ``tasks.max``
    wins. ``pubsub-connect run`` and the jobs call this before building the session, so a stage
    runs with the same parallelism in both.
    """
    worker = run_config.worker
    if "spark.sql.shuffle.partitions" not in worker.passthrough:
        tasks = max(int(c.get("tasks.max")) for c in run_config.connectors)
        worker.passthrough["spark.sql.shuffle.partitions"] = str(tasks)


def build_context(worker: cfg.WorkerConfig, once: bool = True, progress: Callable[[str], None] = print,
                  store: Callable[[SparkSession, Capabilities], TableStore] | None = None) -> PipelineContext:
    """The session, its capabilities and the table store; ``store`` picks another table layout
    than the jobs' (a declarative pipeline's tables)."""
    kafka_impl = worker.get("pipeline.kafka.implementation")
    table_impl = worker.get("pipeline.tables.implementation")
    spark = build_session(worker.spark_conf, kafka_impl=kafka_impl, table_impl=table_impl)
    caps = capabilities(spark, kafka_impl, table_impl)
    tables = store(spark, caps) if store else table_store(spark, worker.storage_root, caps,
                                                           worker.get("storage.catalog"), worker.get("storage.schema"))
    return PipelineContext(spark, worker, caps, tables, once=once, progress=progress)
