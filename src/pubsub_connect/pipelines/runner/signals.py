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

    The handler itself only writes the signal's number to a pipe; a relay thread reads it and sets
    ``stop_event``. Python runs a handler in the main thread between two bytecodes, and the main
    thread often waits on ``stop_event`` itself: a handler that set the event directly would
    deadlock whenever the signal landed while the main thread held the event's (non-reentrant)
    lock, and the process would then ignore every further signal. Raises ``ValueError`` off the
    main thread, as ``signal.signal`` does, before anything is opened."""
    if threading.current_thread() is not threading.main_thread():
        raise ValueError("stop signals can only be installed from the main thread")
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)

    def handler(signum: int, _frame: object) -> None:
        with contextlib.suppress(BlockingIOError):  # a full pipe already holds a stop request
            os.write(write_fd, bytes([signum]))

    def relay() -> None:
        while received := os.read(read_fd, 1):
            log.info("signal %d: stopping", received[0])
            stop_event.set()

    threading.Thread(target=relay, name="stop-signal-relay", daemon=True).start()
    for signum in _STOP_SIGNALS:
        signal.signal(signum, handler)
