"""The Pub/Sub sink's record fixtures (``fixtures/records/cps_sink``) and their byte encoding,
shared by the per-record model tests and the batch tests that hold the batch to the model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "records" / "cps_sink"


def fixture_bytes(spec: Any) -> bytes | None:
    """Fixture byte encoding: null | {"utf8": text} | {"hex": hex} | {"json": value (compact)}."""
    if spec is None:
        return None
    if "utf8" in spec:
        return spec["utf8"].encode()
    if "hex" in spec:
        return bytes.fromhex(spec["hex"])
    return json.dumps(spec["json"], separators=(",", ":"), ensure_ascii=False).encode()
