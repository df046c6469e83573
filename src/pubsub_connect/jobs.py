"""``pubsub-connect-job``: the wheel entry point of the bundle's job tasks (``resources/*.job.yml``).

Why a second entry point next to ``pubsub-connect run``: a Databricks task runs *one* connector
(usually one stage of it) with the connector's ``.properties`` from the bundle, and needs two
things a laptop does not — Databricks secrets, and a failure that the job scheduler can see.
Everything else is the same code path as the CLI (:func:`pubsub_connect.config.loader.load`,
:func:`~pubsub_connect.pipelines.runtime.build_context`,
:func:`~pubsub_connect.pipelines.runner.supervisor.run_stages`), so a stage behaves identically
in a job and in ``pubsub-connect run --stage``.

Secrets, two forms, in the ``.properties`` files or in ``--set`` values:

- ``${secrets:SCOPE/KEY}`` or ``${secrets:KEY}`` (scope from ``--secret-scope`` or the cluster's
  ``PUBSUB_CONNECT_SECRET_SCOPE``): a config provider in Kafka Connect's ``${provider:ref}``
  style (:mod:`pubsub_connect.io.databricks_secrets`), registered with ``env`` and ``file``, read
  with ``dbutils.secrets.get`` when the job starts — only the secrets the connector actually
  references, so an unused connector needs no secret;
- ``{{secrets/SCOPE/KEY}}``: Databricks' own reference syntax. Where Databricks substitutes it
  (cluster environment variables, Spark conf) the value arrives resolved; where it arrives
  literally (e.g. in a task parameter) it is read here the same way as the first form.

Resolved values exist only in memory: the config loader resolves them while it validates
(nothing is written to a file), and a logging filter plus the error printer replace them by
``********`` wherever they would appear — including in a config error that quotes a bad value.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from pubsub_connect import __version__
from pubsub_connect.config import loader as cfg
from pubsub_connect.config.errors import ConfigError
from pubsub_connect.io.databricks_secrets import SECRET_SCOPE_ENV, SecretGetter, SecretResolver
from pubsub_connect.io.spark_versions import UnsupportedSparkError, check_spark
from pubsub_connect.model.error_text import first_line

log = logging.getLogger(__name__)

EXIT_USER_ERROR = 2
EXIT_FAILURE = 1

class RedactingFilter(logging.Filter):
    """Logging filter for handlers: formats the record's message and masks secret values."""

    def __init__(self, resolver: SecretResolver):
        super().__init__()
        self.resolver = resolver

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = self.resolver.redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and record.exc_info[1] is not None:
            text = self.resolver.redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info, record.exc_text = None, text
        return True


def load_run_config(connector_file: str, worker_file: str | None, overrides: Sequence[str],
                    resolver: SecretResolver) -> cfg.RunConfig:
    """Like :func:`pubsub_connect.config.loader.load` for one connector, with the ``secrets``
    provider registered: references resolve in memory while the files and ``--set`` values are
    validated (never written anywhere), only for keys the configuration actually uses, and a
    ``--set`` of a key wins over the file's reference (which is then never read)."""
    return cfg.load([connector_file], worker_file, list(overrides), resolver.providers)


#: The bundle's stand-ins for the deployment settings no default can fit (databricks.yml):
#: (key, the variable's default, the variable). A job started with one would only retry against
#: a broker or a project that is not there, so on Databricks it stops at once, naming the variable.
BUNDLE_PLACEHOLDERS = (
    ("bootstrap.servers", "localhost:9092", "kafka_bootstrap_servers"),
    ("cps.project", "my-gcp-project", "gcp_project"),
    ("pubsublite.project", "my-gcp-project", "gcp_project"),
)


def check_deployment_values(run_config: cfg.RunConfig) -> None:
    """Refuse the bundle's placeholder values (:data:`BUNDLE_PLACEHOLDERS`) with one line naming
    the bundle variable that sets them. Called on Databricks only: locally ``localhost:9092`` may
    well be the broker."""
    configs: list[cfg.ConnectorConfig | cfg.WorkerConfig] = [run_config.worker, *run_config.connectors]
    for key, placeholder, variable in BUNDLE_PLACEHOLDERS:
        for config in configs:
            setting = config.settings.get(key)
            if setting is not None and setting.value == placeholder:
                raise ConfigError(f"{config.source}: {key}={placeholder} is the bundle's placeholder; deploy with "
                                  f"--var {variable}=<value> (variable {variable} in databricks.yml)")


