"""Certificates for tests, made with Debian's openssl: a private CA, server and client
certificates it signs (valid or expired), self-signed ones; and a demo backend
behind Python's ssl that counts the HTTP requests it got.

    ca = CA(tmp_path / "ca")
    server = ca.issue("backend", names=["localhost", "127.0.0.1"])
    backend = tls_backend(server, client_ca=None)   # a DemoServer speaking HTTPS
"""
from __future__ import annotations

import ssl
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from control_plane.demo.backends import DemoHandler, DemoServer

OPENSSL = "openssl"


def _run(*args: str, cwd: Path) -> None:
    res = subprocess.run([OPENSSL, *args], cwd=cwd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed:\n{res.stderr}")


def _san(names: list[str]) -> str:
    parts = []
    for n in names:
        is_ip = n.replace(".", "").isdigit() or ":" in n
        parts.append(("IP:" if is_ip else "DNS:") + n)
    return ",".join(parts)


@dataclass(frozen=True)
class Pair:
    """A certificate and its key, as files and as PEM text."""
    cert: Path
    key: Path

    @property
    def cert_pem(self) -> str:
        return self.cert.read_text()

    @property
    def key_pem(self) -> str:
        return self.key.read_text()


class CA:
    """A private certificate authority in `folder` (openssl ca, EC P-256 keys)."""

    def __init__(self, folder: Path, name: str = "Sluice Test CA"):
        self.folder = Path(folder)
        (self.folder / "issued").mkdir(parents=True, exist_ok=True)
        (self.folder / "index.txt").write_text("")
        (self.folder / "serial").write_text("1000\n")
        (self.folder / "ca.cnf").write_text(
            "[ca]\ndefault_ca = own\n[own]\n"
            f"dir = {self.folder}\ndatabase = $dir/index.txt\nserial = $dir/serial\n"
            "new_certs_dir = $dir/issued\ndefault_md = sha256\npolicy = any\n"
            "unique_subject = no\ncopy_extensions = none\n"
            "[any]\ncommonName = supplied\n")
        _run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "30",
             "-subj", f"/CN={name}",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=self.folder)
        self.cert = self.folder / "ca.pem"

    @property
    def pem(self) -> str:
        return self.cert.read_text()

    def issue(self, name: str, names: list[str] | None = None, *, client: bool = False,
              expired: bool = False) -> Pair:
        """A certificate for `name` (CN) valid for `names` (DNS names and IPs), for a
        server (default) or a client; `expired`: valid only in January 2020."""
        key, csr, cert, ext = (self.folder / f"{name}.{s}" for s in ("key", "csr", "pem", "ext"))
        _run("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", key.name, "-out", csr.name, "-subj", f"/CN={name}", cwd=self.folder)
        lines = ["basicConstraints=CA:FALSE",
                 "extendedKeyUsage=" + ("clientAuth" if client else "serverAuth")]
        if names:
            lines.append("subjectAltName=" + _san(names))
        ext.write_text("\n".join(lines) + "\n")
        dates = (["-startdate", "20200101000000Z", "-enddate", "20200201000000Z"] if expired
                 else ["-days", "30"])
        _run("ca", "-batch", "-notext", "-config", "ca.cnf", "-cert", "ca.pem",
             "-keyfile", "ca.key", "-in", csr.name, "-out", cert.name, "-extfile", ext.name,
             *dates, cwd=self.folder)
        return Pair(cert, key)


def self_signed(folder: Path, name: str, names: list[str]) -> Pair:
    """A certificate signed by its own key (no CA vouches for it)."""
    folder.mkdir(parents=True, exist_ok=True)
    _run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "30", "-subj", f"/CN={name}",
         "-addext", "subjectAltName=" + _san(names), cwd=folder)
    return Pair(folder / f"{name}.pem", folder / f"{name}.key")


class _CountingHandler(DemoHandler):
    def parse_request(self) -> bool:
        ok = super().parse_request()
        if ok:
            with self.server.seen_lock:
                self.server.requests_seen += 1
        return ok


class TLSDemoServer(DemoServer):
    """A demo backend behind Python's ssl; `requests_seen` counts HTTP requests
    parsed (a peer that fails the handshake adds none)."""

    def __init__(self, address, protocol: str, name: str, context: ssl.SSLContext, **kw):
        super().__init__(address, protocol, name, **kw)
        self.RequestHandlerClass = _CountingHandler
        self.requests_seen = 0
        self.connections = 0   # TLS connections accepted (handshake done)
        self.seen_lock = threading.Lock()
        self.socket = context.wrap_socket(self.socket, server_side=True)

    def get_request(self):
        conn = super().get_request()   # the handshake happens here; failures raise
        self.connections += 1
        return conn

    @property
    def url(self) -> str:
        return f"https://{self.server_address[0]}:{self.port}"


def tls_backend(server: Pair, *, protocol: str = "openai", name: str = "tls-backend",
                client_ca: CA | None = None, **kw) -> TLSDemoServer:
    """Start an HTTPS demo backend on 127.0.0.1 (a free port) with `server`'s
    certificate; with `client_ca`, it requires a client certificate that CA signed."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(server.cert, server.key)
    if client_ca is not None:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(cafile=str(client_ca.cert))
    srv = TLSDemoServer(("127.0.0.1", 0), protocol, name, ctx, **kw)
    return srv.start()
