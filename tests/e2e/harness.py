"""Helpers for the connector end-to-end tests: build configs, run stages in-process."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pubsub_connect.config import loader as cfg
from pubsub_connect.io.spark import capabilities
from pubsub_connect.io.tables import table_store
from pubsub_connect.pipelines.context import PipelineContext
from pubsub_connect.pipelines.runner.supervisor import run_stages
from pubsub_connect.pipelines.runtime import connector_stages

PROJECT = "test-project"

#: Worker keys of the two engines: Spark's own Kafka connector and Delta Lake (the default, what
#: Databricks runs), and the stand-ins for machines without an artifact repository.
ENGINES: dict[str, dict[str, str]] = {
    "native": {},
    "fallback": {"pipeline.kafka.implementation": "python", "pipeline.tables.implementation": "delta-rs"},
}


def sink_config(name: str, kafka_topic: str, pubsub_topic: str, **extra: str) -> cfg.ConnectorConfig:
    return cfg.validate_connector({
        "name": name, "connector.class": "com.google.pubsub.kafka.sink.CloudPubSubSinkConnector",
        "topics": kafka_topic, "cps.project": PROJECT, "cps.topic": pubsub_topic, "cps.useEmulator": "true",
        "tasks.max": "2", **extra}, f"<{name}>")


def source_config(name: str, subscription: str, kafka_topic: str, **extra: str) -> cfg.ConnectorConfig:
    return cfg.validate_connector({
        "name": name, "connector.class": "com.google.pubsub.kafka.source.CloudPubSubSourceConnector",
        "cps.project": PROJECT, "cps.subscription": subscription, "kafka.topic": kafka_topic,
        "cps.useEmulator": "true", "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
        **extra}, f"<{name}>")


def lite_source_with_bronze(spark, bootstrap: str, root: Path, name: str,
                            rows: list[tuple[Any, ...]]) -> tuple[PipelineContext, cfg.ConnectorConfig]:
    """A Lite source whose bronze holds ``rows`` (``LITE_BRONZE``'s columns), appended as its pull
    lands them: what a test of the stages after the pull needs, without a Lite server."""
    from pubsub_connect.io.tables import BRONZE, TableRef
    from pubsub_connect.model.schemas import LITE_BRONZE

    ctx = context(spark, bootstrap, root)
    bronze = TableRef(BRONZE, name)
    ctx.store.ensure(bronze, LITE_BRONZE)
    ctx.store.append_batch(bronze, spark.createDataFrame(rows, LITE_BRONZE), "test-lite-pull", 0)
    config = cfg.validate_connector({
        "name": name, "connector.class": "com.google.pubsublite.kafka.source.PubSubLiteSourceConnector",
        "pubsublite.project": PROJECT, "pubsublite.location": "us-central1-a", "pubsublite.subscription": name,
        "kafka.topic": name}, f"<{name}>")
    return ctx, config


def context(spark, bootstrap: str, root: Path, lines: list[str] | None = None, *, once: bool = True,
            **worker: str) -> PipelineContext:
    worker_config = cfg.validate_worker({"bootstrap.servers": bootstrap, "storage.root": str(root), **worker})
    caps = capabilities(spark, worker_config.get("pipeline.kafka.implementation"),
                        worker_config.get("pipeline.tables.implementation"))
    sink = lines.append if lines is not None else (lambda _line: None)
    return PipelineContext(spark, worker_config, caps, table_store(spark, str(root), caps), once=once, progress=sink)


def run_once(spark, bootstrap: str, root: Path, connector: cfg.ConnectorConfig, lines: list[str] | None = None,
             **worker: str) -> PipelineContext:
    ctx = context(spark, bootstrap, root, lines, **worker)
    run_stages(ctx, connector, connector_stages(connector))
    return ctx


def batches_of_one_stage_run(spark, bootstrap: str, root: Path,
                             stage: Callable[[PipelineContext, cfg.ConnectorConfig], Any],
                             connector: cfg.ConnectorConfig, **worker: str) -> int:
    """One ``--once`` run of one stage in a new context (a restart of that stage); returns how
    many of its micro-batches had input."""
    query = stage(context(spark, bootstrap, root, **worker), connector)
    query.awaitTermination()
    return sum(1 for progress in query.recentProgress if progress["numInputRows"])


def scenarios_to_run(request: Any, scenarios_of_test: dict[str, set[str]]) -> set[str]:
    """The scenarios a module-scoped fixture (``request.fixturename``) must prepare and run for
    the tests this session will run: the union of ``scenarios_of_test`` over the selected tests
    that use the fixture.

    A module fixture that runs every scenario in one ``pubsub-connect run`` pays a Spark driver
    and a kill cycle per scenario whether or not a test reads the result; a session that selects
    one test of the module (the compatibility subset on every Spark line, ``-k``) runs only its
    scenarios. A test that uses the fixture but is missing from the table is an error here, not a
    scenario silently left out."""
    fixture = request.fixturename
    users = [item for item in request.session.items
             if getattr(item, "module", None) is request.module and fixture in getattr(item, "fixturenames", ())]
    unknown = sorted({item.originalname for item in users} - set(scenarios_of_test))
    if unknown:
        raise AssertionError(f"{fixture}: no scenarios listed for {unknown}")
    return set().union(*(scenarios_of_test[item.originalname] for item in users))
