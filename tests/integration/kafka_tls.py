"""TLS material for the test broker's SASL_SSL listener: a CA made here, a broker certificate it
signs, and the files clients are pointed at.

Why a CA rather than a self-signed broker certificate: that is how production clusters are set
up (clients trust the organisation's CA, not each broker), and both the Java client and
librdkafka then verify a real chain, hostname (IP SAN) included.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class KafkaTls:
    """``ca_pem``: the CA certificate (clients' trust store, ``ssl.truststore.type=PEM``);
    ``keystore_pem``: the broker's key and chain (Kafka's PEM key store); ``ca_pkcs12``: the CA
    certificate in a password-protected PKCS12 trust store (password ``truststore_password``)."""

    ca_pem: Path
    keystore_pem: Path
    ca_pkcs12: Path
    truststore_password: str


def make_kafka_tls(directory: Path, days: int = 7) -> KafkaTls:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import pkcs12
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pubsub-connect test CA")])
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
    broker_key = ec.generate_private_key(ec.SECP256R1())
    broker_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name).public_key(broker_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
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
