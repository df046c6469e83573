"""``pubsub-connect-job``: the wheel entry point of the bundle's job tasks (``resources/*.job.yml``).

Why a second entry point next to ``pubsub-connect run``: a Databricks task runs *one* connector
(usually one stage of it) with the connector's ``.properties`` from the bundle, and needs two
things a laptop does not — Databricks secrets, and a failure that the job scheduler can see.
Everything else is the same code path as the CLI (:func:`pubsub_connect.config.load`,
:func:`~pubsub_connect.pipelines.runtime.build_context`, :func:`~pubsub_connect.pipelines.base.run_stages`),
so a stage behaves identically in a job and in ``pubsub-connect run --stage``.

Secrets, two forms, in the ``.properties`` files or in ``--set`` values:

- ``${secrets:SCOPE/KEY}`` or ``${secrets:KEY}`` (scope from ``--secret-scope`` or the cluster's
  ``PUBSUB_CONNECT_SECRET_SCOPE``): a config provider in Kafka Connect's ``${provider:ref}``
  style, read with ``dbutils.secrets.get`` when the job starts — only the secrets the connector
  actually references, so an unused connector needs no secret;
- ``{{secrets/SCOPE/KEY}}``: Databricks' own reference syntax. Where Databricks substitutes it
  (cluster environment variables, Spark conf) the value arrives resolved; where it arrives
  literally (e.g. in a task parameter) it is read here the same way as the first form.

Resolved values exist only in memory: they are handed to the config loader as in-memory
overrides (never written to a file), and a logging filter plus the error printer replace them by
``********`` wherever they would appear — including in a config error that quotes a bad value.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from pubsub_connect import __version__
from pubsub_connect import config as cfg

log = logging.getLogger(__name__)

SECRET_SCOPE_ENV = "PUBSUB_CONNECT_SECRET_SCOPE"
EXIT_USER_ERROR = 2
EXIT_FAILURE = 1

#: ``${secrets:SCOPE/KEY}`` / ``${secrets:KEY}`` (group ``ref``) or ``{{secrets/SCOPE/KEY}}``.
SECRET_REF = re.compile(
    r"\$\{secrets:(?P<ref>[^}]*)\}"
    r"|\{\{\s*secrets/(?P<scope>[^/{}\s]+)/(?P<key>[^/{}\s]+)\s*\}\}"
)

#: ``(scope, key) -> value``; the default reads Databricks secrets (see :func:`dbutils_secret_getter`).
SecretGetter = Callable[[str, str], str]


def _dbutils() -> Any:
    """The Databricks runtime's dbutils on a cluster; databricks-sdk's (Secrets API, same
    ``secrets.get`` signature) elsewhere, e.g. when a job is tried from a laptop."""
    from pubsub_connect.io.spark import running_on_databricks

    if running_on_databricks():
        try:
            from pyspark.dbutils import DBUtils  # type: ignore[import-not-found]  # Databricks runtime only
            from pyspark.sql import SparkSession

            return DBUtils(SparkSession.builder.getOrCreate())
        except ImportError:
            pass
    from databricks.sdk import WorkspaceClient

    return WorkspaceClient().dbutils


def dbutils_secret_getter() -> SecretGetter:
    """A getter over ``dbutils.secrets.get``; dbutils is only created on the first secret read."""
    holder: list[Any] = []

    def get(scope: str, key: str) -> str:
        if not holder:
            holder.append(_dbutils())
        return str(holder[0].secrets.get(scope=scope, key=key))

    return get


class SecretResolver:
    """Replaces secret references in config values and remembers what it resolved, so that the
    values can be redacted from anything printed or logged afterwards."""

    def __init__(self, getter: SecretGetter | None = None, default_scope: str | None = None):
        self._getter = getter
        self.default_scope = default_scope or None
        self._cache: dict[tuple[str, str], str] = {}

    @property
    def values(self) -> list[str]:
        """Resolved secret values (non-empty), longest first so redaction never leaves a tail."""
        return sorted({v for v in self._cache.values() if v}, key=lambda v: (-len(v), v))

    def contains_reference(self, text: str) -> bool:
        return SECRET_REF.search(text) is not None

    def resolve(self, text: str, source: str, key: str) -> str:
        """``text`` with every secret reference replaced by the secret's value."""

        def replace(match: re.Match[str]) -> str:
            if match.group("ref") is not None:
                ref = match.group("ref").strip()
                scope, _, name = ref.rpartition("/")
                scope = scope or self.default_scope or ""
                if not scope:
                    raise cfg.ConfigError(
                        f"{source}: {key} refers to ${{secrets:{ref}}} but no secret scope is set "
                        f"(write ${{secrets:SCOPE/KEY}}, or pass --secret-scope / set {SECRET_SCOPE_ENV})")
            else:
                scope, name = match.group("scope"), match.group("key")
            if not name:
                raise cfg.ConfigError(f"{source}: {key} has a secret reference without a key")
            return self.get(scope, name, source, key)

        return SECRET_REF.sub(replace, text)

    def get(self, scope: str, name: str, source: str, key: str) -> str:
        cached = self._cache.get((scope, name))
        if cached is not None:
            return cached
        getter = self._getter or dbutils_secret_getter()
        self._getter = getter
        try:
            value = getter(scope, name)
        except Exception as exc:  # the exception text never contains the value (there is none)
            raise cfg.ConfigError(f"{source}: {key} refers to secret {scope}/{name}, which cannot be read "
                                  f"({type(exc).__name__}: {_first_line(exc)})") from None
        self._cache[(scope, name)] = value
        return value

    def redact(self, text: str) -> str:
        """``text`` with every resolved value — also in its JSON-escaped and repr forms, as an
        error may quote a value either way — replaced by the config module's mask."""
        for value in self.values:
            for form in {value, json.dumps(value)[1:-1], repr(value)[1:-1]}:
                if form:
                    text = text.replace(form, cfg.MASK)
        return text


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


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def load_run_config(connector_file: str, worker_file: str | None, overrides: Sequence[str],
                    resolver: SecretResolver) -> cfg.RunConfig:
    """Like :func:`pubsub_connect.config.load` for one connector, with secret references resolved.

    Resolved values enter as in-memory ``--set`` style overrides, ahead of the user's own
    overrides so those still win. Worker pass-through keys (``consumer.*``, ``producer.*``,
    ``spark.*``) are set on the worker after loading, because a bare override of such a key
    would also be offered to the connector (which would warn about an unknown key).
    """
    connector_raw = cfg.read_properties(connector_file)
    name = connector_raw.get("name", "")
    user_overrides = [resolver.resolve(item, "--set", item.split("=", 1)[0]) for item in overrides]
    user_keys = {item.split("=", 1)[0].split(":", 1)[-1].strip() for item in overrides}

    secret_overrides: list[str] = []
    secret_sources: dict[str, str] = {}  # key → file, to name the file (not "--set") in errors
    worker_passthrough: dict[str, str] = {}
    if worker_file:
        worker_names = {key.name for key in cfg.WORKER_KEYS}
        for key, value in cfg.read_properties(worker_file).items():
            if not resolver.contains_reference(value) or key in user_keys:
                continue
            resolved = resolver.resolve(value, str(worker_file), key)
            if key in worker_names:
                secret_overrides.append(f"{key}={resolved}")
                secret_sources[key] = str(worker_file)
            elif key.startswith(cfg.WORKER_PREFIXES):
                worker_passthrough[key] = resolved
    for key, value in connector_raw.items():
        if resolver.contains_reference(value) and key not in user_keys:
            secret_overrides.append(f"{name}:{key}={resolver.resolve(value, str(connector_file), key)}")
            secret_sources[key] = str(connector_file)

    try:
        run_config = cfg.load([connector_file], worker_file, [*secret_overrides, *user_overrides])
    except cfg.ConfigError as exc:
        message = str(exc)
        for key, source in secret_sources.items():
            if message.startswith(f"--set: {key}="):
                raise cfg.ConfigError(f"{source}: {message[len('--set: '):]} (value from a secret)") from None
        raise
    run_config.worker.passthrough.update(worker_passthrough)
    return run_config


