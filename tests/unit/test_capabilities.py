"""Selection of native vs. Python implementations."""

from __future__ import annotations

import pytest

from pubsub_connect.io.spark import Capabilities, resolve_capabilities

LOCAL = Capabilities(native_kafka=False, native_delta=False)
CLUSTER = Capabilities(native_kafka=True, native_delta=True, databricks=True)


def test_auto_keeps_what_was_detected() -> None:
    assert resolve_capabilities(LOCAL) == LOCAL
    assert resolve_capabilities(CLUSTER) == CLUSTER
    assert LOCAL.describe() == "local: python kafka source, delta-rs"
    assert CLUSTER.describe() == "databricks: native kafka, native delta"


def test_forcing_python_implementations_on_a_cluster() -> None:
    forced = resolve_capabilities(CLUSTER, "python", "delta-rs")
    assert (forced.native_kafka, forced.native_delta, forced.databricks) == (False, False, True)


@pytest.mark.parametrize(
    ("kafka", "table", "message"),
    [
        ("native", "auto", "Kafka connector is not on the classpath"),
        ("auto", "delta-spark", "Delta Lake is not on the classpath"),
    ],
)
def test_asking_for_a_missing_native_fails(kafka: str, table: str, message: str) -> None:
    with pytest.raises(RuntimeError, match=message):
        resolve_capabilities(LOCAL, kafka, table)
