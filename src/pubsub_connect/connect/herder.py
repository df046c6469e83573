"""The herder: the connectors of one worker, their configs, target states and live states.

Why Connect's name and shape: a Kafka Connect worker's herder owns "which connectors exist, what
state they should be in, what state they are in", and the REST resources only ask it. Here each
connector runs its stages (:func:`pubsub_connect.pipelines.runner.supervisor.run_stages`,
continuous) on its own thread over one shared Spark session, so one failing connector does not stop the others;
its tasks are its stages (task ``i`` is stage ``i``: ingest, convert, publish…).

States are Connect's: a connector is ``UNASSIGNED`` while it starts, then ``RUNNING``;
``PAUSED`` (its queries stopped, still owned by this worker), ``STOPPED`` (no tasks; only then
may its offsets be moved) or ``FAILED`` with the failure's trace. Target states (``STARTED``,
``PAUSED``, ``STOPPED``) persist (:class:`~pubsub_connect.connect.config_store.ConfigStore`), so a
restarted worker brings every connector back as it was, each from its checkpoints.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pubsub_connect.config import loader as cfg
from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.keys import SINK_KINDS
from pubsub_connect.connect import offsets as connect_offsets
from pubsub_connect.connect.active_topics import ActiveTopics
from pubsub_connect.connect.config_store import STARTED, STOPPED, TARGET_STATES, ConfigStore, StoredConnector
from pubsub_connect.connect.locks import ConnectorBusyError, ConnectorLock
from pubsub_connect.connect.plugins import HIDDEN, shown
from pubsub_connect.model.error_text import error_line
from pubsub_connect.pipelines.context import PipelineContext, Stage, lock_names
from pubsub_connect.pipelines.maintenance import maintained_while_running
from pubsub_connect.pipelines.runner.supervisor import run_stages

log = logging.getLogger(__name__)

RUNNING = "RUNNING"
FAILED = "FAILED"
UNASSIGNED = "UNASSIGNED"


class HerderError(Exception):
    """A request the herder refuses; ``status`` is the HTTP status Connect answers with."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def not_found(name: str) -> HerderError:
    return HerderError(f"Connector {name} not found", 404)


def mask(config: Mapping[str, str]) -> dict[str, str]:
    """A connector config as every response shows it (:func:`~pubsub_connect.connect.plugins.shown`)."""
    return {k: shown(k, v) for k, v in config.items()}


@dataclass
class ConnectorRuntime:
    """One connector of this worker and what it is doing now."""

    stored: StoredConnector
    lock: ConnectorLock
    config: cfg.ConnectorConfig | None = None
    stages: tuple[Stage, ...] = ()
    state: str = UNASSIGNED
    trace: str | None = None
    thread: threading.Thread | None = None
    stop_event: threading.Event = field(default_factory=threading.Event)
    #: Serialises this connector's transitions (pause while it starts, two restarts…).
    transition: threading.Lock = field(default_factory=threading.Lock)
    deleted: bool = False

    @property
    def name(self) -> str:
        return self.stored.name


