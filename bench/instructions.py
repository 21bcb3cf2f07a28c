"""Instructions per request of the nginx targets of bench/gateway.py, counted by valgrind.

On a shared machine req/s and even CPU time per request swing by tens of per cent
between runs of the same code; the instructions a worker executes per request hardly
move (±3 % here: timers, garbage collection and JIT compilation land in different
windows). Each target runs as one nginx process (`master_process off`) under
`valgrind --tool=callgrind`; after `--warm` requests (the JIT compiles its traces),
the counters are zeroed, `--n` requests are sent one after another on one keep-alive
connection, and the count is dumped: instructions (Ir) per request, in user space.
The kernel's share (the same socket calls for every target: strace shows the same
writev/recvfrom per request) is not counted, so the ratios here are larger than the
CPU-time ratios of bench/gateway.py.

    .venv/bin/python bench/instructions.py [--n 1000] [--warm 1500]
    .venv/bin/python bench/instructions.py --targets sluice --annotate 25
    .venv/bin/python bench/instructions.py --phases          # each phase's share

Targets: baseline (plain nginx proxy_pass), baseline-path and sluice-path (the model
named by the path: bench/v2_infer.lua's request), lean (the Lua floor), contract (lean
plus the filters and the log line Sluice's contract requires, done for nothing:
bench/targets.py), sluice, policy (bench/gateway.py describes them). `--annotate N`
prints each target's N costliest functions (callgrind_annotate), exclusive of their
callees; `--keep` keeps the callgrind files for callgrind_annotate's other views.
Needs valgrind (scripts/setup.sh installs it). Prints figures and ratios; never a CI gate.

Debian's LuaJIT is stripped, so its share shows as bare addresses. `--luajit DIR`
runs the targets with DIR first in LD_LIBRARY_PATH: a libluajit-5.1.so.2 with
symbols, built from the same release (OpenResty's luajit2 v2.1-20230119, `make
CCDEBUG=-g`; bench/README.md), names them (lj_str_new, lj_tab_resize, the GC, ...).
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a plain script from anywhere
    sys.path.insert(0, str(REPO))

from bench import targets as bench_targets  # noqa: E402
from bench.wrk import MODEL, BenchError, path_named, path_request  # noqa: E402
from control_plane.runtime import gateway as gateway_module  # noqa: E402
from control_plane.runtime.procs import free_ports, spawn, stop, wait_port  # noqa: E402

CALLGRIND = ["valgrind", "--tool=callgrind", "--smc-check=all-non-file"]
BODY = json.dumps({"model": MODEL, "max_tokens": 16,
                   "messages": [{"role": "user", "content": "Say hello to the benchmark."}]},
                  separators=(",", ":"))
# the -path targets: bench/v2_infer.lua's request (the model in the path, 4 values)
PATH, PATH_DOC = path_request()
PATH_BODY = json.dumps(PATH_DOC, separators=(",", ":"))
TARGETS = ("baseline", "lean", "contract", "sluice", "policy", "baseline-path",
           "sluice-path")


def drive(port: int, key: str | None, n: int, path_named: bool = False) -> None:
    """`n` requests (chat, or the -path targets' request), one after another, on one
    keep-alive connection; each 200."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    path, body = (PATH, PATH_BODY) if path_named else ("/v1/chat/completions", BODY)
    try:
        for _ in range(n):
            conn.request("POST", path, body, headers)
            resp = conn.getresponse()
            answer = resp.read()
            if resp.status != 200:
                raise BenchError(f"answered {resp.status}: {answer[:300]!r}")
    finally:
        conn.close()


def count(pid: int, out_dir: Path, port: int, key: str | None, args,
          path_named: bool = False) -> tuple[float, Path]:
    """Instructions per request of process `pid`, and the callgrind file of the window."""
    drive(port, key, args.warm, path_named)
    subprocess.run(["callgrind_control", "--zero", str(pid)], check=True, capture_output=True)
    drive(port, key, args.n, path_named)
    before = set(out_dir.glob(f"callgrind.out.{pid}*"))
    subprocess.run(["callgrind_control", "--dump", str(pid)], check=True, capture_output=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        new = set(out_dir.glob(f"callgrind.out.{pid}*")) - before
        if new:
            dump = max(new, key=lambda p: p.stat().st_mtime)
            text = dump.read_text(errors="replace")
            total = re.search(r"^(?:summary|totals):\s+(\d+)", text, re.M)
            if total:
                return int(total.group(1)) / args.n, dump
        time.sleep(0.2)
    raise BenchError(f"callgrind wrote no dump for pid {pid}")


def start_plain(prefix: Path, port: int, http_body: str, main: str = ""):
    """One nginx process (no master) under callgrind."""
    for sub in ("logs", "tmp", "conf"):
        (prefix / sub).mkdir(parents=True, exist_ok=True)
    conf = prefix / "conf" / "nginx.conf"
    conf.write_text(bench_targets.nginx_conf(1, http_body, main))
    proc = spawn([*CALLGRIND, f"--callgrind-out-file={prefix}/callgrind.out.%p",
                  f"--log-file={prefix}/logs/valgrind.%p.log", "nginx",
                  "-p", str(prefix), "-c", str(conf), "-g", "daemon off; master_process off;"],
                 log=prefix / "logs" / "stdout.log")
    wait_port(port, timeout=90)
    return proc


def under_callgrind() -> None:
    """Make control_plane.s GatewayProcess start its nginx as one process under callgrind."""
    plain = gateway_module.GatewayProcess._nginx

    def _nginx(self, *args):
        if args == ("-g", "daemon off;"):
            return [*CALLGRIND, f"--callgrind-out-file={self.prefix}/callgrind.out.%p",
                    f"--log-file={self.prefix}/logs/valgrind.%p.log",
                    *plain(self, "-g", "daemon off; master_process off;")]
        return plain(self, *args)

    gateway_module.GatewayProcess._nginx = _nginx
    gateway_module.GatewayProcess._wait_serving.__defaults__ = (120.0,)   # valgrind starts slowly


def annotate(dump: Path, top: int) -> str:
    res = subprocess.run(["callgrind_annotate", "--threshold=100", "--inclusive=no", dump],
                         capture_output=True, text=True)
    # the process's entry frames (main, libc's start) carry the total, not a cost
    entry = re.compile(r"PROGRAM TOTALS|libc-start|below main|:main |ld-linux")
    rows = [line for line in res.stdout.splitlines()
            if re.match(r"\s*[\d,]+ \(", line) and not entry.search(line)]
    return "\n".join(rows[:top])


# Where a request's instructions go, by the Lua module's phase handlers (inclusive:
# each with what it calls, nginx's and LuaJIT's code alike); the rest is nginx itself
# (parsing, proxying, writing, the access log) and the timers (metric flushes).
PHASES = (("access", "ngx_http_lua_access_handler_inline"),
          ("balancer", "ngx_http_lua_balancer_handler_inline"),
          ("header filter", "ngx_http_lua_header_filter_inline"),
          ("body filter", "ngx_http_lua_body_filter_inline"),
          ("log", "ngx_http_lua_log_handler_inline"),
          ("timers", "ngx_event_expire_timers"))


def phases(dump: Path, n: int) -> dict[str, float]:
    """Ir per request of each of PHASES, and "nginx, the rest" (the total less them)."""
    res = subprocess.run(["callgrind_annotate", "--auto=no", "--inclusive=yes",
                          "--threshold=100", dump], capture_output=True, text=True)
    inclusive: dict[str, int] = {}
    total = 0
    for line in res.stdout.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(\S+)", line)
        if not m:
            continue
        ir, name = int(m.group(1).replace(",", "")), m.group(2)
        if name == "PROGRAM":
            total = ir
        else:
            inclusive[name.split(":")[-1]] = ir
    out = {phase: inclusive.get(fn, 0) / n for phase, fn in PHASES}
    out["nginx, the rest"] = total / n - sum(out.values())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="requests counted per target")
    parser.add_argument("--warm", type=int, default=1500, help="requests before counting")
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--annotate", type=int, default=0, metavar="N",
                        help="print each target's N costliest functions")
    parser.add_argument("--phases", action="store_true",
                        help="also print each target's instructions by phase")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--keep", action="store_true",
                        help="keep the callgrind dumps (their folder is printed)")
    parser.add_argument("--luajit", type=Path, metavar="DIR",
                        help="a folder with a libluajit-5.1.so.2 built with symbols")
    args = parser.parse_args(argv)
    if args.luajit:
        lib = args.luajit.resolve()
        if not (lib / "libluajit-5.1.so.2").exists():
            parser.error(f"{lib} has no libluajit-5.1.so.2")
        # inherited by every nginx started below (spawn keeps the environment)
        os.environ["LD_LIBRARY_PATH"] = f"{lib}:{os.environ.get('LD_LIBRARY_PATH', '')}"
    targets = [t for t in args.targets.split(",") if t]
    unknown = set(targets) - set(TARGETS)
    if unknown or not targets:
        parser.error(f"unknown targets {sorted(unknown)}; known: {', '.join(TARGETS)}")
    for tool in ("valgrind", "callgrind_control", "nginx"):
        if shutil.which(tool) is None:
            print(f"bench needs `{tool}` on PATH (scripts/setup.sh installs valgrind)",
                  file=sys.stderr)
            return 1

    top = Path(tempfile.mkdtemp(prefix="sluice-instructions-"))
    top.chmod(0o755)
    key = "sk-bench-" + "a" * 32
    procs: list = []
    gateway = None
    figures: dict[str, float] = {}
    dumps: dict[str, Path] = {}
    try:
        (upstream,) = free_ports(1)
        procs.append(bench_targets.start_nginx(top / "upstream", 1,
                                               bench_targets.upstream_http(upstream), upstream))
        plain_targets = {"baseline": bench_targets.baseline_http,
                         "baseline-path": bench_targets.baseline_http,
                         "lean": bench_targets.lean_http,
                         "contract": bench_targets.contract_http}
        for name, make in plain_targets.items():
            if name not in targets:
                continue
            (port,) = free_ports(1)
            plain = name.startswith("baseline")
            body = make(port, upstream) if plain else make(port, upstream, key)
            main_ctx = "" if plain else bench_targets.LUA_MODULES
            procs.append(start_plain(top / name, port, body, main_ctx))
            figures[name], dumps[name] = count(procs[-1].pid, top / name, port,
                                               None if plain else key, args,
                                               path_named(name))
        if {"sluice", "policy", "sluice-path"} & set(targets):
            under_callgrind()
            gateway = bench_targets.start_gateway(top / "gateway", 1, upstream, key,
                                                  key + "-plan")
            for name, k in (("sluice", key), ("policy", key + "-plan"), ("sluice-path", key)):
                if name in targets:
                    figures[name], dumps[name] = count(gateway.proc.pid, top / "gateway",
                                                       gateway.cfg.port, k, args,
                                                       path_named(name))
    except BenchError as exc:
        print(f"FAIL: {exc}", file=sys.stderr)
        return 1
    finally:
        if gateway is not None:
            gateway.stop()
        for proc in reversed(procs):
            stop(proc)

    print(f"# instructions per request (valgrind callgrind, user space), "
          f"{args.n} requests after {args.warm}, 1 nginx process per target")
    print(f"{'target':<14} {'Ir/request':>11} {'x baseline':>11} {'x lean':>8}")
    for name in targets:
        ir = figures[name]
        # a -path target against the baseline of the same request
        base = "baseline-path" if path_named(name) else "baseline"
        vs = [f"{ir / figures[b]:.2f}" if b in figures else "" for b in (base, "lean")]
        print(f"{name:<14} {ir:>11.0f} {vs[0]:>11} {vs[1]:>8}")
    by_phase = {name: phases(dumps[name], args.n) for name in targets} if args.phases else {}
    if by_phase:
        names = [phase for phase, _ in PHASES] + ["nginx, the rest"]
        print(f"\n# by phase (Ir per request, inclusive of what each calls)")
        print(f"{'phase':<16}" + "".join(f"{t:>14}" for t in targets))
        for phase in names:
            print(f"{phase:<16}" + "".join(f"{by_phase[t][phase]:>14.0f}" for t in targets))
    if args.annotate:
        for name in targets:
            print(f"\n# {name}: costliest functions (Ir over {args.n} requests)")
            print(annotate(dumps[name], args.annotate))
    if args.json:
        args.json.write_text(json.dumps({"n": args.n, "warm": args.warm,
                                         "ir_per_request": figures,
                                         **({"by_phase": by_phase} if by_phase else {})},
                                        indent=2))
    if args.keep:
        print("\n# callgrind dumps: " + ", ".join(str(p) for p in dumps.values()))
    else:
        shutil.rmtree(top, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
