"""The pieces of the declarative pipelines that need no pipeline run: how a pipeline's
configuration names its connector, where a local pipeline keeps its tables, and how the local
runner reads an update's events and errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from pubsub_connect.config import loader as cfg
from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.keys import CPS_SINK, CPS_SOURCE, LITE_SINK, LITE_SOURCE
from pubsub_connect.io.tables import BRONZE, DLQ, OUTBOX, PipelineTableStore, TableRef
from pubsub_connect.lakeflow import conf, local
from pubsub_connect.lakeflow.datasets import DEFINERS, check_declarable, dataset_name, managed_kinds
from pubsub_connect.model.error_text import clean_error

SINK = {"name": "orders.to-pubsub", "connector.class": "cps-sink", "topics": "orders", "cps.project": "p",
        "cps.topic": "t"}


def _write(path: Path, values: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


def test_configuration_round_trips_files_and_overrides(tmp_path: Path) -> None:
    connector = _write(tmp_path / "sink.properties", {**SINK, "cps.project": "${env:NOT_SET_ANYWHERE}"})
    worker = _write(tmp_path / "worker.properties", {"bootstrap.servers": "k:9092", "storage.root": "/data"})
    pipeline_conf = conf.pipeline_configuration(str(connector), str(worker),
                                                ["cps.project=real", "orders.to-pubsub:tasks.max=3"])
    assert pipeline_conf == {
        "pubsub_connect.connector": str(connector),
        "pubsub_connect.worker": str(worker),
        "pubsub_connect.set.cps.project": "real",
        "pubsub_connect.set.tasks.max": "3",
    }
    run_config = conf.load_from_conf({**pipeline_conf, "spark.other": "ignored"})
    (connector_config,) = run_config.connectors
    assert (connector_config.get("cps.project"), connector_config.get("tasks.max")) == ("real", 3)
    assert run_config.worker.bootstrap_servers == "k:9092"


def test_configuration_errors_are_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^--set 'cps.project': expected KEY=VALUE$"):
        conf.pipeline_configuration("c.properties", None, ["cps.project"])
    with pytest.raises(ConfigError, match=r"^the pipeline's configuration has no pubsub_connect.connector "
                                              r"\(the connector's .properties\)$"):
        conf.load_from_conf({"pubsub_connect.worker": "w.properties"})


def test_local_pipeline_tables_live_in_its_warehouse(tmp_path: Path) -> None:
    worker = cfg.validate_worker({"storage.root": str(tmp_path / "root")})
    root = tmp_path / "root" / "pipelines" / "orders.to-pubsub"
    assert conf.pipeline_root(worker, "orders.to-pubsub") == str(root)
    store = conf.pipeline_store(None, worker, "orders.to-pubsub", CPS_SOURCE)  # type: ignore[arg-type]
    assert isinstance(store, PipelineTableStore)
    # the pipeline's own tables: named like catalog tables, in its warehouse
    assert store.path(TableRef(OUTBOX, "orders.to-pubsub")) == str(root / "tables" / "outbox_orders_to_pubsub")
    assert store.path(TableRef(DLQ, "orders.to-pubsub")) == str(root / "tables" / "dlq_orders_to_pubsub")
    # the pull stage's bronze and the job stages' checkpoints: the jobs' layout under the pipeline's root
    assert store.path(TableRef(BRONZE, "orders.to-pubsub")) == str(root / "bronze" / "orders.to-pubsub")
    assert store.checkpoint("orders.to-pubsub", "pull") == str(root / "checkpoints" / "orders.to-pubsub" / "pull")
    assert dataset_name(OUTBOX, "orders.to-pubsub") == "outbox_orders_to_pubsub"


def test_catalog_pipelines_name_tables_like_the_jobs() -> None:
    worker = cfg.validate_worker({"storage.root": "/Volumes/c/s/v", "storage.catalog": "c", "storage.schema": "s"})
    store = conf.pipeline_store(None, worker, "orders.to-pubsub", CPS_SINK)  # type: ignore[arg-type]
    assert not isinstance(store, PipelineTableStore)
    assert store.table_name(TableRef(OUTBOX, "orders.to-pubsub")) == "`c`.`s`.`outbox_orders_to_pubsub`"


def test_each_declarable_kind_says_what_it_owns_and_how_it_runs() -> None:
    assert sorted(DEFINERS) == sorted(local.JOB_STAGES) == [CPS_SINK, CPS_SOURCE, LITE_SINK,
                                                            LITE_SOURCE]
    assert managed_kinds(CPS_SINK) == {BRONZE, OUTBOX, DLQ}
    assert managed_kinds(CPS_SOURCE) == {OUTBOX, DLQ}
    assert managed_kinds(LITE_SOURCE) == {OUTBOX}
    assert local.JOB_STAGES[CPS_SOURCE] == (("pull",), ("produce",))
    assert local.JOB_STAGES[LITE_SINK] == ((), ("publish",))


def test_the_archive_has_no_declarative_variant(tmp_path: Path) -> None:
    archive = cfg.validate_connector({"name": "a", "connector.class": "archive", "topics": "t",
                                      "output.path": str(tmp_path), "local.buffer.dir": str(tmp_path)},
                                     "archive.properties")
    with pytest.raises(ConfigError) as failure:
        check_declarable(archive)
    assert str(failure.value) == (
        "archive.properties: a archive connector has no declarative pipeline (connectors that have one: "
        "cps_sink, cps_source, lite_sink, lite_source); run it with `pubsub-connect run` or its job")


def test_update_events_become_progress_lines() -> None:
    lines: list[str] = []
    for event in ("Flow spark_catalog.default.outbox_x is QUEUED.",
                  "Flow spark_catalog.default.outbox_x has COMPLETED.",
                  "Flow 'spark_catalog.default.dlq_x' has FAILED.", "Run is COMPLETED."):
        local._report_event("x", event, lines.append)
    assert lines == ["[x.pipeline] outbox_x completed", "[x.pipeline] dlq_x failed"]


def test_update_errors_lose_spark_decoration(tmp_path: Path) -> None:
    assert clean_error("[USER_RAISED_EXCEPTION] record t/0@1 cannot be converted: X SQLSTATE: P0001") == (
        "record t/0@1 cannot be converted: X")
    assert clean_error("[TABLE_OR_VIEW_NOT_FOUND] The table `b` cannot be found. SQLSTATE: 42P01\nmore") == (
        "The table `b` cannot be found.")
    log = _write(tmp_path / "update.log", {"a": "b"})
    assert local.raised_error(log) is None
    log.write_text("noise\norg.apache.spark.SparkRuntimeException: [USER_RAISED_EXCEPTION] record t/0@1 bad "
                   "SQLSTATE: P0001\n\tat x\n")
    assert local.raised_error(log) == "[USER_RAISED_EXCEPTION] record t/0@1 bad SQLSTATE: P0001"
    assert local.raised_error(tmp_path / "missing.log") is None


def test_spec_names_absolute_files_and_the_effective_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    monkeypatch.chdir(tmp_path)
    connector = _write(tmp_path / "sink.properties", SINK)
    worker = cfg.validate_worker({"storage.root": "state", "bootstrap.servers": "127.0.0.1:1234"})
    config = cfg.validate_connector(SINK, "sink.properties", worker=worker)
    spec = local.write_spec(worker, config, "sink.properties", None, ["tasks.max=2", "gcp.credentials.json={}"])
    root = tmp_path / "state" / "pipelines" / "orders.to-pubsub"
    assert spec.path == root / "spec" / "spark-pipeline.yml"
    assert spec.configuration["pubsub_connect.set.gcp.credentials.json"] == "{}"  # given to the update on stdin
    assert json.loads(spec.path.read_text()) == {
        "name": "pubsub-connect-orders.to-pubsub",
        "storage": (root / "system").as_uri(),
        "database": "default",
        "configuration": {
            "pubsub_connect.connector": str(connector),
            "pubsub_connect.set.storage.root": str(tmp_path / "state"),
            "pubsub_connect.set.bootstrap.servers": "127.0.0.1:1234",
            "pubsub_connect.set.tasks.max": "2",
            "pubsub_connect.set.gcp.credentials.json": "********",  # on disk: masked
        },
        "libraries": [{"glob": {"include": "definitions.py"}}],
    }
    source = (root / "spec" / "definitions.py").read_text()
    assert "define(_spark, dp, _run_config, _store)" in source


def test_errors_tolerance_none_fails_the_flow_naming_the_record(spark) -> None:
    """``errors.tolerance=none`` in a pipeline: the first converted row with an error fails the
    query with the jobs' one-line message (``raise_error``); ``all`` lets every row through."""
    from pyspark.errors import PySparkException

    from pubsub_connect.lakeflow.datasets import tolerate

    rows = spark.createDataFrame(
        [("orders", 0, 7, None, None), ("orders", 1, 9, "ConverterError", "value: JsonConverter: invalid JSON")],
        "topic string, partition int, offset long, error_class string, error_message string")
    strict = cfg.validate_connector({**SINK, "errors.tolerance": "none"}, "sink.properties")
    tolerant = cfg.validate_connector({**SINK, "errors.tolerance": "all"}, "sink.properties")

    assert tolerate(rows, tolerant).count() == 2
    assert tolerate(rows.filter("error_class IS NULL"), strict).count() == 1
    with pytest.raises(PySparkException) as failure:
        tolerate(rows, strict).collect()
    assert clean_error(str(failure.value)).endswith(
        "record orders/1@9 cannot be converted: ConverterError: value: JsonConverter: invalid JSON "
        "(errors.tolerance=none; set errors.tolerance=all to dead-letter such records)")