class Herder:
    """Creates, runs, pauses, stops, restarts and deletes connectors; answers for their status
    and offsets. Every public method is safe to call from the REST server's threads."""

    def __init__(self, worker: cfg.WorkerConfig, worker_id: str,
                 context: Callable[[], PipelineContext], progress: Callable[[str], None] = print,
                 stages_for: Callable[[cfg.ConnectorConfig], Any] | None = None):
        from pubsub_connect.pipelines.runtime import connector_stages

        self.worker = worker
        self.worker_id = worker_id
        self.store = ConfigStore(worker.storage_root)
        self._context_factory = context
        self._context: PipelineContext | None = None
        self._context_lock = threading.Lock()
        self.progress = progress
        self.stages_for = stages_for or (lambda config: connector_stages(config, progress))
        self._mutex = threading.RLock()
        self._connectors: dict[str, ConnectorRuntime] = {}
        self.active_topics = ActiveTopics(worker.storage_root)

    # ---------------------------------------------------------------------------------------
    # lifecycle of the worker

    def start(self, files: Mapping[str, Mapping[str, str]] | None = None) -> None:
        """Bring back every stored connector in its target state, then create or update the
        connectors given as files (like ``connect-standalone``'s connector arguments)."""
        for stored in self.store.load_all():
            runtime = ConnectorRuntime(stored, ConnectorLock(self.worker.storage_root, stored.name, []))
            with self._mutex:
                self._connectors[stored.name] = runtime
            with runtime.transition:
                self._apply(runtime)
        for name, raw in (files or {}).items():
            self.put_config(name, dict(raw))

    def shutdown(self) -> None:
        """Stop every connector's queries (target states stay stored for the next start)."""
        with self._mutex:
            runtimes = list(self._connectors.values())
        for runtime in runtimes:
            with runtime.transition:
                self._halt(runtime)
                runtime.lock.release()

    def context(self) -> PipelineContext:
        """The shared Spark session and table store, built when the first connector starts."""
        with self._context_lock:
            if self._context is None:
                self._context = self._context_factory()
            return self._context

    # ---------------------------------------------------------------------------------------
    # reads

    def names(self) -> list[str]:
        with self._mutex:
            return sorted(self._connectors)

    def _get(self, name: str) -> ConnectorRuntime:
        with self._mutex:
            runtime = self._connectors.get(name)
        if runtime is None:
            raise not_found(name)
        return runtime

    def connector_type(self, runtime: ConnectorRuntime) -> str:
        try:
            kind = cfg.connector_kind(runtime.stored.config, runtime.name)
        except ConfigError:
            return "unknown"
        return "sink" if kind in SINK_KINDS else "source"

    @staticmethod
    def _tasks(runtime: ConnectorRuntime) -> tuple[Stage, ...]:
        """The connector's tasks, its stages; none while STOPPED or when its config never loaded."""
        return () if runtime.state == STOPPED else runtime.stages

    def info(self, name: str) -> dict[str, Any]:
        runtime = self._get(name)
        return {"name": name, "config": mask(runtime.stored.config),
                "tasks": [{"connector": name, "task": i} for i in range(len(self._tasks(runtime)))],
                "type": self.connector_type(runtime)}

    def config(self, name: str) -> dict[str, str]:
        return mask(self._get(name).stored.config)

    def status(self, name: str) -> dict[str, Any]:
        runtime = self._get(name)
        state, trace = runtime.state, runtime.trace
        connector: dict[str, Any] = {"state": state, "worker_id": self.worker_id}
        if trace:
            connector["trace"] = trace
        tasks = []
        for task in range(len(self._tasks(runtime))):
            entry: dict[str, Any] = {"id": task, "state": state, "worker_id": self.worker_id}
            if trace:
                entry["trace"] = trace
            tasks.append(entry)
        return {"name": name, "connector": connector, "tasks": tasks, "type": self.connector_type(runtime)}

    def tasks(self, name: str) -> list[dict[str, Any]]:
        runtime = self._get(name)
        config = mask(runtime.stored.config)
        return [{"id": {"connector": name, "task": i}, "config": {**config, "task.stage": stage.name}}
                for i, stage in enumerate(self._tasks(runtime))]

    def _topic_tracking(self, reset: bool = False) -> None:
        """Connect's 403s when the worker turned topic tracking (or its reset) off."""
        if not self.worker.get("topic.tracking.enable"):
            raise HerderError("Topic tracking is disabled.", 403)
        if reset and not self.worker.get("topic.tracking.allow.reset"):
            raise HerderError("Topic tracking reset is disabled.", 403)

    def topics(self, name: str) -> dict[str, Any]:
        """``GET /connectors/{name}/topics``: the topics the connector used since it was created or
        its topics were last reset. As in Connect, a name it does not know has none (not a 404)."""
        self._topic_tracking()
        return {name: {"topics": self.active_topics.topics(name)}}

    def reset_topics(self, name: str) -> None:
        """``PUT /connectors/{name}/topics/reset`` (Connect answers 202 for any name)."""
        self._topic_tracking(reset=True)
        self.active_topics.reset(name)

    # ---------------------------------------------------------------------------------------
    # changes

    def _validated(self, name: str, raw: dict[str, str]) -> cfg.ConnectorConfig:
        try:
            return cfg.validate_connector(raw, name, worker=self.worker)
        except ConfigError as exc:
            raise HerderError(f"Connector configuration is invalid: {str(exc).removeprefix(name + ': ')}",
                              400) from None

    def create(self, name: str, raw: dict[str, str], initial_state: str = STARTED) -> dict[str, Any]:
        """``POST /connectors``: 409 when the name exists."""
        if initial_state not in TARGET_STATES:
            raise HerderError(f"initial_state must be one of RUNNING, PAUSED, STOPPED, not {initial_state}", 400)
        with self._mutex:
            if name in self._connectors:
                raise HerderError(f"Connector {name} already exists", 409)
        raw = {**raw, "name": name}
        self._validated(name, raw)
        stored = StoredConnector(name, raw, initial_state)
        runtime = ConnectorRuntime(stored, ConnectorLock(self.worker.storage_root, name, []))
        with self._mutex:
            if name in self._connectors:
                raise HerderError(f"Connector {name} already exists", 409)
            self._connectors[name] = runtime
        self.store.put(stored)
        with runtime.transition:
            self._apply(runtime)
        return self.info(name)

    def put_config(self, name: str, raw: dict[str, str]) -> tuple[bool, dict[str, Any]]:
        """``PUT /connectors/{name}/config``: creates (True) or updates and restarts (False).
        A value shown as ``[hidden]`` keeps the stored secret, so a config read back can be sent."""
        if raw.get("name", name) != name:
            raise HerderError(f"Connector name configuration ({raw['name']}) doesn't match connector name in the "
                              f"URL ({name})", 400)
        with self._mutex:
            runtime = self._connectors.get(name)
        if runtime is None:
            return True, self.create(name, raw)
        raw = {k: runtime.stored.config.get(k, v) if v == HIDDEN else v for k, v in raw.items()}
        raw["name"] = name
        self._validated(name, raw)
        with runtime.transition:
            self._live(runtime)
            self._halt(runtime)
            runtime.stored = StoredConnector(name, raw, runtime.stored.target_state)
            self.store.put(runtime.stored)
            self._apply(runtime)
        return False, self.info(name)

    def set_target(self, name: str, target: str) -> None:
        """``PUT /connectors/{name}/pause|resume|stop``."""
        runtime = self._get(name)
        with runtime.transition:
            self._live(runtime)
            if runtime.stored.target_state == target and runtime.state != FAILED:
                return
            self._halt(runtime)
            runtime.stored = StoredConnector(name, runtime.stored.config, target)
            self.store.put(runtime.stored)
            self._apply(runtime)

    def restart(self, name: str, only_failed: bool = False) -> None:
        """``POST /connectors/{name}/restart``: a connector meant to run starts again from its
        checkpoints (a paused or stopped one stays so)."""
        runtime = self._get(name)
        if only_failed and runtime.state != FAILED:
            return
        with runtime.transition:
            self._live(runtime)
            if runtime.stored.target_state != STARTED:
                return
            self._halt(runtime)
            self._apply(runtime)

    def delete(self, name: str) -> None:
        """``DELETE /connectors/{name}``: stops it and forgets its config; its tables and
        checkpoints stay, so creating it again under the same name resumes where it was."""
        runtime = self._get(name)
        with runtime.transition:
            self._live(runtime)
            self._halt(runtime)
            runtime.lock.release()
            runtime.deleted = True
            self.store.delete(name)
            self.active_topics.reset(name)
            with self._mutex:
                self._connectors.pop(name, None)

    # ---------------------------------------------------------------------------------------
    # offsets (KIP-875)

    def _stopped_config(self, name: str) -> cfg.ConnectorConfig:
        runtime = self._get(name)
        if runtime.stored.target_state != STOPPED or runtime.state != STOPPED:
            raise HerderError(f"Connector {name} must be STOPPED before its offsets can be changed: "
                              f"PUT /connectors/{name}/stop first", 400)
        return runtime.config or self._validated(name, dict(runtime.stored.config))

    def offsets(self, name: str) -> dict[str, Any]:
        runtime = self._get(name)
        config = runtime.config or self._validated(name, dict(runtime.stored.config))
        return {"offsets": self._offsets_call(connect_offsets.read_offsets, config)}

    def alter_offsets(self, name: str, body: Any) -> dict[str, str]:
        config = self._stopped_config(name)
        return {"message": self._offsets_call(connect_offsets.alter_offsets, config, body)}

    def reset_offsets(self, name: str) -> dict[str, str]:
        config = self._stopped_config(name)
        return {"message": self._offsets_call(connect_offsets.reset_offsets, config)}

    def _offsets_call(self, fn: Callable[..., Any], config: cfg.ConnectorConfig, *args: Any) -> Any:
        try:
            return fn(self.worker, config, *args)
        except connect_offsets.OffsetsError as exc:
            raise HerderError(str(exc), exc.status) from None

    # ---------------------------------------------------------------------------------------
    # running

    @staticmethod
    def _live(runtime: ConnectorRuntime) -> None:
        """A request that waited for a delete of the same connector finds it gone."""
        if runtime.deleted:
            raise not_found(runtime.name)

    def _apply(self, runtime: ConnectorRuntime) -> None:
        """Bring a halted connector to its target state; the caller holds ``runtime.transition``."""
        target = runtime.stored.target_state
        runtime.trace = None
        try:
            runtime.config = cfg.validate_connector(dict(runtime.stored.config), runtime.name, worker=self.worker)
            runtime.stages = tuple(self.stages_for(runtime.config))
            runtime.lock.release()  # the stages may differ after a config change
            runtime.lock = ConnectorLock(self.worker.storage_root, runtime.name, lock_names(runtime.stages))
            if target != STOPPED:  # a stopped connector is free for the offsets tools
                runtime.lock.acquire()
        except (ConfigError, ConnectorBusyError) as exc:
            self._failed(runtime, exc)
            return
        if target != STARTED:
            runtime.state = target  # the live states PAUSED and STOPPED have their target's name
            return
        runtime.state = UNASSIGNED
        runtime.stop_event = threading.Event()
        runtime.thread = threading.Thread(target=self._run, args=(runtime, runtime.stop_event),
                                          name=f"connector-{runtime.name}", daemon=True)
        runtime.thread.start()

    def _run(self, runtime: ConnectorRuntime, stop: threading.Event) -> None:
        try:
            ctx = self.context()
            if stop.is_set():
                return
            runtime.state = RUNNING
            self.progress(f"[{runtime.name}] running")
            config = runtime.config
            assert config is not None
            observe = None
            if self.worker.get("topic.tracking.enable"):
                def observe(stage: str, progress: dict[str, Any]) -> None:
                    self.active_topics.observe(config, stage, progress)
            every_s = int(self.worker.get("pipeline.maintenance.interval.ms")) / 1000
            with maintained_while_running(ctx, config, every_s, lambda: ConnectorLock(self.worker.storage_root,
                                                                                     config.name, ["maintain"])):
                run_stages(ctx, config, runtime.stages, stop, observe)
        except BaseException as exc:  # reported in the status, never raised into the worker
            if not stop.is_set():
                self._failed(runtime, exc)

    def _failed(self, runtime: ConnectorRuntime, exc: BaseException) -> None:
        runtime.trace = f"{error_line(exc)}\n{''.join(traceback.format_exception(exc))}"
        runtime.state = FAILED  # after the trace: a status read in between must see both
        self.progress(f"[{runtime.name}] failed: {error_line(exc)}")
        log.debug("%s failed", runtime.name, exc_info=exc)

    def _halt(self, runtime: ConnectorRuntime) -> None:
        """Stop the connector's queries and wait for its thread. A micro-batch cut short is not
        committed and runs again when the connector starts again."""
        runtime.stop_event.set()
        if runtime.thread is not None:
            runtime.thread.join()
            runtime.thread = None
        if runtime.state != FAILED:
            runtime.state = UNASSIGNED
