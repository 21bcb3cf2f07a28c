"""The data plane's Lua unit tests that need nginx (ngx.*, lua-resty-core, shared
dicts, cosockets) pass inside a real one; and a private FFI symbol that is gone
stops nginx at start, naming it.

One nginx (tests/lua/nginx/nginx.conf.tmpl: one process, the repository's lua/ on
its path) serves the whole module from a temporary prefix; each tests/lua/nginx/
test_*.lua runs in GET /run?file=<name> (tests/lua/nginx/runner.lua).
"""
from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LUA_TESTS = REPO / "tests" / "lua" / "nginx"
TEMPLATE = LUA_TESTS / "nginx.conf.tmpl"
NGINX = "/usr/sbin/nginx"
FILES = sorted(p.stem for p in LUA_TESTS.glob("test_*.lua"))


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _render(prefix: Path, ports: dict[str, int], extra_symbols: list[str] | None = None) -> None:
    for sub in ("conf", "logs", "tmp"):
        (prefix / sub).mkdir(parents=True, exist_ok=True)
    lua_ports = ", ".join(f"{k} = {v}" for k, v in ports.items())
    extra = ", ".join(f'"{s}"' for s in extra_symbols or [])
    text = TEMPLATE.read_text()
    for name, value in {"repo": str(REPO), "port": str(ports["main"]),
                        "port_a": str(ports["a"]), "port_b": str(ports["b"]),
                        "port_c": str(ports["c"]),
                        "init_opts": f"{{ ports = {{ {lua_ports} }}, "
                                     f"extra_symbols = {{ {extra} }} }}"}.items():
        text = text.replace("{{" + name + "}}", value)
    assert "{{" not in text, text
    (prefix / "conf" / "nginx.conf").write_text(text)


def _nginx(prefix: Path) -> list[str]:
    return [NGINX, "-p", f"{prefix}/", "-c", "conf/nginx.conf"]


@pytest.fixture(scope="module")
def nginx_url():
    assert Path(NGINX).exists(), "nginx missing: scripts/setup.sh installs Debian's nginx"
    prefix = Path(tempfile.mkdtemp(prefix="sluice-lua-units-"))
    main, a, b, c, dead = _free_ports(5)
    _render(prefix, {"main": main, "a": a, "b": b, "c": c, "dead": dead})
    proc = subprocess.Popen(_nginx(prefix), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{main}"
    try:
        deadline = time.monotonic() + 15
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"nginx exited with {proc.returncode}: "
                                   f"{proc.stdout.read().decode()}"
                                   f"{(prefix / 'logs' / 'error.log').read_text()}")
            try:
                socket.create_connection(("127.0.0.1", main), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield url, prefix
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(prefix, ignore_errors=True)


def test_every_lua_file_is_found():
    assert {"test_ffi", "test_headers", "test_context", "test_metrics", "test_queue",
            "test_balancer", "test_adapters", "test_adapters_stream"} <= set(FILES), FILES


@pytest.mark.parametrize("name", FILES)
def test_lua_file_passes_in_nginx(nginx_url, name):
    url, prefix = nginx_url
    try:
        with urllib.request.urlopen(f"{url}/run?file={name}", timeout=60) as res:
            out = res.read().decode(errors="replace")   # a failure may quote cut UTF-8
    except urllib.error.HTTPError as e:  # the file did not load: its error, and the log's
        out = e.read().decode() + (prefix / "logs" / "error.log").read_text()[-4000:]
        pytest.fail(out)
    last = out.strip().splitlines()[-1]
    assert last.endswith(" failed") and " passed, 0 failed" in last, \
        out + (prefix / "logs" / "error.log").read_text()[-4000:]
    assert not last.startswith("0 passed"), out


def test_a_missing_private_ffi_symbol_stops_nginx_at_start(tmp_path):
    """What phases.init does (sluice.ffi.init), with one more symbol to check that no
    lua-nginx-module exports: nginx refuses to start and names it."""
    main, a, b, c = _free_ports(4)
    _render(tmp_path, {"main": main, "a": a, "b": b, "c": c},
            extra_symbols=["ngx_http_lua_ffi_sluice_no_such_call"])
    res = subprocess.run(_nginx(tmp_path), capture_output=True, text=True, timeout=30)
    out = res.stdout + res.stderr + (tmp_path / "logs" / "error.log").read_text()
    assert res.returncode != 0, out
    assert "init_by_lua" in out, out
    assert "missing private FFI" in out and "ngx_http_lua_ffi_sluice_no_such_call" in out, out
