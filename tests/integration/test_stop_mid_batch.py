"""Stopping a stage whose micro-batch is in flight is a clean stop, with nothing on the console.

A stop cancels the batch's Spark jobs; the batch function's error then reached Spark as py4j's
whole Java stack trace, and Spark's pattern for recognizing an interrupted Python batch function
overflowed the query thread's stack on it: a thousand-line ``StackOverflowError`` on the console
at every such stop (``pipelines/runner/interrupted.py``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# compat: what a stop tells Spark is read by its own pattern, which each Spark line may change
pytestmark = [pytest.mark.slow, pytest.mark.compat]

DRIVER = Path(__file__).with_name("stop_mid_batch_driver.py")


def test_a_stop_that_cuts_a_batch_short_is_clean_and_quiet(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(DRIVER), str(tmp_path / "root")], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "stopped; exception: None"  # Spark saw an interruption, not a failure
    assert "StackOverflowError" not in done.stderr
    assert "Exception in thread" not in done.stderr
