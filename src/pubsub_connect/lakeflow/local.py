"""``pubsub-connect pipeline run``: a connector's declarative variant on a laptop.

The same shape as on Databricks, where a job runs the pull task (source connectors), then the
pipeline update, then the publish/produce task:

1. the source connectors' ``pull`` stage lands messages in bronze (a job stage, here in this
   process);
2. one pipeline update (:mod:`pubsub_connect.lakeflow.update`, in a child process with its own
   Spark: native Kafka and Delta Lake, a Hive metastore under the pipeline's folder so that the
   next update finds the tables of this one) defines and refreshes the connector's datasets;
3. the ``publish``/``produce`` stage (the jobs' own code and guarantees) sends the pipeline's
   ``outbox_<name>`` on.

``--once`` does this once. Without it the job stages run continuously while updates repeat
every ``pipeline.trigger.interval.ms`` (a triggered pipeline on a short schedule: the open-source
runtime has no continuous mode) until SIGTERM or Ctrl-C.

Everything lives under ``<storage.root>/pipelines/<name>/``: ``spec/`` (the generated
``spark-pipeline.yml`` and its source file), ``tables/`` (the pipeline's tables), ``system/``
(the pipeline's checkpoints), ``checkpoints/`` (the job stages'), ``metastore_db`` and
``update.log`` (the last update's Spark log).
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from pubsub_connect.config import loader as cfg
from pubsub_connect.config.errors import MASK, ConfigError
from pubsub_connect.config.keys import CPS_SINK, CPS_SOURCE, LITE_SINK, LITE_SOURCE
from pubsub_connect.io.spark_versions import has_declarative_pipelines, installed_pyspark
from pubsub_connect.lakeflow.conf import pipeline_configuration, pipeline_root, pipeline_store, pipeline_warehouse
from pubsub_connect.lakeflow.datasets import check_declarable
from pubsub_connect.model.error_text import clean_error
from pubsub_connect.pipelines.context import ConnectorError, PipelineContext, Stage

log = logging.getLogger(__name__)

#: The job stages around the pipeline, per connector kind: (before the update, after it).
JOB_STAGES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    CPS_SINK: ((), ("publish",)),
    LITE_SINK: ((), ("publish",)),
    CPS_SOURCE: (("pull",), ("produce",)),
    LITE_SOURCE: (("pull",), ("produce",)),
}

#: The error class of ``raise_error``, as Spark logs it.
USER_RAISED = "[USER_RAISED_EXCEPTION]"
#: ``Flow spark_catalog.default.outbox_x has COMPLETED.`` → (dataset, state)
_FLOW_EVENT = re.compile(r"^Flow '?(?:[^ ']*\.)?([^ .']+)'? (?:has|is) ([A-Z]+)\.")


def pipeline_spark_conf(worker: cfg.WorkerConfig, config: cfg.ConnectorConfig) -> dict[str, str]:
    """The static settings of the pipeline's Spark: the local defaults and the worker's
    ``spark.*`` keys, Spark's Kafka connector and Delta Lake (required: a declarative pipeline
    has no fallback), Delta as the default table format, and a Hive metastore of its own."""
    from pubsub_connect.io import class_data_archive
    from pubsub_connect.io.spark import LOCAL_DEFAULTS, LOCAL_LOG4J2, local_connector_conf

    root = pipeline_root(worker, config.name)
    conf = local_connector_conf({**LOCAL_DEFAULTS, **worker.spark_conf}, "native", "delta-spark")
    conf.update({
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": pipeline_warehouse(worker, config.name),
        "spark.sql.sources.default": "delta",
        "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={root}/metastore_db;create=true",
    })
    options = conf.get("spark.driver.extraJavaOptions", "")
    conf["spark.driver.extraJavaOptions"] = " ".join(
        [options, f"-Dlog4j2.configurationFile={LOCAL_LOG4J2}", f"-Dderby.system.home={root}"]).strip()
    class_data_archive.add_driver_options(conf)  # the same classpath as a local session's
    return conf


@dataclass(frozen=True)
class PipelineSpec:
    """A written ``spark-pipeline.yml`` and the configuration it stands for: on disk the values
    of secret-looking keys are masked; the update gets the real ones on its standard input."""

    path: Path
    configuration: dict[str, str]


def write_spec(worker: cfg.WorkerConfig, config: cfg.ConnectorConfig, connector_file: str,
               worker_file: str | None, overrides: Sequence[str]) -> PipelineSpec:
    """The pipeline's ``spark-pipeline.yml`` and its source file, under the pipeline's folder.

    Paths are made absolute and the worker's effective ``storage.root`` and
    ``bootstrap.servers`` are passed on, so the pipeline finds what this process found (the
    runtime imports the source from the spec's folder)."""
    root = Path(pipeline_root(worker, config.name))
    spec_dir = root / "spec"
    spec_dir.mkdir(parents=True, exist_ok=True)
    source = resources.files("pubsub_connect.lakeflow").joinpath("definitions.py").read_text()
    (spec_dir / "definitions.py").write_text(source)
    carried = [f"storage.root={Path(worker.storage_root).resolve()}", f"bootstrap.servers={worker.bootstrap_servers}"]
    configuration = pipeline_configuration(str(Path(connector_file).resolve()),
                                           str(Path(worker_file).resolve()) if worker_file else None,
                                           [*carried, *overrides])
    spec = {
        "name": f"pubsub-connect-{config.name}",
        "storage": (root / "system").as_uri(),
        "database": "default",
        "configuration": {k: MASK if cfg.is_secret_key(k) else v for k, v in configuration.items()},
        "libraries": [{"glob": {"include": "definitions.py"}}],
    }
    path = spec_dir / "spark-pipeline.yml"
    path.write_text(json.dumps(spec, indent=2) + "\n")  # JSON is YAML
    return PipelineSpec(path, configuration)


def raised_error(log_path: Path) -> str | None:
    """The first message a dataset raised itself (``raise_error``: a record the convert flows
    refuse under ``errors.tolerance=none``), from the update's Spark log. The client sees only
    the failed streaming query that wraps it."""
    try:
        with log_path.open(errors="replace") as lines:
            for line in lines:
                found = line.find(USER_RAISED)
                if found >= 0:
                    return line[found:].strip()
    except OSError:
        return None
    return None


def run_update(name: str, spec: PipelineSpec, spark_conf: dict[str, str], emit: Callable[[str], None],
               stop: threading.Event | None = None) -> None:
    """One pipeline update in a child process; progress lines per dataset; raises
    :class:`ConnectorError` with the update's error when it fails."""
    folder = spec.path.parent.parent
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    log_path = folder / "update.log"
    emit(f"[{name}.pipeline] update started")
    result: dict[str, object] = {}
    with log_path.open("w") as spark_log:
        child = subprocess.Popen([sys.executable, "-m", "pubsub_connect.lakeflow.update", str(spec.path)],
                                 stdout=subprocess.PIPE, stderr=spark_log, stdin=subprocess.PIPE, env=env,
                                 text=True)
        watcher = _stop_watcher(child, stop)
        try:
            assert child.stdin is not None and child.stdout is not None
            with child.stdin:
                child.stdin.write(json.dumps({"spark_conf": spark_conf, "configuration": spec.configuration}))
            for line in child.stdout:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if "event" in record:
                    _report_event(name, str(record["event"]), emit)
                else:
                    result = record
            child.wait()
        finally:
            if child.poll() is None:
                child.terminate()
                try:
                    child.wait(30)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
            if watcher is not None:
                watcher.set()
    if stop is not None and stop.is_set() and result.get("result") != "COMPLETED":
        emit(f"[{name}.pipeline] update stopped")
        return
    if result.get("result") != "COMPLETED":
        error = raised_error(log_path) or str(result.get("error") or f"the update ended with exit code "
                                                                        f"{child.returncode}")
        raise ConnectorError(f"{name}: pipeline update failed: {clean_error(error)} (Spark's log: {log_path})")
    emit(f"[{name}.pipeline] update completed")


def _report_event(name: str, message: str, emit: Callable[[str], None]) -> None:
    match = _FLOW_EVENT.match(message.strip())
    if match and match.group(2) in ("COMPLETED", "FAILED"):
        emit(f"[{name}.pipeline] {match.group(1)} {match.group(2).lower()}")
    log.debug("%s pipeline event: %s", name, message)


def _stop_watcher(child: subprocess.Popen[str], stop: threading.Event | None) -> threading.Event | None:
    """Terminates the child when ``stop`` is set; the returned event ends the watcher."""
    if stop is None:
        return None
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            if stop.wait(0.5):
                if child.poll() is None:
                    child.terminate()
                return

    threading.Thread(target=watch, name="pipeline-update-stop", daemon=True).start()
    return done


def _job_stages(ctx: PipelineContext, config: cfg.ConnectorConfig) -> tuple[list[Stage], list[Stage]]:
    from pubsub_connect.pipelines.runtime import stages_for

    by_name = {stage.name: stage for stage in stages_for(config.kind)}
    before, after = JOB_STAGES[config.kind]
    return [by_name[n] for n in before], [by_name[n] for n in after]


def run_pipeline(run_config: cfg.RunConfig, connector_file: str, worker_file: str | None,
                 overrides: Sequence[str], once: bool, emit: Callable[[str], None],
                 stop: threading.Event | None = None, quiet_failures: bool = False) -> PipelineContext:
    """Run one connector's declarative variant (see the module docstring); returns the context
    of its job stages (whose store finds the pipeline's tables). ``quiet_failures`` turns off the
    session's JVM failure loggers, as ``run`` does: for a process of its own (the CLI), not for a
    shared session."""
    from pubsub_connect.pipelines.runner.signals import install_stop_signals
    from pubsub_connect.pipelines.runner.supervisor import run_stages
    from pubsub_connect.pipelines.runtime import build_context

    if not has_declarative_pipelines():
        raise ConfigError(f"declarative pipelines need Spark 4.1 or newer (pyspark.pipelines), found "
                          f"{installed_pyspark()}; on Databricks they run on the pipeline runtime of their "
                          "channel, not on the job clusters' runtime")
    if len(run_config.connectors) != 1:
        raise ConfigError("pipeline run takes one connector file")
    config = run_config.connectors[0]
    check_declarable(config)
    worker = run_config.worker
    spark_conf = pipeline_spark_conf(worker, config)
    spec = write_spec(worker, config, connector_file, worker_file, overrides)
    ctx = build_context(worker, once=once, progress=emit,
                        store=lambda spark, _caps: pipeline_store(spark, worker, config.name, config.kind))
    if not (ctx.caps.native_kafka and ctx.caps.native_delta):
        raise ConfigError("a declarative pipeline runs on Spark's Kafka connector and Delta Lake; "
                              f"this session has {ctx.caps.describe()}")
    if quiet_failures:
        from pubsub_connect.io.spark import quiet_routine_stops, silence_query_failure_logs

        silence_query_failure_logs(ctx.spark)  # the stage runner prints each failure in one line
        quiet_routine_stops(ctx.spark)
    emit(f"pipeline {config.name}: {ctx.caps.describe()}, tables {pipeline_warehouse(worker, config.name)}")
    before, after = _job_stages(ctx, config)
    if once:
        run_stages(ctx, config, before)
        run_update(config.name, spec, spark_conf, emit)
        run_stages(ctx, config, after)
        return ctx
    stop = stop or threading.Event()
    try:  # after the session exists: PySpark's context installs a Ctrl-C handler of its own
        install_stop_signals(stop)
    except ValueError:  # not the main thread (a notebook, a test): setting ``stop`` stops it
        log.debug("stop signals not installed (not the main thread)")
    _run_continuously(ctx, config, before, after, spec, spark_conf, emit, stop)
    return ctx


def _run_continuously(ctx: PipelineContext, config: cfg.ConnectorConfig, before: list[Stage], after: list[Stage],
                      spec: PipelineSpec, spark_conf: dict[str, str], emit: Callable[[str], None],
                      stop: threading.Event) -> None:
    """Job stages running all along, pipeline updates one after the other until ``stop``. The
    stage after the pipeline starts once the first update has created the tables it reads."""
    from pubsub_connect.io.tables import BRONZE, TableRef
    from pubsub_connect.model.schemas import LITE_BRONZE
    from pubsub_connect.pipelines.cps_pull import ensure_bronze
    from pubsub_connect.pipelines.runner.supervisor import run_stages

    errors: list[BaseException] = []
    threads: list[threading.Thread] = []

    def start(stages: list[Stage]) -> None:
        def target() -> None:
            try:
                run_stages(ctx, config, stages, stop)
            except BaseException as exc:  # surfaced below
                errors.append(exc)
                stop.set()

        thread = threading.Thread(target=target, name=f"{config.name}-{stages[0].name}", daemon=True)
        thread.start()
        threads.append(thread)

    if before:
        # the first update reads the pulled bronze: it must exist before the puller's first commit
        if config.kind == LITE_SOURCE:
            ctx.store.ensure(TableRef(BRONZE, config.name), LITE_BRONZE)
        else:
            ensure_bronze(ctx, config)
        start(before)
    interval_s = max(int(ctx.worker.get("pipeline.trigger.interval.ms")) / 1000, 1.0)
    first = True
    try:
        while not stop.is_set():
            run_update(config.name, spec, spark_conf, emit, stop)
            if first and not stop.is_set():
                start(after)
                first = False
            stop.wait(interval_s)
    finally:
        stop.set()  # a failed update stops the job stages too
        for thread in threads:
            while thread.is_alive():
                thread.join(0.5)
    if errors:
        raise errors[0]
