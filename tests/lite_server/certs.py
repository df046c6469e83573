"""Self-signed TLS material for the local Pub/Sub Lite server.

Why: the official ``google-cloud-pubsublite`` client only opens TLS channels (it has no
emulator/insecure switch), so the test server must present a certificate the client trusts. A
throw-away self-signed certificate for ``localhost`` and ``127.0.0.1`` is generated per server
start; the client process trusts it through ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``.

``cryptography`` is used when importable (it is a dependency of google-auth); otherwise the
``openssl`` command line tool is used, so the server has no hard extra dependency.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of one self-signed certificate (also its own trust root) and its private key."""

    cert_path: Path
    key_path: Path

    @property
    def cert_pem(self) -> bytes:
        return self.cert_path.read_bytes()

    @property
    def key_pem(self) -> bytes:
        return self.key_path.read_bytes()


def make_self_signed(directory: Path, days: int = 7) -> TlsFiles:
    """Write ``cert.pem``/``key.pem`` for ``localhost`` + ``127.0.0.1`` into ``directory``.

    An existing pair in ``directory`` is reused, so a restarted server keeps the certificate that
    already-running client processes were told to trust.
    """
    directory.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(directory / "cert.pem", directory / "key.pem")
    if files.cert_path.exists() and files.key_path.exists():
        return files
    try:
        _with_cryptography(files, days)
    except ImportError:
        _with_openssl(files, days)
    return files


def _with_cryptography(files: TlsFiles, days: int) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        # CA:TRUE lets BoringSSL accept the certificate as the trust anchor it is configured as.
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    files.key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    files.cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _with_openssl(files: TlsFiles, days: int) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("neither the 'cryptography' package nor the 'openssl' CLI is available")
    subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", str(files.key_path), "-out", str(files.cert_path),
            "-days", str(days), "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-addext", "basicConstraints=critical,CA:TRUE",
        ],
        check=True,
        capture_output=True,
    )
