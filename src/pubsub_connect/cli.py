"""``pubsub-connect``: validate configs, run connectors, manage the embedded local services.

Why its shape: it mirrors ``connect-standalone worker.properties connector.properties…`` so a
Kafka Connect user needs no new vocabulary. User-caused errors (config, input, connectivity)
print one line and exit non-zero; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from pubsub_connect import __version__
from pubsub_connect.config import loader as cfg
from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.keys import WORKER_KEYS
from pubsub_connect.io.services.kafka import JVM_ARTIFACTS
from pubsub_connect.io.services.lifecycle import ALL_SERVICES, read_services, services_down, services_up
from pubsub_connect.io.services.process import RunningService, ServiceError
from pubsub_connect.io.spark_versions import UnsupportedSparkError, check_spark
from pubsub_connect.model.error_text import first_line

log = logging.getLogger("pubsub_connect")

EXIT_USER_ERROR = 2
EXIT_FAILURE = 1


def _add_config_args(parser: argparse.ArgumentParser, connectors: str = "+",
                     connectors_help: str = "connector config files (Kafka Connect .properties)") -> None:
    parser.add_argument("connectors", nargs=connectors, metavar="CONNECTOR.properties", help=connectors_help)
    parser.add_argument("--worker", "-w", metavar="WORKER.properties",
                        help="worker config (bootstrap.servers, storage.root, spark.*, …)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a key (NAME:KEY=VALUE for one connector); repeatable")


def _add_named_connector_args(parser: argparse.ArgumentParser, worker_help: str) -> None:
    """A command on one connector by name (``offsets``, ``maintain``, ``trace``, ``replay``): its
    config from the worker's store, or from a file."""
    parser.add_argument("--worker", "-w", metavar="WORKER.properties", help=worker_help)
    parser.add_argument("--connector", "-c", metavar="CONNECTOR.properties",
                        help="the connector's config file (default: the worker's stored config of NAME)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pubsub-connect",
        description="Kafka <-> Google Cloud Pub/Sub / Pub/Sub Lite connectors on Spark and Delta Lake.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", required=True)

    validate = sub.add_parser("validate", help="check config files and print the effective config")
    _add_config_args(validate)

    run = sub.add_parser("run", help="run connectors (ingest -> convert -> publish)")
    _add_config_args(run)
    run.add_argument("--once", action="store_true",
                     help="process what is available through every stage, then exit")
    run.add_argument("--stage", action="append", default=[],
                     help="run only this stage (repeatable), e.g. ingest, convert, publish")

    worker = sub.add_parser("worker", help="a long-running worker with Kafka Connect's REST API (listeners)")
    _add_config_args(worker, "*", "connectors to create or update at start (others come from the worker's store)")

    offsets = sub.add_parser("offsets", help="show, alter or reset a stopped connector's offsets (KIP-875)")
    offsets.add_argument("action", choices=("show", "alter", "reset"))
    offsets.add_argument("name", help="the connector's name")
    offsets.add_argument("request", nargs="?", metavar="OFFSETS.json",
                         help='alter: {"offsets": [...]} as Connect takes it: the JSON, a file, or - for stdin')
    _add_named_connector_args(offsets, "worker config (storage.root, Kafka)")

    maintain = sub.add_parser("maintain", help="retention, compaction and VACUUM of a connector's tables "
                              "(safe beside the running connector)")
    maintain.add_argument("name", help="the connector's name")
    _add_named_connector_args(maintain, "worker config (storage.root, spark.*)")

    trace = sub.add_parser("trace", help="one record's journey: a sink's Kafka record (--topic --partition "
                           "--offset) to its message, a source's message (--message-id, or a Lite source's "
                           "--partition --offset) to its Kafka record; bronze, dead letters, the batch that sent it")
    trace.add_argument("name", help="the connector's name")
    trace.add_argument("--topic", help="a sink's Kafka topic")
    trace.add_argument("--partition", type=int, help="a sink's Kafka partition, or a Lite source's Lite partition")
    trace.add_argument("--offset", type=int, help="... and the offset in it")
    trace.add_argument("--message-id", help="a Cloud Pub/Sub source's message id")
    trace.add_argument("--json", action="store_true", help="print the journey as JSON")
    _add_named_connector_args(trace, "worker config (storage.root, spark.*)")

    replay = sub.add_parser("replay", help="send a range of a connector's bronze again: a sink's to Pub/Sub, a "
                            "source's to Kafka (backfill a new topic with --to-topic)")
    replay.add_argument("name", help="the connector's name")
    replay.add_argument("--offsets", action="append", default=[], metavar="[TOPIC:]PARTITION:FIRST-LAST",
                        help="offsets to replay, both ends included (LAST left out: to the end); repeatable: a "
                             "sink's Kafka topic:partition:first-last, a Lite source's partition:first-last")
    replay.add_argument("--since", metavar="TIME", help="replay records from this ISO-8601 time on (included)")
    replay.add_argument("--until", metavar="TIME", help="... up to this ISO-8601 time (excluded)")
    replay.add_argument("--time-column", choices=("timestamp", "publish_time", "event_time", "ingest_time"),
                        help="the time --since/--until compare: a sink's record timestamp (its default), a "
                             "source's message publish_time (its default) or a Lite message's event_time, or "
                             "ingest_time (when bronze took it in)")
    replay.add_argument("--to-topic", metavar="TOPIC", help="send to this topic instead of the connector's")
    replay.add_argument("--dry-run", action="store_true", help="convert and count, send nothing")
    replay.add_argument("--batch-size", type=int, default=100_000, metavar="N",
                        help="records (a sink: offsets per partition) per chunk, one progress line each; a "
                             "source's chunk is one Kafka transaction")
    replay.add_argument("--replay-id", metavar="ID",
                        help="name the replay (by default: from the connector, range, destination and batch "
                             "size); a source's replay run again under the same id skips the chunks it committed")
    _add_named_connector_args(replay, "worker config (storage.root, spark.*)")

    pipeline = sub.add_parser("pipeline", help="a connector as a Lakeflow Declarative Pipeline, run locally")
    pipeline_sub = pipeline.add_subparsers(dest="pipeline_command", required=True)
    pipeline_run = pipeline_sub.add_parser(
        "run", help="pull (source connectors) -> pipeline update (bronze, outbox, dlq) -> publish/produce")
    pipeline_run.add_argument("connector", metavar="CONNECTOR.properties", help="the connector's config file")
    pipeline_run.add_argument("--worker", "-w", metavar="WORKER.properties",
                              help="worker config (bootstrap.servers, storage.root, spark.*, …)")
    pipeline_run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                              help="override a key; repeatable")
    pipeline_run.add_argument("--once", action="store_true",
                              help="one update with what is available, publish it, then exit")

    services = sub.add_parser("services", help="start/stop the embedded local services")
    services.add_argument("action", choices=("up", "down", "status"))
    services.add_argument("--only", default=",".join(ALL_SERVICES),
                          help="comma-separated subset of " + ",".join(ALL_SERVICES))
    services.add_argument("--storage-root", default=WORKER_KEYS[1].default,
                          help="where the services' state and logs are kept")

    quick = sub.add_parser("quickstart", help="demo: local services, sample records, sink to the emulator")
    quick.add_argument("--storage-root", default=None, help="where tables and checkpoints go (default: temp)")
    quick.add_argument("--records", type=int, default=1000, help="how many sample records to produce")

    jars = sub.add_parser("jars", help="fetch the JVM artifacts (Spark's Kafka connector, Delta Lake, the local "
                                       "Kafka broker) into the cache, for offline use later, and build the local Spark "
                                       "driver's class-data archive (quicker starts)")
    jars.add_argument("--offline", action="store_true", help="only check the cache; download and build nothing")

    archive = sub.add_parser("archive", help="tools for Block-GZIP archives")
    archive_sub = archive.add_subparsers(dest="archive_command", required=True)
    read = archive_sub.add_parser("read", help="print the records at an offset using the index")
    read.add_argument("path", help="a .gz archive file path, or s3://bucket/key.gz")
    read.add_argument("--offset", type=int, required=True)
    read.add_argument("--count", type=int, default=1)
    read.add_argument("--s3-endpoint", default=None)
    return parser


