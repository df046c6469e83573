"""Processes of this host: whether one is still running.

Why: temporary files and staging directories are named ``…-<pid>-<id>`` after the process that
made them, so that a later process can remove those whose maker has died (and only those).
"""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host still runs (one of another user counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
