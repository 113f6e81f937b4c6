"""rediss:// from Python: the CA and client-certificate options reach the core, verification is on
by default, and the options are refused with a plain redis:// URL."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Iterator, List

import pytest

import ferrolock
from conftest import RedisServer, free_port


def _openssl(cwd: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("tls")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(d, "req", "-x509", "-days", "2", "-subj", "/CN=ca", "-keyout", "ca.key", "-out", "ca.crt", *ec,
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")
    for name, ext in [("server", "subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n"),
                      ("client", "extendedKeyUsage=clientAuth\n")]:
        (d / f"{name}.ext").write_text(ext)
        _openssl(d, "req", "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.csr", *ec)
        _openssl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "2", "-out", f"{name}.crt", "-extfile", f"{name}.ext")
    return d


@pytest.fixture(scope="module")
def tls_server(certs: Path) -> Iterator[List[object]]:
    port = free_port()
    server = RedisServer("--tls-port", str(port), "--tls-cert-file", str(certs / "server.crt"),
                         "--tls-key-file", str(certs / "server.key"),
                         "--tls-ca-cert-file", str(certs / "ca.crt"), "--tls-auth-clients", "yes")
    try:
        yield [server, port]
    finally:
        server.stop()


def test_custom_ca_and_client_certificate(certs: Path, tls_server: List[object], name: str) -> None:
    port = tls_server[1]
    client = ferrolock.Client.connect(
        f"rediss://localhost:{port}", tls_ca_file=certs / "ca.crt",
        tls_cert_file=str(certs / "client.crt"), tls_key_file=certs / "client.key", connect_timeout=2)
    with client.lock(name, ttl=5) as held:
        assert held.fence > 0


def test_verification_is_on_by_default(certs: Path, tls_server: List[object]) -> None:
    port = tls_server[1]
    with pytest.raises(ferrolock.TlsError) as e:
        ferrolock.Client.connect(f"rediss://localhost:{port}", connect_timeout=2)
    assert e.value.name == "TLS" and e.value.code == 203
    with pytest.raises(ferrolock.TlsError):  # the certificate names localhost only
        ferrolock.Client.connect(f"rediss://127.0.0.1:{port}", tls_ca_file=certs / "ca.crt",
                                 tls_cert_file=certs / "client.crt", tls_key_file=certs / "client.key")


def test_bad_tls_options(certs: Path) -> None:
    with pytest.raises(ferrolock.InvalidConfigError):
        ferrolock.Client.connect("redis://localhost:1", tls_ca_file=certs / "ca.crt")
    with pytest.raises(ferrolock.InvalidConfigError):
        ferrolock.Client.connect("rediss://localhost:1", tls_cert_file=certs / "client.crt")
    with pytest.raises(ferrolock.InvalidConfigError):  # nor a key without its certificate
        ferrolock.Client.connect("rediss://localhost:1", tls_key_file=certs / "client.key")
    with pytest.raises(ferrolock.InvalidConfigError):
        ferrolock.Client.connect("rediss://localhost:1", tls_ca_file=certs / "missing.crt")
    with pytest.raises(TypeError):
        ferrolock.Client.connect("rediss://localhost:1", tls_ca_file=42)