# --------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------


def cmd_validate(args: argparse.Namespace) -> int:
    run_config = cfg.load(args.connectors, args.worker, args.overrides)
    print(f"# worker ({run_config.worker.source})")
    for key, value in run_config.worker.effective().items():
        print(f"{key}={value}")
    for connector in run_config.connectors:
        print(f"\n# connector {connector.name} ({connector.kind}, {connector.source})")
        for key, value in connector.effective().items():
            print(f"{key}={value}")
    print(f"\n# {len(run_config.connectors)} connector config(s) valid")
    return 0


def _use_running_services(worker: cfg.WorkerConfig) -> None:
    """Point a default worker at services started by ``pubsub-connect services up``."""
    running = read_services(Path(worker.storage_root))
    if "kafka" in running and worker.settings["bootstrap.servers"].origin == "default":
        worker.settings["bootstrap.servers"] = cfg.Setting(running["kafka"].endpoint, "services up")
    if "pubsub" in running and not os.environ.get("PUBSUB_EMULATOR_HOST"):
        os.environ["PUBSUB_EMULATOR_HOST"] = running["pubsub"].endpoint
    if "s3" in running:
        for key, value in running["s3"].env.items():
            os.environ.setdefault(key, value)


def cmd_run(args: argparse.Namespace) -> int:
    from pubsub_connect.connect.locks import ConnectorLock
    from pubsub_connect.pipelines.context import lock_names
    from pubsub_connect.pipelines.runtime import connector_stages

    run_config = cfg.load(args.connectors, args.worker, args.overrides)
    _use_running_services(run_config.worker)
    plans = []
    for connector in run_config.connectors:
        stages = list(connector_stages(connector, lambda line: print(line, flush=True)))
        if args.stage:
            unknown = set(args.stage) - {s.name for s in stages}
            if unknown:
                names = ", ".join(s.name for s in stages)
                raise ConfigError(f"{connector.name}: unknown stage(s) {sorted(unknown)} (stages: {names})")
            stages = [s for s in stages if s.name in args.stage]
        plans.append((connector, stages))

    # one process per connector stage: another run or a worker holding one of them is refused here
    with contextlib.ExitStack() as locks:
        for connector, stages in plans:
            locks.enter_context(ConnectorLock(run_config.worker.storage_root, connector.name, lock_names(stages)))
        return _run_plans(args, run_config, plans)


