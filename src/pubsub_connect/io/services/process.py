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
    #: When the process started (:func:`process_started`); 0 when not known (a state file
    #: written before it was recorded). Tells the process from a later one given the same pid.
    started: int = 0

    def is_running(self) -> bool:
        """Whether the process started as this service still runs (not merely some process with
        its pid, nor its zombie waiting to be reaped)."""
        return _is_our_process(self.pid, self.started) and _proc_stat(self.pid)[:1] != ["Z"]

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the service and its children; nothing when it is gone already."""
        stop_pid(self.pid, timeout_s, self.started)


def _proc_stat(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name (which is in parentheses and
    may hold any character): the state first. Empty where there is no ``/proc`` or no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    return stat[stat.rindex(")") + 2:].split()


def process_started(pid: int) -> int:
    """When process ``pid`` started, in clock ticks since boot; 0 where there is no ``/proc``
    or no such process.

    Why: the machine hands a freed pid out again, and with Linux's default of 32,768 pids and
    JVMs that start hundreds of threads (each takes a pid) that comes round within minutes. A pid
    kept for later (a service to stop at the end of a session, a state file) can by then name
    another process, or a thread of one, which a signal to it would stop.
    """
    fields = _proc_stat(pid)
    return int(fields[19]) if fields else 0


def _is_our_process(pid: int, started: int = 0) -> bool:
    """Whether ``pid`` is still the process a service was started as.

    Every service is started in a session of its own (:class:`ManagedProcess`), so it leads its
    process group: a pid that does not is a process or thread that got the number later. Where
    the start time was recorded, it must match too.
    """
    try:
        if os.getpgid(pid) != pid:
            return False
    except ProcessLookupError:
        return False
    return not started or process_started(pid) in (0, started)


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


def stop_pid(pid: int, timeout_s: float = 10.0, started: int = 0) -> None:
    """SIGTERM the process group that service process ``pid`` leads; SIGKILL what is left after
    ``timeout_s``. Nothing when ``pid`` no longer is that process (:func:`_is_our_process`):
    stopping a service that died long ago must not stop whatever has its pid now."""
    if not _is_our_process(pid, started):
        return
    pgid = pid
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
