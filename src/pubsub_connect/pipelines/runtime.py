"""Builds a :class:`PipelineContext` from a worker config and looks up a connector's stages.

Kept apart from ``base`` so that importing the stage types does not start Spark, and from the
CLI so that notebooks and Databricks job entry points build the very same context.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pubsub_connect import config as cfg
from pubsub_connect.io.spark import Capabilities, build_session, capabilities
from pubsub_connect.io.tables import TableStore, table_store
from pubsub_connect.pipelines.base import PipelineContext, Stage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: connector kind → module (under pubsub_connect.pipelines) exposing ``STAGES``.
PIPELINE_MODULES = {
    cfg.CPS_SINK: "cps_sink",
    cfg.CPS_SOURCE: "cps_source",
    cfg.LITE_SINK: "lite_sink",
    cfg.LITE_SOURCE: "lite_source",
    cfg.ARCHIVE: "archive",
}


class NotAvailableError(RuntimeError):
    """The connector kind has no pipeline in this build."""


def stages_for(kind: str) -> Sequence[Stage]:
    module_name = PIPELINE_MODULES[kind]
    try:
        module = importlib.import_module(f"pubsub_connect.pipelines.{module_name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"pubsub_connect.pipelines.{module_name}":
            raise NotAvailableError(f"the {kind} connector is not available in this version") from None
        raise
    return module.STAGES


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
