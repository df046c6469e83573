"""The README's first command ends with ``pubsub-connect quickstart``: run it as a user would."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pyspark
import pytest


@pytest.mark.compat
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quickstart_delivers_every_sample_record(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pubsub_connect.cli", "quickstart", "--records", "60", "--storage-root", str(tmp_path)],
        capture_output=True, text=True, timeout=840, check=False)
    out = result.stdout
    assert result.returncode == 0, out[-2000:] + result.stderr[-3000:]
    assert "produced 60 records to Kafka topic 'quickstart' (3 partitions)" in out
    assert "[quickstart-sink.publish]" in out
    assert "pulled 60 of 60 messages from projects/quickstart-project/subscriptions/quickstart-subscription" in out
    # the first sample record, with its key, header and the metadata attributes
    assert "data=b'the quick brown fox'" in out and '"key": "dog"' in out and '"seq": "0"' in out
    assert '"kafka.topic": "quickstart"' in out
    assert (tmp_path / "quickstart-sink.properties").read_text().startswith("# The Cloud Pub/Sub sink")
    # The engine Databricks runs: Spark's Kafka connector, and tables written by Delta Lake on Spark.
    assert "engine: local: native kafka, native delta" in out
    for table in ("bronze", "outbox"):
        commits = sorted((tmp_path / "data" / table / "quickstart-sink" / "_delta_log").glob("*.json"))
        assert commits, table
        for commit in commits:
            infos = [json.loads(line)["commitInfo"] for line in commit.read_text().splitlines()
                     if '"commitInfo"' in line]
            assert len(infos) == 1 and f"Apache-Spark/{pyspark.__version__}" in infos[0]["engineInfo"], (commit, infos)
            assert f"Delta-Lake/{version('delta-spark')}" in infos[0]["engineInfo"], (commit, infos)
