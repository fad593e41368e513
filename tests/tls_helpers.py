"""Test certificates made with ``cryptography``: a throwaway CA and leaf certificates it signs
(EC P-256, valid for a day), written as PEM files for the config's TLS fields."""
from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Pem:
    cert: Path
    key: Path


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(folder: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> Pem:
    folder.mkdir(parents=True, exist_ok=True)
    c, k = folder / f"{stem}.crt", folder / f"{stem}.key"
    c.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    k.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    return Pem(c, k)


class TestCa:
    """A CA that issues server and client certificates into ``folder``."""

    __test__ = False   # not a test class

    def __init__(self, folder: Path, name: str = "costscale test CA") -> None:
        self.folder = folder
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.timezone.utc)
        self.cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                     .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                  content_commitment=False, key_encipherment=False,
                                                  data_encipherment=False, key_agreement=False,
                                                  encipher_only=False, decipher_only=False), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.pem = _write(folder, name.replace(" ", "-"), self.cert, self.key)

    @property
    def ca_file(self) -> Path:
        return self.pem.cert

    def issue(self, stem: str, dns: tuple[str, ...] = ("localhost",), ips: tuple[str, ...] = ("127.0.0.1",)) -> Pem:
        """A leaf certificate for ``dns`` names and ``ips`` (server and client use alike)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.timezone.utc)
        sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        cert = (x509.CertificateBuilder().subject_name(_name(stem)).issuer_name(self.cert.subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.SubjectAlternativeName(sans), critical=False)
                .sign(self.key, hashes.SHA256()))
        return _write(self.folder, stem, cert, key)
