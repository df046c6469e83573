"""Process audit for the cluster tests, imported by Python at start-up as ``sitecustomize``.

Why: to prove that a stage's work runs in executors, a test must know *which process* read from
Pub/Sub or Lite, published, produced to Kafka, wrote the archive's objects, or received rows from
Spark — outputs alone cannot tell. The cluster tests put this directory on the ``PYTHONPATH`` of
the driver (``pubsub-connect run``) and, through ``spark.executorEnv.PYTHONPATH``, of the
executors' Python workers. With ``PUBSUB_CONNECT_AUDIT`` naming a file, each such process appends
one JSON line for the first occurrence of each of:

- ``grpc``: a gRPC call, by its method path (``/google.pubsub.v1.Publisher/Publish``). Every
  Google client, sync or asyncio, whatever its layer, ends in grpc's multi-callables;
- ``kafka.produce``: ``confluent_kafka.Producer.produce``, by topic;
- ``file.write``: a file opened for writing, or renamed, below a directory of
  ``PUBSUB_CONNECT_AUDIT_WRITES`` (``os.pathsep``-separated), by its relative path;
- ``driver.collect``: rows handed to Python by ``DataFrame.collect``/``toArrow``/``toPandas``/…
  (only a driver has DataFrames), every time, with the columns, the row count and the project
  line that asked.

Each line carries the process id, its interpreter, its ancestors and — when it descends from a Spark executor JVM —
that executor's id and application id, read from the JVM's command line. Behaviour is unchanged:
the wrappers record, then call the original. Without ``PUBSUB_CONNECT_AUDIT`` nothing is installed.
"""

from __future__ import annotations

import functools
import importlib.abc
import json
import os
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

AUDIT_FILE = os.environ.get("PUBSUB_CONNECT_AUDIT", "")
WRITE_ROOTS = tuple(os.path.realpath(p) + os.sep
                    for p in os.environ.get("PUBSUB_CONNECT_AUDIT_WRITES", "").split(os.pathsep) if p)
EXECUTOR_MAIN_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
PROJECT_MARKER = f"{os.sep}pubsub_connect{os.sep}"

_local = threading.local()
_lock = threading.Lock()
_seen: set[tuple[int, str, str]] = set()
_origins: dict[int, dict[str, Any]] = {}


# ----------------------------------------------------------------------------------------------
# Records
# ----------------------------------------------------------------------------------------------


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as stat:
        data = stat.read()
    return int(data[data.rindex(b")") + 2:].split()[1])


