"""Fixtures of the cluster tests: one Spark standalone cluster per session.

The cluster (a master and two one-core workers, see :mod:`cluster.standalone`) is started only
when a test asks for it, shared by every cluster test (a start costs two JVMs and ~10 s), and
always stopped at the end of the session with everything it launched. Its start time is
reported in the terminal summary.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cluster.standalone import StandaloneCluster
from timings import section, timed

#: Timings shown in the terminal summary (see :mod:`timings`).
TIMINGS = section("spark standalone cluster")


def pytest_configure(config: pytest.Config) -> None:
    """Registers the marker here because ``pyproject.toml`` belongs to the whole project (and
    ``--strict-markers`` rejects an unregistered one)."""
    config.addinivalue_line(
        "markers", "cluster: end-to-end tests on a local Spark standalone cluster (a master and two workers)")


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A master and two workers (1 core, 1 GB each) on loopback, work directories in the session's
    tmp dir; killed with all their executors at the end of the session."""
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2, cores=1, worker_memory="1g")
    cluster.start()
    TIMINGS["cluster start (master + 2 workers ALIVE)"] = cluster.started_in_s
    try:
        yield cluster
    finally:
        with timed(TIMINGS, "cluster stop"):
            cluster.stop()
