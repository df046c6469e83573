"""Child processes of the local services: free loopback ports, starting a process in its own
session, waiting for its port, explaining why it died, stopping it and its children.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

LOOPBACK = "127.0.0.1"


class ServiceError(RuntimeError):
    """A local service cannot be started (missing binary, Java, port) — one-line message."""


def free_port() -> int:
    """A TCP port on loopback that is free right now (the usual bind-to-0 trick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def _exit_reason(*log_paths: Path) -> str:
    """One line on why a service died during start-up, from its logs.

    A JVM service logs a stack trace per failure; its first ``ERROR`` line and the exception
    right under it name the cause (a port in use, a locked data directory). Without one, the
    last line of the last log that has any (the JVM's own complaint on its console comes last).
    """
    texts = [path.read_text(errors="replace") if path.is_file() else "" for path in log_paths]
    for text in texts:
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if " ERROR " in line:
                reason = re.sub(r"^\[[^]]*\] ERROR ", "", line).strip()
                reason = re.sub(r" \([\w.$]+\)$", "", reason)
                following = lines[i + 1].strip() if i + 1 < len(lines) else ""
                if not following.startswith("at ") and ("Exception" in following or "Error" in following):
                    reason = f"{reason}: {following}"
                return reason
    for text in reversed(texts):
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if lines:
            return lines[-1]
    return "no output"


def died(name: str, proc: subprocess.Popen[bytes], *log_paths: Path) -> ServiceError:
    """The one-line error of a JVM service that exited while starting, with the reason from its logs."""
    where = ", ".join(str(p) for p in log_paths)
    return ServiceError(f"{name} exited with code {proc.returncode} during start-up: "
                        f"{_exit_reason(*log_paths)} (see {where})")


def wait_for_port(port: int, proc: subprocess.Popen[bytes], name: str, timeout_s: float,
                   *log_paths: Path) -> None:
    """Block until ``port`` accepts connections, failing fast when the process dies."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise died(name, proc, *log_paths)
        with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, port), timeout=0.5):
            return
        time.sleep(0.1)
    raise ServiceError(f"{name} did not accept connections on {LOOPBACK}:{port} within {timeout_s:.0f} s")


@dataclass
class RunningService:
    """A started process and what clients need to reach it.

    ``directory`` holds the service's files; starting the same service again on it (and on
    ``port``, so clients keep their address) is a restart.
    """

    name: str
    pid: int
    port: int
    endpoint: str
    env: dict[str, str] = field(default_factory=dict)
    log_path: str = ""
    directory: str = ""


class ManagedProcess:
    """A child process started in its own session, so stopping it also stops its children
    (the emulator launcher execs java; a killed parent must not leave an orphan JVM)."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> subprocess.Popen[bytes]:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **(self.env or {})},
            )
        return self.proc


def stop_pid(pid: int, timeout_s: float = 10.0) -> None:
    """SIGTERM the process group of ``pid``; SIGKILL what is left after ``timeout_s``."""
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            break
        # reap if it is our child, otherwise just poll
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def start_listening(name: str, argv: list[str], log_path: Path, port: int, label: str,
                    timeout_s: float) -> subprocess.Popen[bytes]:
    """Start ``argv`` as a :class:`ManagedProcess` logging to ``log_path`` and wait until it
    accepts connections on ``port``; a process that dies or stays deaf meanwhile is stopped and
    reported as a :class:`ServiceError` (``label`` names it in the message)."""
    proc = ManagedProcess(name, argv, log_path).start()
    try:
        wait_for_port(port, proc, label, timeout_s, log_path)
    except BaseException:
        stop_pid(proc.pid)
        raise
    return proc
