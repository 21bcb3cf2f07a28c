"""A private certificate authority and server certificates, made with Debian's `openssl`.

`sluice up` uses it for the demo's HTTPS listener (var/tls/), the tests and the
benchmark for theirs::

    ca = CertAuthority.create(Path("var/tls"))          # ca.pem, ca.key (0600)
    cert, key = ca.issue(Path("var/tls"), "server", ["127.0.0.1", "localhost"])

Keys are ECDSA P-256: small, fast to handshake, accepted by every current client.
Private keys are written with mode 0600 (umask 077 while openssl runs) and are never
printed: openssl's output is captured and only its error text is shown on failure.
"""
from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

OPENSSL = "openssl"
CA_DAYS = 3650
SERVER_DAYS = 825          # the longest lifetime Apple's clients accept for a server cert
RENEW_BEFORE_DAYS = 30     # `ensure_demo` re-issues a server cert this close to expiry
DEMO_NAMES = ["127.0.0.1", "localhost"]   # what `sluice up`'s demo certificate covers
_KEY_ARGS = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


class CertError(RuntimeError):
    """openssl is missing or refused; the message carries its error text, never a key."""


def _openssl(*args: str, cwd: Path | None = None) -> str:
    if shutil.which(OPENSSL) is None:
        raise CertError("`openssl` is not installed (Debian package openssl; "
                        "scripts/setup.sh installs it)")
    old = os.umask(0o077)       # key files are born 0600
    try:
        res = subprocess.run([OPENSSL, *args], capture_output=True, text=True, cwd=cwd)
    finally:
        os.umask(old)
    if res.returncode != 0:
        raise CertError(f"openssl {args[0]} failed: {res.stderr.strip()[-600:]}")
    return res.stdout


def subject_alt_names(names: list[str]) -> str:
    """`IP:127.0.0.1,DNS:localhost` for openssl's subjectAltName."""
    out = []
    for name in names:
        try:
            ipaddress.ip_address(name)
            out.append(f"IP:{name}")
        except ValueError:
            out.append(f"DNS:{name}")
    return ",".join(out)


def valid_for(cert: Path, seconds: int) -> bool:
    """True when `cert` is a readable certificate still valid `seconds` from now."""
    try:
        _openssl("x509", "-in", str(cert), "-noout", "-checkend", str(seconds))
        return True
    except CertError:
        return False


@dataclass(frozen=True)
class CertAuthority:
    cert: Path
    key: Path

    @classmethod
    def create(cls, folder: Path, name: str = "Sluice demo CA") -> "CertAuthority":
        """A new self-signed CA: folder/ca.pem and folder/ca.key (0600)."""
        folder.mkdir(parents=True, exist_ok=True)
        ca = cls(folder / "ca.pem", folder / "ca.key")
        _openssl("req", "-x509", *_KEY_ARGS, "-keyout", str(ca.key), "-out", str(ca.cert),
                 "-days", str(CA_DAYS), "-subj", f"/CN={name}",
                 "-addext", "basicConstraints=critical,CA:TRUE,pathlen:0",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        os.chmod(ca.key, 0o600)
        ca.cert.chmod(0o644)
        return ca

    def issue(self, folder: Path, stem: str, names: list[str],
              days: int = SERVER_DAYS) -> tuple[Path, Path]:
        """A server certificate for `names` (SANs; the first is also the CN), signed by
        this CA: folder/<stem>.pem holds the leaf then the CA (a chain file, as nginx's
        ssl_certificate takes it), folder/<stem>.key (0600) its key. Files are replaced
        atomically, so a server reloading meanwhile reads the old pair or the new one."""
        if not names:
            raise ValueError("a server certificate needs at least one name")
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder, prefix=".issue-") as tmp:
            work = Path(tmp)
            ext = work / "ext.cnf"
            ext.write_text("basicConstraints=critical,CA:FALSE\n"
                           "keyUsage=critical,digitalSignature\n"
                           "extendedKeyUsage=serverAuth\n"
                           f"subjectAltName={subject_alt_names(names)}\n")
            _openssl("req", "-new", *_KEY_ARGS, "-keyout", "leaf.key", "-out", "leaf.csr",
                     "-subj", f"/CN={names[0]}", cwd=work)
            _openssl("x509", "-req", "-in", "leaf.csr", "-CA", str(self.cert.resolve()),
                     "-CAkey", str(self.key.resolve()),
                     "-set_serial", str(int.from_bytes(os.urandom(8), "big")),
                     "-days", str(days), "-sha256", "-extfile", "ext.cnf",
                     "-out", "leaf.pem", cwd=work)
            chain = work / "chain.pem"
            chain.write_text((work / "leaf.pem").read_text() + self.cert.read_text())
            chain.chmod(0o644)
            os.chmod(work / "leaf.key", 0o600)
            cert, key = folder / f"{stem}.pem", folder / f"{stem}.key"
            # key first: a reload between the two renames pairs a new key with the old
            # cert only if it happens in that instant, and nginx -t would refuse it
            os.replace(work / "leaf.key", key)
            os.replace(chain, cert)
        return cert, key

    def signed(self, cert: Path) -> bool:
        """True when `cert` (its first certificate) verifies against this CA."""
        try:
            _openssl("verify", "-CAfile", str(self.cert), str(cert))
            return True
        except CertError:
            return False


def ensure_demo(folder: Path, names: list[str]) -> tuple[CertAuthority, Path, Path]:
    """The demo CA and server certificate under `folder` (var/tls for `sluice up`):
    reused when present, valid and signed by that CA; otherwise made anew (the CA
    only when it is missing or expiring, so callers' trust in it survives)."""
    ca = CertAuthority(folder / "ca.pem", folder / "ca.key")
    if not (ca.key.exists() and valid_for(ca.cert, RENEW_BEFORE_DAYS * 86400)):
        ca = CertAuthority.create(folder)
    cert, key = folder / "server.pem", folder / "server.key"
    if not (key.exists() and valid_for(cert, RENEW_BEFORE_DAYS * 86400) and ca.signed(cert)
            and _covers(cert, names)):
        cert, key = ca.issue(folder, "server", names)
    return ca, cert, key


def _covers(cert: Path, names: list[str]) -> bool:
    try:
        text = _openssl("x509", "-in", str(cert), "-noout", "-ext", "subjectAltName")
    except CertError:
        return False
    have = {part.strip().replace("IP Address:", "IP:")
            for part in text.splitlines()[-1].split(",")}
    return set(subject_alt_names(names).split(",")) <= have
