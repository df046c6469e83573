"""JVM options for the JVMs the tests start: Spark drivers, standalone daemons and executors.

A test's Spark application lives seconds to a minute and moves a few hundred records, so its CPU
goes to starting up and to planning, code generation and Delta log replay, all run a handful of
times; on a 2-core machine the optimizing (C2) compiler's threads compete with that work for most
of a test's life and rarely pay back. ``-XX:TieredStopAtLevel=1`` keeps the quick (C1) compiler
only. Measured on a slow 2-core machine: a session start plus five small Delta appends took
11.5-14.2 s of work instead of 19.5-20.5 s. It changes no result, only how the same bytecode is
compiled; the product itself keeps the JVM's defaults, which suit long-running streams.

Long-lived JVMs of the test session keep their own options: they serve every test and do get hot.
Those are the Kafka broker, Kafka Connect, the Pub/Sub emulator and the tests' own in-process
SparkSession, which ran the end-to-end tests slower with C1 only (it runs hundreds of queries).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager

TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"


def with_test_jvm_options(existing: str | None) -> str:
    """``existing`` JVM options with :data:`TEST_JVM_OPTIONS` added once."""
    current = (existing or "").strip()
    return current if TEST_JVM_OPTIONS in current else f"{current} {TEST_JVM_OPTIONS}".strip()


def use_test_jvm_options(env: MutableMapping[str, str] = os.environ) -> None:
    """Give every Spark driver started with ``env`` (in process, or a ``pubsub-connect run``
    subprocess that inherits it) the test JVM options: ``spark-submit`` adds
    ``SPARK_SUBMIT_OPTS`` to the driver's command line, beside ``spark.driver.extraJavaOptions``,
    which the product sets itself."""
    env["SPARK_SUBMIT_OPTS"] = with_test_jvm_options(env.get("SPARK_SUBMIT_OPTS"))


@contextmanager
def without_test_jvm_options(env: MutableMapping[str, str] = os.environ) -> Iterator[None]:
    """Start a long-lived Spark driver in the ``with`` body with the JVM's own compilers: the
    variable is put back as it was afterwards, for the short-lived drivers started later."""
    saved = env.pop("SPARK_SUBMIT_OPTS", None)
    try:
        yield
    finally:
        if saved is not None:
            env["SPARK_SUBMIT_OPTS"] = saved
