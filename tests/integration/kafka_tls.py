"""TLS material made by the tests: a CA of their own and server certificates it signs.

Used for the test broker's SASL_SSL listener (a broker certificate, and the files clients are
pointed at) and for the local HTTPS front that stands in for ``pubsub.googleapis.com`` when
Google's own connector runs as the reference (see ``tests/reference``).

Why a CA rather than a self-signed server certificate: that is how production servers are set
up (clients trust the organisation's CA, not each server), and the Java clients, librdkafka and
gRPC then verify a real chain, hostname (DNS or IP SAN) included.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class KafkaTls:
    """``ca_pem``: the CA certificate (clients' trust store, ``ssl.truststore.type=PEM``);
    ``keystore_pem``: the broker's key and chain (Kafka's PEM key store); ``ca_pkcs12``: the CA
    certificate in a password-protected PKCS12 trust store (password ``truststore_password``)."""

    ca_pem: Path
    keystore_pem: Path
    ca_pkcs12: Path
    truststore_password: str


@dataclass(frozen=True)
class ServerTls:
    """A server certificate signed by a test CA, in the forms its users need.

    ``cert_chain_pem``/``key_pem``: what a Python ``ssl`` server loads; ``java_truststore``: the CA
    as a PKCS12 trust store the JVM reads through ``-Djavax.net.ssl.trustStore`` (its entry carries
    Java's trusted-certificate attribute, without which the JDK ignores a key-less PKCS12 entry),
    password ``truststore_password``.
    """

    ca_pem: Path
    cert_chain_pem: Path
    key_pem: Path
    java_truststore: Path
    truststore_password: str


def _new_ca(common_name: str, days: int) -> tuple[Any, Any]:
    """A CA key and its self-signed certificate (may sign server certificates, nothing below them)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    ca_cert = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ca_key, ca_cert


def _server_certificate(ca_key: Any, ca_cert: Any, dns_names: Sequence[str], ip_addresses: Sequence[str],
                        days: int) -> tuple[Any, Any]:
    """A server key and its certificate for ``dns_names`` and ``ip_addresses``, signed by the CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.timezone.utc)
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName(name) for name in dns_names]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, (dns_names or ip_addresses)[0])]))
        .issuer_name(ca_cert.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def make_kafka_tls(directory: Path, days: int = 7) -> KafkaTls:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _new_ca("pubsub-connect test CA", days)
    broker_key, broker_cert = _server_certificate(ca_key, ca_cert, ["localhost"], ["127.0.0.1"], days)
    pem = serialization.Encoding.PEM
    ca_pem = directory / "ca.pem"
    ca_pem.write_bytes(ca_cert.public_bytes(pem))
    keystore = directory / "broker-keystore.pem"
    keystore.write_bytes(
        broker_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        + broker_cert.public_bytes(pem) + ca_cert.public_bytes(pem))
    password = "truststore-secret"
    ca_pkcs12 = directory / "truststore.p12"
    ca_pkcs12.write_bytes(pkcs12.serialize_key_and_certificates(
        b"ca", None, None, [ca_cert], serialization.BestAvailableEncryption(password.encode())))
    return KafkaTls(ca_pem, keystore, ca_pkcs12, password)


def make_server_tls(directory: Path, dns_names: Sequence[str], ip_addresses: Sequence[str] = ("127.0.0.1",),
                    days: int = 7) -> ServerTls:
    """A new CA and a server certificate for ``dns_names``/``ip_addresses`` in ``directory``."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _new_ca("pubsub-connect test CA", days)
    key, cert = _server_certificate(ca_key, ca_cert, dns_names, ip_addresses, days)
    pem = serialization.Encoding.PEM
    ca_pem = directory / "ca.pem"
    ca_pem.write_bytes(ca_cert.public_bytes(pem))
    chain = directory / "server-chain.pem"
    chain.write_bytes(cert.public_bytes(pem) + ca_cert.public_bytes(pem))
    key_pem = directory / "server-key.pem"
    key_pem.write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    key_pem.chmod(0o600)
    password = "truststore-secret"
    truststore = directory / "java-truststore.p12"
    truststore.write_bytes(pkcs12.serialize_java_truststore(
        [pkcs12.PKCS12Certificate(ca_cert, b"test-ca")], serialization.BestAvailableEncryption(password.encode())))
    return ServerTls(ca_pem, chain, key_pem, truststore, password)
