"""The gateway's TLS locations for https:// backends, rendered from its snapshot.

nginx 1.22 fixes certificate verification per location (proxy_ssl_verify,
proxy_ssl_trusted_certificate is a file read at load time), so each trust set that
the snapshot's backends need gets a named location (lua/sluice/upstream_tls.lua):

    conf/backend_tls.conf     included by the public server: the locations
    conf/backend_tls.trust    their trust ids, one a line, read by the Lua init
    conf/tls/ca-<hex>.pem     each distinct CA, as the snapshot carries it

Each trust set has two locations with the same TLS lines: the named one, reached by
ngx.exec from the access phase (an answer proxied as it comes), and an internal
regular one, /_sluice/buffered_tls/<name>, for the subrequest of an answer converted
whole (lua/sluice/relay.lua): ngx.location.capture cannot reach a named location.

"system" and "noverify" always exist (location / proxies to plain backends only); a CA new to the gateway
needs a graceful reload (GatewayProcess.sync_trust), which happens only when the set of
CAs changes. Until then its backends are left out of their pools.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

CONF = "backend_tls.conf"
INDEX = "backend_tls.trust"
CA_DIR = "tls"
ALWAYS = ("system", "noverify")

_LOCATION = """\
location @sluice_tls_{name} {{
    recursive_error_pages on;
    rewrite_by_lua_block {{ package.loaded["sluice.phases"].tls_resume() }}
    body_filter_by_lua_block {{ package.loaded["sluice.phases"].body_filter() }}
{verify}{client}
    proxy_pass $sluice_upstream_base$sluice_upstream_uri$is_args$args;
}}
location = /_sluice/buffered_tls/{name} {{
    internal;
    recursive_error_pages on;
    client_max_body_size 0;   # the caller's location limited the body (uploads)
    rewrite_by_lua_block {{ package.loaded["sluice.phases"].buffered() }}
    body_filter_by_lua_block {{ package.loaded["sluice.phases"].body_filter() }}
{verify}{client}
    proxy_pass $sluice_upstream_base$sluice_upstream_uri$is_args$args;
}}
"""
# nginx 1.22 refuses an empty "data:" certificate, so a client pair is a location of
# its own ("<trust>_mtls"), the PEM from the request's variables
_CLIENT = """
    proxy_ssl_certificate data:$sluice_tls_cert;
    proxy_ssl_certificate_key data:$sluice_tls_key;"""


def needed(snapshot: dict[str, Any] | None) -> dict[str, str]:
    """{trust id: CA PEM} of the custom CAs the snapshot's https backends use."""
    out: dict[str, str] = {}
    for model in (snapshot or {}).get("models", {}).values():
        for b in model.get("backends", []):
            tls = b.get("tls") if b.get("scheme") == "https" else None
            if isinstance(tls, dict) and str(tls.get("trust", "")).startswith("ca-") \
                    and tls.get("ca"):
                out[tls["trust"]] = tls["ca"]
    return out


def read_lkg(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def rendered(conf_dir: Path) -> set[str]:
    """The CA trust ids the written config has locations for."""
    try:
        lines = (conf_dir / INDEX).read_text().split()
    except OSError:
        return set()
    return {t for t in lines if t not in ALWAYS}


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def write(conf_dir: Path, cas: dict[str, str]) -> None:
    """Write the locations, their index and CA files for `cas` ({id: PEM})."""
    ca_dir = conf_dir / CA_DIR
    ca_dir.mkdir(exist_ok=True)
    verify = {"system": "    proxy_ssl_verify on;", "noverify": "    proxy_ssl_verify off;"}
    for trust in sorted(cas):
        _write(ca_dir / f"{trust}.pem", cas[trust])
        verify[trust] = (f"    proxy_ssl_verify on;\n"
                         f"    proxy_ssl_trusted_certificate {CA_DIR}/{trust}.pem;")
    blocks = []
    for trust, lines in verify.items():
        blocks.append(_LOCATION.format(name=trust, verify=lines, client=""))
        blocks.append(_LOCATION.format(name=trust + "_mtls", verify=lines, client=_CLIENT))
    for old in ca_dir.glob("ca-*.pem"):
        if old.stem not in cas:
            old.unlink()
    _write(conf_dir / CONF, "# Rendered by control_plane/runtime/backend_trust.py.\n"
           + "\n".join(blocks))
    _write(conf_dir / INDEX, "".join(f"{t}\n" for t in (*ALWAYS, *sorted(cas))))
