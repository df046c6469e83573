"""What a notebook explores: its parameters (widgets on Databricks, defaults locally), the
connector it names and that connector's table store.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pubsub_connect.config import loader as cfg
from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.keys import ARCHIVE, CPS_SINK, CPS_SOURCE, LITE_SINK, LITE_SOURCE
from pubsub_connect.config.properties import read_properties
from pubsub_connect.io.tables import TableRef, TableStore

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


UTC = dt.timezone.utc

#: Stage order per connector kind, to list a connector's checkpoints in pipeline order.
STAGE_ORDER = {
    CPS_SINK: ("ingest", "convert", "publish"),
    CPS_SOURCE: ("pull", "convert", "produce"),
    LITE_SINK: ("ingest", "convert", "publish"),
    LITE_SOURCE: ("pull", "convert", "produce"),
    ARCHIVE: ("archive",),
}


# --------------------------------------------------------------------------------------------
# Parameters and the store
# --------------------------------------------------------------------------------------------


def notebook_params(namespace: Mapping[str, Any], defaults: Mapping[str, str],
                    argv: Sequence[str] | None = None) -> dict[str, str]:
    """A notebook's parameters: Databricks widgets when ``dbutils`` is in the notebook's globals,
    otherwise (the notebook run as a script) ``--name value`` arguments, then environment
    variables ``PUBSUB_CONNECT_<NAME>``, then ``defaults``."""
    dbutils = namespace.get("dbutils")
    if dbutils is not None:
        for name, default in defaults.items():
            dbutils.widgets.text(name, default)
        return {name: str(dbutils.widgets.get(name)) for name in defaults}
    values = {name: os.environ.get(f"PUBSUB_CONNECT_{name.upper()}", default) for name, default in defaults.items()}
    args = list(sys.argv[1:] if argv is None else argv)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            name = name.replace("-", "_")
            if not eq and i + 1 < len(args):
                value, i = args[i + 1], i + 1
            if name in values:
                values[name] = value
        i += 1
    return values


@dataclass(frozen=True)
class ConnectorRef:
    """A connector as the notebooks know it: its ``name`` (which names tables and checkpoints)
    and, when read from its ``.properties`` file, its kind."""

    name: str
    kind: str | None = None

    @property
    def stages(self) -> tuple[str, ...]:
        return STAGE_ORDER.get(self.kind or "", ())


def connector_ref(value: str) -> ConnectorRef:
    """``value`` is a connector name, or the path of its ``.properties`` file (name and kind are
    read from it without resolving secrets, which the notebooks do not need)."""
    if value.endswith(".properties"):
        raw = read_properties(value)
        if not raw.get("name"):
            raise ConfigError(f"{value}: missing required key name")
        return ConnectorRef(raw["name"].strip(), cfg.connector_kind(raw, value))
    return ConnectorRef(value)


#: The shapes a connector runs in: its jobs (``<connector>.job.yml``, ``pubsub-connect run``) or
#: its declarative pipeline (``<connector>.pipeline.yml``, ``pubsub-connect pipeline run``).
SHAPES = ("jobs", "pipeline")


def open_store(storage_root: str, catalog: str = "", schema: str = "",
               spark: SparkSession | None = None, shape: str = "jobs",
               connector: ConnectorRef | None = None) -> TableStore:
    """The table store a connector's jobs, or its declarative pipeline (``shape``), write to:
    same worker keys, same backend choice. With a catalog and schema both shapes name their
    tables alike; locally a pipeline keeps its own under ``<storage_root>/pipelines/<name>``."""
    from pubsub_connect.io.spark import build_session, capabilities
    from pubsub_connect.io.tables import table_store

    if shape not in SHAPES:
        raise ConfigError(f"shape must be one of {', '.join(SHAPES)}, got {shape!r}")

    raw = {"storage.root": storage_root}
    if catalog:
        raw["storage.catalog"] = catalog
    if schema:
        raw["storage.schema"] = schema
    worker = cfg.validate_worker(raw, "<notebook>")
    session = spark or build_session(worker.spark_conf)
    if shape == "pipeline":
        from pubsub_connect.lakeflow.conf import pipeline_store

        if connector is None or not connector.kind:
            raise ConfigError("the pipeline shape needs the connector's .properties (its kind)")
        return pipeline_store(session, worker, connector.name, connector.kind)
    caps = capabilities(session)
    return table_store(session, worker.storage_root, caps, worker.get("storage.catalog"),
                       worker.get("storage.schema"))


def table_location(store: TableStore, ref: TableRef) -> str:
    """The Unity Catalog name of a table when it has one, else its path."""
    name_of = getattr(store, "table_name", None)
    name = name_of(ref) if name_of else None
    return name.replace("`", "") if name else store.path(ref)
