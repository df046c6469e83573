"""How a pipeline learns its connector: keys of the pipeline's ``configuration``.

Why files and not one key per property: the bundle's jobs read
``resources/config/<connector>.properties``, and the pipeline of the same connector must read
the very same file, so a key changed there changes both shapes. The pipeline's configuration
names the files and may override single keys:

==================================  =========================================================
``pubsub_connect.connector``         the connector's ``.properties`` (required)
``pubsub_connect.worker``            the worker's ``.properties`` (``bootstrap.servers``,
                                     ``storage.*``, ``consumer.*``, …)
``pubsub_connect.set.<KEY>``         overrides ``KEY`` (like ``--set KEY=VALUE``)
``pubsub_connect.secret_scope``      scope of ``${secrets:KEY}`` references
==================================  =========================================================

Both the pipeline runtime (Databricks, or ``spark-pipelines`` locally) and the local runner use
:func:`pipeline_store`, so the job tasks around a pipeline find the tables it defines.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pubsub_connect.config import loader as cfg
from pubsub_connect.config.errors import ConfigError
from pubsub_connect.io.tables import join_location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pubsub_connect.io.databricks_secrets import SecretResolver
    from pubsub_connect.io.tables import TableStore

PREFIX = "pubsub_connect."
CONNECTOR_KEY = PREFIX + "connector"
WORKER_KEY = PREFIX + "worker"
SECRET_SCOPE_KEY = PREFIX + "secret_scope"
OVERRIDE_PREFIX = PREFIX + "set."


def pipeline_configuration(connector_file: str, worker_file: str | None,
                           overrides: Sequence[str] = ()) -> dict[str, str]:
    """The ``configuration`` entries that make a pipeline run ``connector_file``."""
    conf = {CONNECTOR_KEY: connector_file}
    if worker_file:
        conf[WORKER_KEY] = worker_file
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
        conf[OVERRIDE_PREFIX + key.split(":", 1)[-1].strip()] = value
    return conf


def overrides_from(conf: Mapping[str, str]) -> list[str]:
    return [f"{key[len(OVERRIDE_PREFIX):]}={value}" for key, value in sorted(conf.items())
            if key.startswith(OVERRIDE_PREFIX)]


def load_from_conf(conf: Mapping[str, str], resolver: SecretResolver | None = None) -> cfg.RunConfig:
    """The connector and worker a pipeline's ``configuration`` names, loaded like a job task's
    (secret references resolved with ``dbutils``, or ``resolver``)."""
    from pubsub_connect.io.databricks_secrets import SECRET_SCOPE_ENV, SecretResolver

    connector_file = conf.get(CONNECTOR_KEY)
    if not connector_file:
        raise ConfigError(f"the pipeline's configuration has no {CONNECTOR_KEY} (the connector's .properties)")
    if resolver is None:
        resolver = SecretResolver(default_scope=conf.get(SECRET_SCOPE_KEY) or os.environ.get(SECRET_SCOPE_ENV))
    return cfg.load([connector_file], conf.get(WORKER_KEY) or None, overrides_from(conf), resolver.providers)


def runtime_conf(spark: SparkSession) -> dict[str, str]:
    """This session's ``pubsub_connect.*`` settings (the pipeline's configuration)."""
    everything = spark.conf.getAll
    return {key: value for key, value in everything.items() if key.startswith(PREFIX)}


def pipeline_root(worker: cfg.WorkerConfig, connector: str) -> str:
    """Where a local pipeline of ``connector`` keeps everything: ``<storage.root>/pipelines/<name>``
    (absolute: the pipeline runtime imports its sources from another working directory)."""
    root = worker.storage_root
    return join_location(root if "://" in root else str(Path(root).resolve()), "pipelines", connector)


def pipeline_warehouse(worker: cfg.WorkerConfig, connector: str) -> str:
    """The local pipeline's warehouse: the tables it defines are ``<warehouse>/<kind>_<name>``."""
    return join_location(pipeline_root(worker, connector), "tables")


def pipeline_store(spark: SparkSession, worker: cfg.WorkerConfig, name: str, kind: str) -> TableStore:
    """The tables of connector ``name``'s pipeline: Unity Catalog tables named like the jobs'
    where the worker names a catalog and schema (Databricks), else :class:`PipelineTableStore`
    paths."""
    from pubsub_connect.io.tables import PipelineTableStore, SparkDeltaTableStore
    from pubsub_connect.lakeflow.datasets import managed_kinds

    catalog, schema = worker.get("storage.catalog"), worker.get("storage.schema")
    if catalog and schema:
        return SparkDeltaTableStore(spark, worker.storage_root, catalog, schema)
    return PipelineTableStore(spark, pipeline_root(worker, name), pipeline_warehouse(worker, name),
                              managed_kinds(kind))
