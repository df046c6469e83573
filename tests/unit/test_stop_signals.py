"""SIGTERM / Ctrl-C set the continuous run's stop event, whatever the main thread is doing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

from pubsub_connect.pipelines.runner.signals import install_stop_signals

#: What every script below starts with: the stop event and the connector's signal handling.
_PRELUDE = textwrap.dedent("""
    import signal
    import threading

    from pubsub_connect.pipelines.runner.signals import install_stop_signals

    stop = threading.Event()
    install_stop_signals(stop)
""")


def run_script(body: str) -> tuple[int, str, str]:
    """The exit code, standard output and standard error of ``body`` after :data:`_PRELUDE`, run
    in a fresh interpreter (signal handling is process-wide)."""
    done = subprocess.run([sys.executable, "-c", _PRELUDE + body], capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout, done.stderr


# The main thread holds the stop event's lock when the signal's handler runs, as it does for a
# moment in every ``stop.wait(0.5)`` of the stage runner's loop. A handler that set the event
# itself would wait for that lock in the thread that holds it, forever.
_SIGNAL_WHILE_HOLDING_THE_EVENT_LOCK = textwrap.dedent("""
    with stop._cond:
        signal.raise_signal(signal.SIGTERM)  # its Python handler runs here, in this thread
        held_when_handled = stop._cond._is_owned()
    print(f"held={held_when_handled} stopped={stop.wait(60)}", flush=True)
""")


def test_a_stop_signal_while_the_main_thread_holds_the_event_lock_still_stops() -> None:
    assert run_script(_SIGNAL_WHILE_HOLDING_THE_EVENT_LOCK) == (0, "held=True stopped=True\n", "")


# The kernel hands a process-directed signal to any thread that does not block it. Here it lands
# in another thread once the main thread blocks in an untimed wait, as the Lite test server's and
# a worker's main threads do: Python's own handler would only run once that wait ended, never.
# The other thread first sees the main thread's frame at the blocking acquire and the main thread
# asleep in the kernel, so the signal cannot arrive while the main thread still runs bytecode.
_SIGNAL_IN_ANOTHER_THREAD_DURING_AN_UNTIMED_WAIT = textwrap.dedent("""
    import linecache
    import sys

    main = threading.main_thread()

    def main_blocks_in_the_wait() -> bool:
        frame = sys._current_frames().get(main.ident)
        at_acquire = frame is not None and frame.f_code.co_name == "wait" and (
            linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip() == "waiter.acquire()")
        with open(f"/proc/self/task/{main.native_id}/stat") as stat:
            asleep = stat.read().rsplit(") ", 1)[1].startswith("S")
        return at_acquire and asleep

    def signal_this_thread_once_the_main_thread_waits() -> None:
        while not main_blocks_in_the_wait():
            pass
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
        threading.Event().wait()  # this thread lives on, so its exit cannot wake the main thread

    threading.Thread(target=signal_this_thread_once_the_main_thread_waits, daemon=True).start()
    print(f"stopped={stop.wait()}", flush=True)
""")


def test_a_stop_signal_delivered_to_another_thread_wakes_an_untimed_wait() -> None:
    assert run_script(_SIGNAL_IN_ANOTHER_THREAD_DURING_AN_UNTIMED_WAIT) == (0, "stopped=True\n", "")


_OTHER_HANDLED_SIGNALS_DO_NOT_STOP = textwrap.dedent("""
    usr1 = threading.Event()
    signal.signal(signal.SIGUSR1, lambda *_: usr1.set())
    signal.raise_signal(signal.SIGUSR1)
    print(f"usr1={usr1.wait(60)} stopped={stop.wait(1)}", flush=True)
    signal.raise_signal(signal.SIGINT)
    print(f"stopped={stop.wait(60)}", flush=True)
""")


def test_only_the_stop_signals_set_the_event() -> None:
    """The wakeup fd carries every handled signal's number; SIGUSR1 must not stop the run."""
    assert run_script(_OTHER_HANDLED_SIGNALS_DO_NOT_STOP) == (0, "usr1=True stopped=False\nstopped=True\n", "")


def test_installing_off_the_main_thread_is_refused() -> None:
    raised: list[BaseException] = []

    def install() -> None:
        try:
            install_stop_signals(threading.Event())
        except ValueError as exc:
            raised.append(exc)

    thread = threading.Thread(target=install)
    thread.start()
    thread.join()
    assert [str(exc) for exc in raised] == ["stop signals can only be installed from the main thread"]


