"""The Spark versions the product runs on, and the check every entry point makes before it starts.

Why a check of its own, at start: users run the bundle on Databricks Runtimes that lag the newest
Spark (17.3 LTS is Spark 4.0), and a Spark outside the tested range does not fail cleanly later: a
module imports an API that Spark does not have yet, or a job dies in its first micro-batch. So
``run``, ``worker``, ``pipeline run``, the jobs and the pipelines' source file ask this module
first, and an unsupported Spark stops them with one line naming what was found and what is
supported. The version is read from the installed PySpark (the same string ``spark.version``
gives on a cluster, Databricks included), so the check needs no session.

Spark 3.5 (Databricks Runtime 15.4 LTS and 16.4 LTS) is refused. Measured with PySpark 3.5.2: 17
of the package's modules fail to import for want of the Python data source API
(``pyspark.sql.datasource``, new in Spark 4.0) alone — the Lite source (a Python streaming source
on every engine), the Kafka offset reader behind consumer-group positions, the archive stage and
the whole worker — and Delta Lake 4, the one Delta all three supported lines share, has no build
for it. Supporting it would mean a second Lite source and a second Delta line, not a few guards.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The oldest and newest Spark release lines (major, minor) the product is tested on.
OLDEST_SPARK = (4, 0)
NEWEST_SPARK = (4, 2)


#: The first Spark line whose PySpark ships ``pyspark.pipelines`` (declarative pipelines).
DECLARATIVE_PIPELINES_SINCE = (4, 1)

@dataclass(frozen=True)
class Runtime:
    """One row of the README's runtime table: a Databricks Runtime and the local combination that
    stands for it in the tests (:file:`.ci/compat` installs exactly these)."""

    databricks: str
    spark: str
    python: str
    local_pyspark: str
    local_delta: str
    local_python: str


#: Databricks Runtimes in support whose Spark is in the range, newest first, each with the local
#: combination that stands for it. Spark 4.0 is tested as Databricks Runtime 17.3 LTS ships it
#: (Spark 4.0.0, Delta Lake 4.0.0): Maven Central lacks the Kafka token provider of Spark 4.0.1 to
#: 4.0.4, and the Delta Lake releases built for several Spark lines (4.1 on) ask PySpark 4.0.1 or
#: newer. Delta Lake 4.4.0 is built for Spark 4.1 and 4.2 alike (``delta-spark_<x.y>_2.13``).
RUNTIMES = (
    Runtime("19.x", "4.2", "3.12", "4.2.0", "4.4.0", "3.11"),
    Runtime("18.x", "4.1", "3.12", "4.1.1", "4.4.0", "3.12"),
    Runtime("17.3 LTS", "4.0", "3.12", "4.0.0", "4.0.0", "3.12"),
)


def local_combination(line: str) -> tuple[str, str, str]:
    """The pip requirements of PySpark and delta-spark and the Python version that stand for the
    Spark ``line`` (``"4.0"``) in the tests; ``pyspark.pipelines``' extra where that Spark has it."""
    for runtime in RUNTIMES:
        if runtime.spark == line:
            extras = "sql,pipelines" if release_line(line) >= DECLARATIVE_PIPELINES_SINCE else "sql"
            return (f"pyspark[{extras}]=={runtime.local_pyspark}", f"delta-spark=={runtime.local_delta}",
                    runtime.local_python)
    raise UnsupportedSparkError(f"no tested combination for Spark {line}: the lines are "
                                f"{', '.join(r.spark for r in reversed(RUNTIMES))}")


class UnsupportedSparkError(RuntimeError):
    """The running Spark is outside the supported range (a one-line message)."""


def release_line(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a Spark version string (``4.0.1``, ``4.1.0.dev0``, ``3.5.2-databricks``);
    ``(0, 0)`` for a string that names none, which no range contains."""
    match = re.match(r"(\d+)\.(\d+)", version.strip())
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def supported_range() -> str:
    """The range in words, with the Databricks Runtimes it covers."""
    lines = ", ".join(f"{major}.{minor}" for major, minor in _supported_lines())
    runtimes = ", ".join(r.databricks for r in reversed(RUNTIMES))
    return f"Spark {lines} (Databricks Runtime {runtimes})"


def _supported_lines() -> list[tuple[int, int]]:
    return [(OLDEST_SPARK[0], minor) for minor in range(OLDEST_SPARK[1], NEWEST_SPARK[1] + 1)]


def installed_pyspark() -> str:
    """The installed PySpark's version: on a cluster, the runtime's Spark."""
    import pyspark

    return pyspark.__version__


def check_spark(version: str | None = None) -> str:
    """Return ``version`` (default: the installed PySpark's) when it is supported, else raise
    :class:`UnsupportedSparkError` naming it and the range."""
    found = version if version is not None else installed_pyspark()
    if not OLDEST_SPARK <= release_line(found) <= NEWEST_SPARK:
        raise UnsupportedSparkError(f"Spark {found} is not supported: pubsub-connect runs on {supported_range()}")
    return found


def has_declarative_pipelines() -> bool:
    """Whether this PySpark ships ``pyspark.pipelines`` (open-source Spark 4.1 and newer). On
    Databricks the pipeline runtime brings its own, whatever the job clusters' runtime."""
    import importlib.util

    return importlib.util.find_spec("pyspark.pipelines") is not None


def python_stream_admission_control() -> bool:
    """Whether Python streaming sources can take read limits and ``availableNow`` (Spark 4.2+:
    ``pyspark.sql.streaming.datasource``), which the Lite source and the fallback's Kafka and Delta
    sources use to bound their micro-batches."""
    import importlib.util

    return importlib.util.find_spec("pyspark.sql.streaming.datasource") is not None


if __name__ == "__main__":  # .ci/compat asks which combination stands for a line
    import sys

    try:
        print(*local_combination(sys.argv[1]))
    except UnsupportedSparkError as exc:
        sys.exit(f"compat: {exc}")
