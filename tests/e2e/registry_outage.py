"""A Schema Registry that goes away while a connector runs: a loopback forwarder the tests take
down and bring back, and a ``--once`` run of a connector through such an outage."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from pathlib import Path

from e2e.harness import run_once
from pubsub_connect.config.loader import ConnectorConfig
from pubsub_connect.io.services.process import free_port

#: What a restart line says of the registry it could not reach.
UNREACHABLE = "Schema Registry unreachable"


class Outage:
    """A loopback TCP forwarder to the registry that can be taken down (connections refused) and
    brought back on the same port: the registry keeps its schemas, the connector loses its route."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.port = free_port()
        self.listener: socket.socket | None = None
        self.open: list[socket.socket] = []
        self.up()

    def up(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        if self.listener is not None:
            with contextlib.suppress(OSError):  # wakes the accepting thread (a close alone does not)
                self.listener.shutdown(socket.SHUT_RDWR)
            self.listener.close()
            self.listener = None
        for connection in self.open:
            with contextlib.suppress(OSError):
                connection.close()
        self.open.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self.open += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def run_through_outage(spark, bootstrap: str, root: Path, connector: ConnectorConfig, outage: Outage,
                       stage: str) -> str:
    """Run ``connector`` once with ``outage`` down until ``stage`` prints that it restarts for an
    unreachable registry, then bring the registry back and let the run finish; returns that line
    (the run must end without an error)."""
    lines: list[str] = []
    failures: list[BaseException] = []

    def run() -> None:
        try:
            run_once(spark, bootstrap, root, connector, lines)
        except BaseException as exc:  # reported below
            failures.append(exc)

    def restart_line() -> str | None:
        return next((line for line in lines if line.startswith(f"[{connector.name}.{stage}] ") and
                     UNREACHABLE in line), None)

    outage.down()
    runner = threading.Thread(target=run)
    runner.start()
    try:
        deadline = time.monotonic() + 300
        while restart_line() is None:
            assert runner.is_alive() and time.monotonic() < deadline, (failures, lines)
            time.sleep(0.1)
    finally:
        outage.up()
        runner.join()
    outage.down()
    assert failures == []
    line = restart_line()
    assert line is not None
    return line
