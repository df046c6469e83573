"""The README's first command ends with ``pubsub-connect quickstart``: run it as a user would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


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
    assert (tmp_path / "data" / "outbox" / "quickstart-sink" / "_delta_log").is_dir()
