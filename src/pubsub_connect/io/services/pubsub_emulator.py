"""Google's Pub/Sub emulator, from the machine's gcloud SDK, on loopback.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from pubsub_connect.io.services.process import (
    LOOPBACK,
    RunningService,
    ServiceError,
    free_port,
    process_started,
    start_listening,
)


def pubsub_emulator_command() -> list[str]:
    """The launcher of Google's Pub/Sub emulator from the machine's gcloud SDK."""
    if shutil.which("java") is None:
        raise ServiceError("Java is not installed: Google's Pub/Sub emulator needs a JRE (apt-get install default-jre)")
    candidates: list[Path] = []
    if os.environ.get("PUBSUB_EMULATOR_LAUNCHER"):
        candidates.append(Path(os.environ["PUBSUB_EMULATOR_LAUNCHER"]))
    gcloud = shutil.which("gcloud")
    if gcloud:
        sdk_root = Path(os.path.realpath(gcloud)).parent.parent
        candidates.append(sdk_root / "platform" / "pubsub-emulator" / "bin" / "cloud-pubsub-emulator")
    candidates.append(Path("/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator"))
    for candidate in candidates:
        if candidate.exists():
            return [str(candidate)]
    raise ServiceError(
        "Google's Pub/Sub emulator is not installed (looked for gcloud's platform/pubsub-emulator): "
        "install the 'google-cloud-cli-pubsub-emulator' package or set PUBSUB_EMULATOR_LAUNCHER"
    )


def start_pubsub_emulator(workdir: Path, port: int | None = None) -> RunningService:
    """Start Google's Pub/Sub emulator on loopback (in-memory; ~300 MB JVM)."""
    port = port or free_port()
    log_path = workdir / "pubsub-emulator.log"
    argv = [*pubsub_emulator_command(), f"--host={LOOPBACK}", f"--port={port}"]
    proc = start_listening("pubsub", argv, log_path, port, "Pub/Sub emulator", 60)
    host = f"{LOOPBACK}:{port}"
    return RunningService("pubsub", proc.pid, port, host, {"PUBSUB_EMULATOR_HOST": host}, str(log_path),
                          str(workdir), process_started(proc.pid))