def _run_plans(args: argparse.Namespace, run_config: cfg.RunConfig, plans: list) -> int:
    from pubsub_connect.connect.locks import ConnectorLock
    from pubsub_connect.io.spark import quiet_routine_stops, silence_query_failure_logs
    from pubsub_connect.pipelines.maintenance import maintained_while_running
    from pubsub_connect.pipelines.runner.signals import install_stop_signals
    from pubsub_connect.pipelines.runner.supervisor import run_stages
    from pubsub_connect.pipelines.runtime import apply_tasks_max, build_context

    apply_tasks_max(run_config)
    ctx = build_context(run_config.worker, once=args.once, progress=lambda line: print(line, flush=True))
    if not args.debug:
        silence_query_failure_logs(ctx.spark)  # the stage runner prints each failure in one line
        quiet_routine_stops(ctx.spark)
    print(f"pubsub-connect {__version__}: {ctx.caps.describe()}, storage {ctx.store.root}", flush=True)
    if args.once:
        for connector, stages in plans:
            run_stages(ctx, connector, stages)
            print(f"[{connector.name}] done", flush=True)
        return 0

    stop = threading.Event()
    install_stop_signals(stop)
    threads: list[threading.Thread] = []
    errors: list[BaseException] = []

    every_s = int(run_config.worker.get("pipeline.maintenance.interval.ms")) / 1000

    def target(connector: cfg.ConnectorConfig, stages: list) -> None:
        try:  # the tables are maintained by a run of the whole connector, not of a --stage subset
            with maintained_while_running(ctx, connector, 0 if args.stage else every_s,
                                          lambda: ConnectorLock(run_config.worker.storage_root, connector.name,
                                                                ["maintain"])):
                run_stages(ctx, connector, stages, stop)
        except BaseException as exc:  # surfaced to the main thread below
            errors.append(exc)
            stop.set()

    for connector, stages in plans:
        thread = threading.Thread(target=target, args=(connector, stages), name=connector.name, daemon=True)
        thread.start()
        threads.append(thread)
    print("running; press Ctrl-C to stop", flush=True)
    for thread in threads:
        while thread.is_alive():
            thread.join(0.5)
    if errors:
        raise errors[0]
    print("stopped", flush=True)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from pubsub_connect.connect.worker import run_worker
    from pubsub_connect.pipelines.runner.signals import install_stop_signals

    loaded = cfg.load(args.connectors, args.worker, args.overrides) if args.connectors else None
    worker = loaded.worker if loaded else cfg.load_worker(args.worker, args.overrides)
    _use_running_services(worker)
    files = loaded.raw if loaded else {}
    stop = threading.Event()
    install_stop_signals(stop)
    run_worker(worker, files, stop, emit=lambda line: print(line, flush=True))
    print("stopped", flush=True)
    return 0