def select_stages(connector: cfg.ConnectorConfig, names: Sequence[str],
                  progress: Callable[[str], None] | None = None) -> list[Any]:
    """The connector's stages in its ``pipeline.mode`` named by ``--stage`` (all when none), in
    pipeline order."""
    from pubsub_connect.pipelines.runtime import connector_stages

    stages = list(connector_stages(connector, progress))
    if not names:
        return stages
    known = [stage.name for stage in stages]
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise ConfigError(f"unknown stage(s) {unknown} for a {connector.kind} connector in pipeline.mode="
                          f"{connector.get('pipeline.mode')} (stages: {', '.join(known)})")
    return [stage for stage in stages if stage.name in names]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pubsub-connect-job",
        description="Run stages of one connector: the entry point of the Databricks job tasks "
                    "(resources/*.job.yml). Continuous unless --once.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--connector", required=True, metavar="CONNECTOR.properties",
                        help="the connector's config file (Kafka Connect .properties)")
    parser.add_argument("--worker", metavar="WORKER.properties",
                        help="worker config (bootstrap.servers, storage.root, storage.catalog/schema, spark.*)")
    parser.add_argument("--stage", action="append", default=[],
                        help="stage to run, repeatable (default: every stage of the connector, in order)")
    parser.add_argument("--once", action="store_true",
                        help="drain what is available (trigger availableNow), then exit: scheduled jobs")
    parser.add_argument("--maintain", action="store_true",
                        help="instead of stages: retention, compaction and VACUUM of the connector's tables, "
                             "then exit (the scheduled <connector>_maintain jobs)")
    replay = parser.add_argument_group("replay (the <connector>_replay jobs; empty values are left out)")
    replay.add_argument("--replay", action="store_true",
                        help="instead of stages: send a range of the connector's bronze again, then exit")
    replay.add_argument("--offsets", action="append", default=[], metavar="RANGES",
                        help="offset ranges (a sink's topic:partition:first-last, a Lite source's "
                             "partition:first-last), separated by spaces")
    replay.add_argument("--since", default="", metavar="TIME")
    replay.add_argument("--until", default="", metavar="TIME")
    replay.add_argument("--time-column", default="", metavar="COLUMN")
    replay.add_argument("--to-topic", default="", metavar="TOPIC")
    replay.add_argument("--dry-run", nargs="?", const="true", default="false", metavar="true|false")
    replay.add_argument("--replay-id", default="", metavar="ID")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key; the value may be a secret reference")
    parser.add_argument("--secret-scope", default=None, metavar="SCOPE",
                        help=f"scope of ${{secrets:KEY}} references (default: ${SECRET_SCOPE_ENV})")
    parser.add_argument("--debug", action="store_true",
                        help="show tracebacks and debug logs (a traceback is not redacted)")
    return parser


def _user_errors() -> tuple[type[BaseException], ...]:
    from pubsub_connect.model.connect import DataError
    from pubsub_connect.pipelines.context import ConnectorError
    from pubsub_connect.pipelines.runtime import NotAvailableError

    return (ConfigError, ConnectorError, NotAvailableError, DataError, UnsupportedSparkError)


