"""A local S3 API (moto server) on loopback, for the archive connector.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from pubsub_connect.io.services.process import (
    LOOPBACK,
    RunningService,
    ServiceError,
    free_port,
    process_started,
    start_listening,
)


def moto_server_command() -> list[str]:
    exe = shutil.which("moto_server")
    venv_exe = Path(sys.executable).parent / "moto_server"
    if venv_exe.exists():
        return [str(venv_exe)]
    if exe:
        return [exe]
    raise ServiceError("the local S3 server needs 'moto[server]': pip install 'pubsub-connect[local]'")


def start_s3(workdir: Path, port: int | None = None) -> RunningService:
    """Start a moto S3 server on loopback (in-memory)."""
    port = port or free_port()
    log_path = workdir / "s3.log"
    argv = [*moto_server_command(), "-H", LOOPBACK, "-p", str(port)]
    proc = start_listening("s3", argv, log_path, port, "S3 server (moto)", 30)
    endpoint = f"http://{LOOPBACK}:{port}"
    env = {
        "AWS_ENDPOINT_URL_S3": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    return RunningService("s3", proc.pid, port, endpoint, env, str(log_path), str(workdir), process_started(proc.pid))
