"""Stopping a service stops the process started as it, never a later one given the same pid.

Why it matters: with Linux's 32,768 pids and JVMs that start hundreds of threads, a freed pid is
handed out again within minutes, and a session-long test run stops services it started half an
hour earlier. Stopping by a stale pid once stopped the reference Kafka Connect worker of another
test: the pid had become one of that JVM's threads, whose process group the signal went to.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pubsub_connect.io.services.process import ManagedProcess, RunningService, process_started, stop_pid
from waiting import wait_until

#: A process in a session of its own with a second thread, as a JVM service has many: it prints
#: the thread's pid (Linux gives each thread one) and waits.
WITH_A_THREAD = """
import threading, time
ready = threading.Event()
def run():
    print(threading.get_native_id(), flush=True)
    ready.set()
    time.sleep(600)
threading.Thread(target=run, daemon=True).start()
ready.wait()
time.sleep(600)
"""


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[RunningService, int]]:
    """The process as a :class:`RunningService`, and the pid of its second thread."""
    log_path = tmp_path / "service.log"
    proc = ManagedProcess("with-a-thread", [sys.executable, "-u", "-c", WITH_A_THREAD], log_path).start()
    running = RunningService("with-a-thread", proc.pid, 0, "", started=process_started(proc.pid))
    try:
        wait_until(lambda: log_path.read_text().strip(), 30, "the thread's pid on the process's output")
        yield running, int(log_path.read_text().split()[0])
    finally:
        stop_pid(proc.pid)
        proc.wait(10)


def test_the_start_time_is_read_for_a_live_process_only(service: tuple[RunningService, int]) -> None:
    running, _ = service
    assert running.started > 0
    assert process_started(running.pid) == running.started
    assert running.is_running()


def test_a_pid_that_is_now_a_thread_of_another_process_is_not_stopped(service: tuple[RunningService, int]) -> None:
    running, thread_pid = service
    assert thread_pid != running.pid
    stop_pid(thread_pid)  # as if a service once had this pid
    assert running.is_running()


def test_a_pid_given_to_a_later_process_is_not_stopped(service: tuple[RunningService, int]) -> None:
    running, _ = service
    earlier = RunningService(running.name, running.pid, 0, "", started=running.started - 1)
    assert not earlier.is_running()
    earlier.stop()
    assert running.is_running()


def test_the_service_itself_is_stopped(service: tuple[RunningService, int]) -> None:
    running, _ = service
    running.stop()
    assert not running.is_running()
    assert process_started(running.pid) == 0
