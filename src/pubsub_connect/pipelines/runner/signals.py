"""Ctrl-C and SIGTERM as a clean stop of a continuous run."""

from __future__ import annotations

import logging
import signal
import threading

log = logging.getLogger(__name__)


def install_stop_signals(stop_event: threading.Event) -> None:
    """Ctrl-C / SIGTERM stop the continuous run cleanly: every stage's query is stopped, and a
    micro-batch cut short is not committed, so it runs again on restart (nothing is lost; a sink
    may publish that batch twice, at least once as documented)."""

    def handler(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping", signum)
        stop_event.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
