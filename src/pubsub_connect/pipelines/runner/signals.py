"""Ctrl-C and SIGTERM as a clean stop of a continuous run."""

from __future__ import annotations

import logging
import signal
import threading

log = logging.getLogger(__name__)


def install_stop_signals(stop_event: threading.Event) -> None:
    """Ctrl-C / SIGTERM stop the continuous run cleanly (queries stop at a batch boundary)."""

    def handler(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping", signum)
        stop_event.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
