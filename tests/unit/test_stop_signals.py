"""SIGTERM / Ctrl-C set the continuous run's stop event, whatever the main thread is doing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

from pubsub_connect.pipelines.runner.signals import install_stop_signals

# The main thread holds the stop event's lock when the signal's handler runs, as it does for a
# moment in every ``stop.wait(0.5)`` of the stage runner's loop. A handler that set the event
# itself would wait for that lock in the thread that holds it, forever.
_SIGNAL_WHILE_HOLDING_THE_EVENT_LOCK = textwrap.dedent("""
    import signal
    import threading

    from pubsub_connect.pipelines.runner.signals import install_stop_signals

    stop = threading.Event()
    install_stop_signals(stop)
    with stop._cond:
        signal.raise_signal(signal.SIGTERM)  # its Python handler runs here, in this thread
        held_when_handled = stop._cond._is_owned()
    print(f"held={held_when_handled} stopped={stop.wait(60)}", flush=True)
""")


def test_a_stop_signal_while_the_main_thread_holds_the_event_lock_still_stops() -> None:
    done = subprocess.run([sys.executable, "-c", _SIGNAL_WHILE_HOLDING_THE_EVENT_LOCK],
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (0, "held=True stopped=True\n", "")


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


