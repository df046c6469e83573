"""Ctrl-C and SIGTERM as a clean stop of a continuous run."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading

log = logging.getLogger(__name__)

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def install_stop_signals(stop_event: threading.Event) -> None:
    """Ctrl-C / SIGTERM stop the continuous run cleanly: every stage's query is stopped, and a
    micro-batch cut short is not committed, so it runs again on restart (nothing is lost; a sink
    may publish that batch twice, at least once as documented).

    A relay thread sets ``stop_event``; the signal only reaches it through a pipe. Two reasons:

    - Python runs a handler in the main thread between two bytecodes, and the main thread often
      waits on ``stop_event`` itself: a handler that set the event directly would deadlock
      whenever the signal landed while the main thread held the event's (non-reentrant) lock.
    - The kernel may deliver the signal to any thread (a JVM gateway's, gRPC's). Python's Python
      handler then waits until the main thread next runs bytecode, which it never does while it
      blocks in an untimed wait. So the pipe is also the interpreter's wakeup fd: Python's
      C-level handler writes the signal's number to it in whichever thread the signal landed.
      Where another wakeup fd is already set (an event loop's), that one is left in place and the
      Python handler writes to the pipe instead.

    Raises ``ValueError`` off the main thread, as ``signal.signal`` does, before anything is
    opened."""
    if threading.current_thread() is not threading.main_thread():
        raise ValueError("stop signals can only be installed from the main thread")
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous_wakeup_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    if previous_wakeup_fd != -1:
        signal.set_wakeup_fd(previous_wakeup_fd)
    handler_writes = previous_wakeup_fd != -1

    def handler(signum: int, _frame: object) -> None:
        if handler_writes:
            with contextlib.suppress(BlockingIOError):  # a full pipe already holds a stop request
                os.write(write_fd, bytes([signum]))

    def relay() -> None:
        while received := os.read(read_fd, 64):
            stop_signals = [signum for signum in received if signum in _STOP_SIGNALS]
            if stop_signals and not stop_event.is_set():  # the wakeup fd carries other handled signals too
                log.info("signal %d: stopping", stop_signals[0])
            if stop_signals:
                stop_event.set()

    threading.Thread(target=relay, name="stop-signal-relay", daemon=True).start()
    for signum in _STOP_SIGNALS:
        signal.signal(signum, handler)