def select_stages(kind: str, names: Sequence[str]) -> list[Any]:
    """The connector's stages named by ``--stage`` (all when none), in pipeline order."""
    from pubsub_connect.pipelines.runtime import stages_for

    stages = list(stages_for(kind))
    if not names:
        return stages
    known = [stage.name for stage in stages]
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise cfg.ConfigError(f"unknown stage(s) {unknown} for a {kind} connector (stages: {', '.join(known)})")
    return [stage for stage in stages if stage.name in names]


def apply_parallelism(run_config: cfg.RunConfig) -> None:
    """``tasks.max`` (Connect's task count) → ``spark.sql.shuffle.partitions`` of the session,
    unless the worker sets it: the Spark partitions of a micro-batch are this port's tasks."""
    worker = run_config.worker
    if "spark.sql.shuffle.partitions" not in worker.passthrough:
        tasks = max(int(c.get("tasks.max")) for c in run_config.connectors)
        worker.passthrough["spark.sql.shuffle.partitions"] = str(tasks)


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
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key; the value may be a secret reference")
    parser.add_argument("--secret-scope", default=None, metavar="SCOPE",
                        help=f"scope of ${{secrets:KEY}} references (default: ${SECRET_SCOPE_ENV})")
    parser.add_argument("--debug", action="store_true",
                        help="show tracebacks and debug logs (a traceback is not redacted)")
    return parser


def _user_errors() -> tuple[type[BaseException], ...]:
    from pubsub_connect.model.connect import DataError
    from pubsub_connect.pipelines.base import ConnectorError
    from pubsub_connect.pipelines.runtime import NotAvailableError

    return (cfg.ConfigError, ConnectorError, NotAvailableError, DataError)


def run(args: argparse.Namespace, resolver: SecretResolver, emit: Callable[[str], None]) -> None:
    """Load, resolve secrets, build the session and drive the selected stages."""
    from pubsub_connect.pipelines.base import install_stop_signals, run_stages
    from pubsub_connect.pipelines.runtime import build_context

    run_config = load_run_config(args.connector, args.worker, args.overrides, resolver)
    connector = run_config.connectors[0]
    stages = select_stages(connector.kind, args.stage)
    apply_parallelism(run_config)
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
            message = f"error: {type(exc).__name__}: {_first_line(exc)} (run with --debug for details)"
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