@pytest.mark.parametrize("raw", [
    {"name": "avro-sink", "connector.class": "CloudPubSubSinkConnector", "topics": "t", "cps.project": "p",
     "cps.topic": "t"},
    {"name": "avro-source", "connector.class": "CloudPubSubSourceConnector", "kafka.topic": "t", "cps.project": "p",
     "cps.subscription": "s"},
    {"name": "avro-lite-source", "connector.class": "com.google.pubsublite.kafka.source.PubSubLiteSourceConnector",
     "pubsublite.project": "p", "pubsublite.location": "europe-west1-b", "pubsublite.subscription": "s",
     "kafka.topic": "t"},
])
def test_schema_registry_converters_are_refused_before_anything_is_declared(raw: dict[str, str]) -> None:
    """Their schemas are resolved per micro-batch, which a streaming table's query cannot do: the
    pipeline says so in one line before it declares a dataset."""
    config = cfg.validate_connector(raw | {"value.converter": "io.confluent.connect.avro.AvroConverter",
                                           "value.converter.schema.registry.url": "http://r"}, "avro.properties")
    with pytest.raises(ConfigError) as failure:
        check_declarable(config)
    assert str(failure.value) == ("avro.properties: the Schema Registry converters run in the connector's jobs "
                                  "(pubsub-connect run, the bundle's jobs), not in a declarative pipeline")