def cmd_offsets(args: argparse.Namespace) -> int:
    from pubsub_connect.connect.offsets_command import offsets_command

    if args.action == "alter" and not args.request:
        raise ConfigError('offsets alter: give the offsets as Connect takes them ({"offsets": [...]}), a file, '
                              "or - for stdin")
    worker = cfg.load_worker(args.worker, [])
    _use_running_services(worker)
    print(offsets_command(worker, args.action, args.name, args.connector, args.request), flush=True)
    return 0


def cmd_maintain(args: argparse.Namespace) -> int:
    from pubsub_connect.connect.locks import ConnectorLock
    from pubsub_connect.connect.offsets_command import connector_config
    from pubsub_connect.pipelines.maintenance import maintain
    from pubsub_connect.pipelines.runtime import build_context

    worker = cfg.load_worker(args.worker, [])
    config = connector_config(worker, args.name, args.connector, must_be_stopped=False)
    with ConnectorLock(worker.storage_root, config.name, ["maintain"]):  # one maintenance run at a time
        ctx = build_context(worker, once=True, progress=lambda line: print(line, flush=True))
        for report in maintain(ctx, config):
            print(report.line(config.name), flush=True)
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    from pubsub_connect.connect.offsets_command import connector_config
    from pubsub_connect.explore.trace_command import journey_finder
    from pubsub_connect.pipelines.runtime import build_context

    worker = cfg.load_worker(args.worker, [])
    config = connector_config(worker, args.name, args.connector, must_be_stopped=False)
    trace_of = journey_finder(config, args.topic, args.partition, args.offset, args.message_id)
    ctx = build_context(worker, once=True, progress=lambda line: None)
    journey = trace_of(ctx.store)
    print(json.dumps(journey.as_dict(), indent=1) if args.json else "\n".join(journey.lines()), flush=True)
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from pubsub_connect.connect.offsets_command import connector_config
    from pubsub_connect.pipelines.replay.ranges import replay_range
    from pubsub_connect.pipelines.replay.run import replay, replay_steps
    from pubsub_connect.pipelines.runtime import build_context

    worker = cfg.load_worker(args.worker, [])
    _use_running_services(worker)
    config = connector_config(worker, args.name, args.connector, must_be_stopped=False)
    chosen = replay_range(args.offsets, args.since, args.until, args.time_column, config.kind)
    ctx = build_context(worker, once=True, progress=lambda line: print(line, flush=True))
    steps = replay_steps(ctx, config, args.to_topic)  # column expressions: after the session
    report = replay(ctx, config, chosen, steps, dry_run=args.dry_run, batch_size=args.batch_size,
                    replay_id=args.replay_id)
    print(report.line(config.name, args.dry_run, steps.verbs), flush=True)
    return 0


def cmd_pipeline(args: argparse.Namespace) -> int:
    from pubsub_connect.lakeflow.local import run_pipeline

    run_config = cfg.load([args.connector], args.worker, args.overrides)
    _use_running_services(run_config.worker)
    stop = threading.Event()  # set by Ctrl-C / SIGTERM when running continuously
    if not args.once:
        print("running; press Ctrl-C to stop", flush=True)

    def emit(line: str) -> None:
        print(line, flush=True)

    run_pipeline(run_config, args.connector, args.worker, args.overrides, args.once, emit, stop,
                 quiet_failures=not args.debug)
    print(f"[{run_config.connectors[0].name}] done" if args.once else "stopped", flush=True)
    return 0


def cmd_services(args: argparse.Namespace) -> int:
    root = Path(args.storage_root)
    names = tuple(n.strip() for n in args.only.split(",") if n.strip())
    if args.action == "up":
        running = services_up(root, names)
        _print_services(running)
        print(f"stop them with: pubsub-connect services down --storage-root {root}")
    elif args.action == "down":
        stopped = services_down(root)
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    else:
        running = read_services(root)
        if not running:
            print("no services running")
        _print_services(running)
    return 0


