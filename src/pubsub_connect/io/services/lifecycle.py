"""The local services as a set: started together and stopped together in-process (tests,
quickstart), or detached and recorded in a state file (``pubsub-connect services up``/``down``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

from pubsub_connect.io.services.kafka import start_kafka
from pubsub_connect.io.services.process import RunningService, ServiceError
from pubsub_connect.io.services.pubsub_emulator import start_pubsub_emulator
from pubsub_connect.io.services.registry import start_registry
from pubsub_connect.io.services.s3 import start_s3

log = logging.getLogger(__name__)

STARTERS = {"kafka": start_kafka, "pubsub": start_pubsub_emulator, "registry": start_registry, "s3": start_s3}
ALL_SERVICES = ("kafka", "pubsub", "registry", "s3")


# --------------------------------------------------------------------------------------------
# A set of services, in-process (tests, quickstart) or detached (``services up``)
# --------------------------------------------------------------------------------------------


class LocalServices:
    """Starts the chosen services and stops them all on exit (also when start-up fails midway).

    Each service gets a directory of its own under ``workdir`` (named like the service), so the
    Kafka broker started again on the same ``workdir`` finds its data.
    """

    def __init__(self, workdir: Path, names: tuple[str, ...] = ALL_SERVICES):
        unknown = set(names) - set(STARTERS)
        if unknown:
            raise ServiceError(f"unknown service(s) {sorted(unknown)}; choose from {list(STARTERS)}")
        self.workdir = Path(workdir)
        self.names = names
        self.running: dict[str, RunningService] = {}

    def start(self) -> LocalServices:
        try:
            for name in self.names:
                self.running[name] = STARTERS[name](self.workdir / name)
                log.info("started %s at %s", name, self.running[name].endpoint)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for service in reversed(list(self.running.values())):
            service.stop()
        self.running.clear()

    @property
    def env(self) -> dict[str, str]:
        merged: dict[str, str] = {}
        for service in self.running.values():
            merged.update(service.env)
        return merged

    def __enter__(self) -> LocalServices:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def state_file(storage_root: Path) -> Path:
    return Path(storage_root) / "services" / "services.json"


def services_up(storage_root: Path, names: tuple[str, ...] = ALL_SERVICES) -> dict[str, RunningService]:
    """Start detached services that outlive this process, and record them for ``services_down``.

    Already-running services recorded in the state file are reused, not started twice.
    """
    path = state_file(storage_root)
    current = read_services(storage_root)
    services = LocalServices(path.parent, tuple(n for n in names if n not in current))
    services.start()
    current.update(services.running)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({k: asdict(v) for k, v in current.items()}, indent=2))
    return current


def read_services(storage_root: Path) -> dict[str, RunningService]:
    """Services recorded by ``services_up`` whose process still runs: a record whose pid another
    process has since been given is dropped, not stopped later."""
    path = state_file(storage_root)
    if not path.exists():
        return {}
    alive: dict[str, RunningService] = {}
    for name, raw in json.loads(path.read_text()).items():
        service = RunningService(**raw)
        if service.is_running():
            alive[name] = service
    return alive


def services_down(storage_root: Path) -> list[str]:
    """Stop every service recorded by ``services_up``; returns the names stopped."""
    running = read_services(storage_root)
    for service in running.values():
        service.stop()
    path = state_file(storage_root)
    if path.exists():
        path.unlink()
    return sorted(running)


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """Temporarily set environment variables (e.g. PUBSUB_EMULATOR_HOST) for client libraries."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