def _command_line(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
        return [arg.decode(errors="replace") for arg in cmdline.read().split(b"\0") if arg]


def _option(args: Sequence[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args[:-1] else None


def _origin() -> dict[str, Any]:
    """This process's ancestors and, if one is an executor JVM, which executor (cached per pid:
    a forked Python worker has a pid, and so an entry, of its own)."""
    pid = os.getpid()
    origin = _origins.get(pid)
    if origin is None:
        chain: list[int] = []
        executor: dict[str, Any] | None = None
        current = pid
        try:
            while current > 1:
                current = _parent(current)
                chain.append(current)
                args = _command_line(current) if executor is None else []
                if EXECUTOR_MAIN_CLASS in args:
                    executor = {"id": _option(args, "--executor-id"), "app": _option(args, "--app-id"),
                                "pid": current}
        except (OSError, ValueError):  # an ancestor exited meanwhile: the chain ends there
            pass
        origin = _origins[pid] = {"chain": chain, "executor": executor, "python": sys.executable}
    return origin


def record(event: str, what: str, once: bool = True, **detail: Any) -> None:
    """Append one line to the audit file (``once``: only the first time per process)."""
    if getattr(_local, "busy", False):  # the record's own file accesses are not audited
        return
    _local.busy = True
    try:
        pid = os.getpid()
        if once:
            with _lock:
                if (pid, event, what) in _seen:
                    return
                _seen.add((pid, event, what))
        line = json.dumps({"pid": pid, "event": event, "what": what, **_origin(), **detail}, default=str)
        fd = os.open(AUDIT_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode() + b"\n")  # one write per line: O_APPEND keeps lines whole
        finally:
            os.close(fd)
    except Exception as exc:  # never fail the code under test; a missing record fails the test
        print(f"process audit: cannot record {event} {what}: {exc}", file=sys.stderr)
    finally:
        _local.busy = False


# ----------------------------------------------------------------------------------------------
# File writes (an audit hook: Python raises "open" and "os.rename" events itself)
# ----------------------------------------------------------------------------------------------


def _opens_for_writing(mode: Any, flags: Any) -> bool:
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) != 0


def _file_written(path: Any) -> None:
    if isinstance(path, int):
        return  # an already open descriptor
    try:
        text = os.fsdecode(os.fspath(path))
    except TypeError:
        return
    full = os.path.realpath(text)
    for root in WRITE_ROOTS:
        if full.startswith(root):
            record("file.write", full[len(root):])
            return


def _audit_hook(event: str, args: tuple[Any, ...]) -> None:
    if getattr(_local, "busy", False):
        return
    if event == "open" and len(args) == 3 and _opens_for_writing(args[1], args[2]):
        _file_written(args[0])
    elif event == "os.rename" and len(args) >= 2:  # os.rename and os.replace
        _file_written(args[1])


# ----------------------------------------------------------------------------------------------
# Client libraries, patched when they are imported
# ----------------------------------------------------------------------------------------------


def _rpc(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        method = getattr(self, "_method", b"")
        record("grpc", method.decode() if isinstance(method, bytes) else str(method))
        return original(self, *args, **kwargs)

    return call


def _patch_grpc(module: ModuleType) -> None:
    """``grpc._channel`` / ``grpc.aio._channel``: the concrete multi-callables every stub uses."""
    for name, cls in list(vars(module).items()):
        if not (isinstance(cls, type) and name.endswith("MultiCallable") and cls.__module__ == module.__name__):
            continue
        for attr in ("__call__", "with_call", "future"):
            original = cls.__dict__.get(attr)
            if callable(original) and not getattr(original, "__isabstractmethod__", False):
                setattr(cls, attr, _rpc(original))


def _patch_kafka(module: ModuleType) -> None:
    """``confluent_kafka.Producer`` is a C type: replaced by a subclass before anyone imports it."""
    base = module.Producer

    class Producer(base):  # type: ignore[misc, valid-type]
        """``confluent_kafka.Producer`` that records the topics it produces to."""

        def produce(self, *args: Any, **kwargs: Any) -> Any:
            record("kafka.produce", str(args[0] if args else kwargs.get("topic")))
            return super().produce(*args, **kwargs)

    Producer.__module__, Producer.__qualname__ = module.__name__, "Producer"
    module.Producer = Producer


def _caller() -> str:
    """The innermost project frame that asked for the rows (``pipelines/archive/stage.py:120 process``)."""
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if PROJECT_MARKER in filename:
            return f"{filename.rsplit(PROJECT_MARKER, 1)[1]}:{frame.f_lineno} {frame.f_code.co_name}"
        frame = frame.f_back
    return "?"


def _collect(method: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def collect(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(_local, "collecting", False):  # e.g. toPandas → collect: count the outer call
            return original(self, *args, **kwargs)
        _local.collecting = True
        try:
            result = original(self, *args, **kwargs)
        finally:
            _local.collecting = False
        try:
            rows: int | None = len(result)
        except TypeError:  # toLocalIterator: unknown until consumed
            rows = None
        try:
            columns = list(self.columns)
        except Exception:
            columns = []
        record("driver.collect", _caller(), once=False, method=method, columns=columns, rows=rows)
        return result

    return collect


def _patch_dataframe(module: ModuleType) -> None:
    """``pyspark.sql.classic.dataframe``: the actions that bring rows into the driver's Python."""
    cls = module.DataFrame
    for method in ("collect", "toLocalIterator", "tail", "toArrow", "toPandas"):
        original = cls.__dict__.get(method)
        if callable(original):
            setattr(cls, method, _collect(method, original))


PATCHES: dict[str, Callable[[ModuleType], None]] = {
    "grpc._channel": _patch_grpc,
    "grpc.aio._channel": _patch_grpc,
    "confluent_kafka": _patch_kafka,
    "pyspark.sql.classic.dataframe": _patch_dataframe,
}


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds a module of :data:`PATCHES` with the other finders and patches it right after it ran,
    before any importer sees it. The module keeps its own loader (only that loader instance's
    ``exec_module`` is wrapped), so resources and source look-ups behave as before."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        patch = PATCHES.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            if finder is self or find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                original = spec.loader.exec_module

                def exec_module(module: ModuleType, original: Callable[[ModuleType], None] = original,
                                patch: Callable[[ModuleType], None] = patch) -> None:
                    original(module)
                    patch(module)

                spec.loader.exec_module = exec_module
                return spec
        return None


def install() -> None:
    sys.meta_path.insert(0, _PatchOnImport())
    if WRITE_ROOTS:
        sys.addaudithook(_audit_hook)


if AUDIT_FILE:
    install()
