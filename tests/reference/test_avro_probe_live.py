"""TEMPORARY live probe (deleted before hand-over)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from reference.connect import ConnectStandalone

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("pubsub_emulator_host")]


def test_live(google_connect: ConnectStandalone, kafka_bootstrap: str, schema_registry_url: str,
              pubsub_emulator_host: str) -> None:
    Path("/tmp/live.json").write_text(json.dumps({
        "rest": google_connect.rest_url, "bootstrap": kafka_bootstrap, "registry": schema_registry_url,
        "pubsub": pubsub_emulator_host, "log": str(google_connect.log_path),
        "creds": str(google_connect.credentials_file)}))
    Path("/tmp/live.run").write_text("x")
    while os.path.exists("/tmp/live.run"):
        time.sleep(1)