def _print_services(running: dict[str, RunningService]) -> None:
    for name, service in sorted(running.items()):
        detail = {
            "kafka": f"bootstrap.servers={service.endpoint}",
            "pubsub": f"PUBSUB_EMULATOR_HOST={service.endpoint}",
            "registry": f"schema.registry.url={service.endpoint}",
            "s3": f"s3.endpoint={service.endpoint}",
        }.get(name, service.endpoint)
        print(f"{name:8s} pid={service.pid:<7d} {detail}")


def cmd_jars(args: argparse.Namespace) -> int:
    from pubsub_connect.io import artifacts, class_data_archive
    from pubsub_connect.io.services.registry import REGISTRY_APP, registry_app_dir
    from pubsub_connect.io.spark import local_connector_conf, spark_connectors

    for artifact_set in (spark_connectors(), *JVM_ARTIFACTS):
        jars = artifacts.resolve(artifact_set, offline=args.offline)
        print(f"{artifact_set.name}: {len(jars)} jars ({', '.join(str(c) for c in artifact_set.coordinates)})")
    print(f"schema registry: {registry_app_dir(offline=args.offline)} ({REGISTRY_APP})")
    print(f"cache: {artifacts.cache_dir()}")
    if not args.offline:
        driver_jars = [j for j in local_connector_conf({}).get("spark.jars", "").split(",") if j]  # as a session's
        try:
            archive = class_data_archive.ensure_built(driver_jars, report=print)
        except RuntimeError as exc:  # it only saves start-up time: sessions start without it
            print(f"{exc}; local sessions start without it")
        else:
            print(f"class-data archive: {archive}" if archive else "class-data archive: none (no native engine)")
    return 0


def cmd_quickstart(args: argparse.Namespace) -> int:
    from pubsub_connect.quickstart import run_quickstart

    return run_quickstart(args.storage_root, args.records)


def cmd_archive(args: argparse.Namespace) -> int:
    from pubsub_connect.model.blockgzip.lines import encode_value
    from pubsub_connect.pipelines.archive.read import archive_read

    if args.s3_endpoint:
        os.environ["AWS_ENDPOINT_URL_S3"] = args.s3_endpoint
    for record in archive_read(args.path, args.offset, args.count):
        # the archive's own line encoding, so the output matches `gzip -dc` line for line
        sys.stdout.buffer.write(encode_value(record) + b"\n")
    sys.stdout.flush()
    return 0


#: The commands that start Spark or resolve its jars: they stop at once on an unsupported Spark.
SPARK_COMMANDS = frozenset({"run", "pipeline", "worker", "quickstart", "jars"})

COMMANDS = {
    "validate": cmd_validate,
    "run": cmd_run,
    "pipeline": cmd_pipeline,
    "worker": cmd_worker,
    "offsets": cmd_offsets,
    "maintain": cmd_maintain,
    "trace": cmd_trace,
    "replay": cmd_replay,
    "services": cmd_services,
    "quickstart": cmd_quickstart,
    "jars": cmd_jars,
    "archive": cmd_archive,
}


def _user_errors() -> tuple[type[BaseException], ...]:
    from pubsub_connect.connect.locks import ConnectorBusyError
    from pubsub_connect.io.artifacts import ArtifactError
    from pubsub_connect.io.pubsub.errors import PubSubIOError
    from pubsub_connect.model.connect import DataError
    from pubsub_connect.pipelines.context import ConnectorError
    from pubsub_connect.pipelines.runtime import NotAvailableError

    return (ConfigError, ServiceError, ConnectorError, NotAvailableError, DataError, PubSubIOError,
            ArtifactError, ConnectorBusyError, UnsupportedSparkError)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # py4j logs every command it sends to the JVM at DEBUG, including pickled functions that carry
    # connector settings (credentials): never below INFO, even with --debug. Without --debug not
    # even its ERRORs: they are a failed micro-batch's traceback, which the stage runner reports
    # in one line.
    logging.getLogger("py4j").setLevel(logging.INFO if args.debug else logging.CRITICAL)
    try:
        if args.command in SPARK_COMMANDS:
            check_spark()  # before anything imports what an unsupported Spark lacks
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except _user_errors() as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except Exception as exc:
        if args.debug:
            raise
        first = first_line(str(exc))
        print(f"error: {type(exc).__name__}: {first} (run with --debug for details)", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