def run(args: argparse.Namespace, resolver: SecretResolver, emit: Callable[[str], None]) -> None:
    """Check the runtime's Spark, load, resolve secrets, build the session and drive the selected stages."""
    check_spark()  # before anything imports what an unsupported Spark lacks
    from pubsub_connect.io.spark import running_on_databricks
    from pubsub_connect.pipelines.runner.signals import install_stop_signals
    from pubsub_connect.pipelines.runner.supervisor import run_stages
    from pubsub_connect.pipelines.runtime import apply_tasks_max, build_context

    run_config = load_run_config(args.connector, args.worker, args.overrides, resolver)
    if running_on_databricks():
        check_deployment_values(run_config)
    connector = run_config.connectors[0]
    if args.maintain or args.replay:
        if args.stage or args.once or (args.maintain and args.replay):
            raise ConfigError("--maintain and --replay run no stage, and one at a time: leave out --stage and --once")
        (_maintain if args.maintain else _replay_job(args))(run_config, emit)
        return
    stages = select_stages(connector, args.stage, emit)
    apply_tasks_max(run_config)
    ctx = build_context(run_config.worker, once=args.once, progress=emit)
    names = ", ".join(stage.name for stage in stages)
    mode = "once" if args.once else "continuous"
    emit(f"pubsub-connect-job {__version__}: {connector.name} [{names}] {mode}; {ctx.caps.describe()}; "
         f"storage {ctx.store.root}")
    if args.once:
        run_stages(ctx, connector, stages)
    else:
        stop = threading.Event()
        try:
            install_stop_signals(stop)
        except ValueError:  # not the main thread (e.g. started from a notebook): cancel stops it
            log.debug("stop signals not installed (not the main thread)")
        run_stages(ctx, connector, stages, stop)
    emit(f"[{connector.name}] {names} done")


def _maintain(run_config: cfg.RunConfig, emit: Callable[[str], None]) -> None:
    """One maintenance run (:mod:`pubsub_connect.pipelines.maintenance`): what ``pubsub-connect
    maintain`` does, with the job's secrets and storage. One run at a time is the job's
    ``max_concurrent_runs: 1`` (a lock file on a volume is not one Databricks promises to hold)."""
    from pubsub_connect.pipelines.maintenance import maintain
    from pubsub_connect.pipelines.runtime import build_context

    connector = run_config.connectors[0]
    ctx = build_context(run_config.worker, once=True, progress=emit)
    emit(f"pubsub-connect-job {__version__}: {connector.name} maintain; storage {ctx.store.root}")
    for report in maintain(ctx, connector):
        emit(report.line(connector.name))


def _replay_job(args: argparse.Namespace) -> Callable[[cfg.RunConfig, Callable[[str], None]], None]:
    """One replay (:func:`pubsub_connect.pipelines.replay.run.replay_from_parameters`) from the job's
    parameters: what ``pubsub-connect replay`` does."""

    def run_replay(run_config: cfg.RunConfig, emit: Callable[[str], None]) -> None:
        from pubsub_connect.pipelines.replay.ranges import replay_range
        from pubsub_connect.pipelines.replay.run import replay_from_parameters
        from pubsub_connect.pipelines.runtime import build_context

        connector = run_config.connectors[0]
        offsets = " ".join(args.offsets)
        replay_range(offsets.split(), args.since or None, args.until or None, args.time_column or None,
                     connector.kind)  # before Spark
        ctx = build_context(run_config.worker, once=True, progress=emit)
        emit(f"pubsub-connect-job {__version__}: {connector.name} replay; storage {ctx.store.root}")
        replay_from_parameters(ctx, connector, offsets, args.since, args.until, args.time_column, args.to_topic,
                               args.dry_run, args.replay_id)

    return run_replay


def main(argv: Sequence[str] | None = None, secret_getter: SecretGetter | None = None) -> int:
    """Console-script entry point. Exits non-zero by raising ``SystemExit``: Databricks calls a
    wheel task's entry point and ignores what it returns, so only an exception fails the task."""
    import os

    args = build_parser().parse_args(argv)
    resolver = SecretResolver(secret_getter, args.secret_scope or os.environ.get(SECRET_SCOPE_ENV))
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    redactor = RedactingFilter(resolver)
    for handler in logging.getLogger().handlers:
        handler.addFilter(redactor)
    if not args.debug:
        logging.getLogger("py4j").setLevel(logging.ERROR)

    def emit(line: str) -> None:
        print(resolver.redact(line), flush=True)

    code = 0
    try:
        run(args, resolver, emit)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    except Exception as exc:
        if args.debug:
            raise
        if isinstance(exc, _user_errors()):
            message, code = f"error: {exc}", EXIT_USER_ERROR
        else:
            message = f"error: {type(exc).__name__}: {first_line(str(exc))} (run with --debug for details)"
            code = EXIT_FAILURE
        print(resolver.redact(message), file=sys.stderr, flush=True)
    finally:
        for handler in logging.getLogger().handlers:
            handler.removeFilter(redactor)
    if code:
        raise SystemExit(code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
