"""Stopping a stage whose micro-batch is in flight is a clean stop, with nothing on the console.

A stop cancels the batch's Spark jobs; the batch function's error then reached Spark as py4j's
whole Java stack trace, and Spark's pattern for recognizing an interrupted Python batch function
overflowed the query thread's stack on it: a thousand-line ``StackOverflowError`` on the console
at every such stop (``pipelines/runner/interrupted.py``). A stop that cuts a table append short
made Delta's writer log the cancelled job as an aborted one, with its whole trace: a routine stop
is not a failure, and the connector's console shows no warning for it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from stop_mid_batch_driver import SESSION_STOPS

pytestmark = pytest.mark.slow

DRIVER = Path(__file__).with_name("stop_mid_batch_driver.py")


#: A line of the driver JVM's log (``io/log4j2-local.properties``' pattern) at warning level or above.
JVM_WARNING = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (WARN|ERROR|FATAL) ", re.MULTILINE)


@pytest.mark.parametrize("cut_short", [
    # compat: what a stop tells Spark is read by its own pattern, which each Spark line may change
    pytest.param("job", marks=pytest.mark.compat),
    # Delta's writer logs a cancelled append as an aborted job, with its trace
    "append",
])
def test_a_stop_that_cuts_a_batch_short_is_clean_and_quiet(tmp_path: Path, cut_short: str) -> None:
    done = subprocess.run([sys.executable, str(DRIVER), str(tmp_path / "root"), cut_short], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "stopped; exception: None"  # Spark saw an interruption, not a failure
    assert "StackOverflowError" not in done.stderr
    assert "Exception in thread" not in done.stderr
    assert SESSION_STOPS in done.stderr
    stop_logs = done.stderr.split(SESSION_STOPS)[0]
    assert JVM_WARNING.findall(stop_logs) == [], stop_logs[-3000:]  # a routine stop is not a failure
