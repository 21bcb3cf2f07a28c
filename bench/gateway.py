"""Throughput and latency of the Sluice gateway against plain nginx, on this machine.

Starts, in one temporary prefix:

  upstream  a plain nginx (1 worker) answering POST /v1/chat/completions with a fixed
            small OpenAI-style JSON (`return 200`), on a keep-alive listener;
  baseline  a plain nginx `proxy_pass` to the upstream (keepalive 64, HTTP/1.1);
  lean      the floor of any Lua gateway on this stack (written here, not in the
            product): stock nginx + the Lua module doing only an API-key lookup in a
            shared dict, reading and decoding the JSON body, balancer_by_lua onto the
            same keep-alive upstream, and two shared-dict increments in the log phase;
  contract  lean plus what Sluice's contract (DESIGN.md) makes every proxied request
            pay whatever the code: a header and a body filter on the proxying location
            (a backend's own error answers into the error template) and one access-log
            line, each done for nothing (bench/targets.py): a lower bound, not a gateway;
  sluice    the Sluice gateway (control_plane.runtime.gateway) routing model
            "bench-chat" to the same upstream, after a snapshot push;
  policy    the same gateway, called with a second key whose consumer is on a plan:
            token-bucket rate limit, concurrency limit, daily request quota and
            monthly token quota (reservation + usage read from the answer), all
            set high enough never to refuse;
  sluice-path  the same gateway serving model "bench-v2", named by the path
            (POST /v2/models/bench-v2/infer, KServe v2; bench/v2_infer.lua), whose
            kserve_v2 backend is the same upstream: a same-protocol passthrough, the
            body never decoded (issue 13); --tensor-values sets its size;
  baseline-path  plain nginx proxying that same request, the fair nginx for it;
  policy+redis  (--redis) the policy target on a second gateway in cluster mode,
            its limits counted in a private redis-server;
  baseline-tls, sluice-tls  (--https) the same two over HTTPS: an ssl listener beside
            the plain one in each, the same certificate (a private CA's, ECDSA P-256)
            and the TLS settings of nginx/nginx.conf.tmpl, keep-alive clients;
  baseline-tls-close, sluice-tls-close  (--https) the same, handshake-heavy: wrk sends
            `Connection: close`, so every request is a new connection and a full
            TLS handshake;

then runs wrk (bench/chat.lua: a small chat body with an API key; bench/v2_infer.lua
for the -path targets) against every target in turn, `--rounds` times each, and prints requests/s, p50 and p99 (the
median per target) and each target's ratio to plain nginx and to lean. Any non-2xx answer, from either
target, fails the run (exit 1).

With --half-load, then every plain-HTTP target at half of plain nginx's median req/s
with an open-loop generator (bench/openloop.c: requests on a fixed timetable, latency
from each request's due time, so no coordinated omission), `--rounds` alternating
rounds: p50, p99, p99.9 and each target's p99 minus nginx's (issue 13: within 1 ms).
--rate N: the open-loop rounds at N req/s, without the saturation rounds.

    .venv/bin/python bench/gateway.py [--duration 10] [--connections 32] [--workers 1]
    .venv/bin/python bench/gateway.py --half-load --rounds 2 --duration 6

See bench/README.md for what the figures mean. Never used as a CI gate.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import signal
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a plain script from anywhere
    sys.path.insert(0, str(REPO))

from bench.openloop import build_openloop, run_openloop  # noqa: E402
from bench.wrk import MODEL, BenchError, path_named, path_request, run_wrk  # noqa: E402
from bench.targets import (  # noqa: E402
    LUA_MODULES, PATH_ANSWER, UPSTREAM_ANSWER, baseline_http, baseline_tls_lines, contract_http,
    lean_http, start_gateway, start_nginx, upstream_http)
from control_plane.runtime.procs import free_ports, stop  # noqa: E402

# ---- checks (wrk runs: bench/wrk.py) ------------------------------------------------------------

def bench_request(name: str, url: str, key: str | None, verify: str | bool = True,
                  tensor_values: int = 4):
    """One request of the kind target `name` is measured with."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    if path_named(name):
        path, body = path_request(tensor_values)
        return requests.post(url + path, headers=headers, timeout=5, verify=verify,
                             json=body)
    return requests.post(url + "/v1/chat/completions", headers=headers, timeout=5,
                         verify=verify,
                         json={"model": MODEL,
                               "messages": [{"role": "user", "content": "hi"}]})


def check_answers(name: str, url: str, key: str | None, verify: str | bool = True,
                  tensor_values: int = 4) -> None:
    """One real request before measuring: 200 and the upstream's answer, passed through.
    `verify`: the CA file for https targets."""
    resp = bench_request(name, url, key, verify, tensor_values)
    if resp.status_code != 200:
        raise BenchError(f"{name} answered {resp.status_code} before the run: "
                         f"{resp.headers!r} {resp.text[:500]}")
    if path_named(name):
        if resp.json() != PATH_ANSWER:
            raise BenchError(f"{name} did not pass the upstream answer through: "
                             f"{resp.text[:500]}")
        return
    try:
        content = resp.json()["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise BenchError(f"{name} answered 200 but not chat JSON: {resp.text[:500]}") \
            from None
    if content != UPSTREAM_ANSWER["choices"][0]["message"]["content"]:
        raise BenchError(f"{name} did not pass the upstream answer through: {content!r}")
    if name.startswith("policy") and "X-RateLimit-Limit" not in resp.headers:
        raise BenchError("policy answered without X-RateLimit-Limit: the plan was not applied")


def show_failures(name: str, url: str, key: str | None, n: int = 5,
                  verify: str | bool = True, tensor_values: int = 4) -> None:
    """Print a few answers from a target that answered non-2xx under load."""
    for _ in range(n):
        resp = bench_request(name, url, key, verify, tensor_values)
        print(f"  {name}: {resp.status_code} {resp.text[:300].rstrip()}", file=sys.stderr)


# ---- ratios -----------------------------------------------------------------------

# the JSON summary's key suffix per target (ratio_rps<suffix>, ratio_cpu<suffix>)
SUFFIX = {"sluice": "", "policy": "_policy", "policy+redis": "_redis", "sluice-path": "_path"}


def print_ratios(summary: dict, workers: int) -> None:
    """Every target against plain nginx and against lean (the Lua floor); adds the
    ratios to `summary` (ratio_rps*, ratio_cpu* vs nginx; lean_rps*, lean_cpu* vs lean).
    A path-named target's nginx is baseline-path (nginx proxying the same request);
    lean is chat's (lean needs a model in the body)."""
    print(f"# ratios, {workers} worker(s): req/s and worker CPU per request "
          "(CPU ratio = the throughput bound where workers have the cores to themselves)")
    print(f"{'target':<14} {'vs nginx':>9} {'vs lean':>9} {'cpu us/r':>9} "
          f"{'cpu vs nginx':>13} {'cpu vs lean':>12} {'p50 x nginx':>12} {'p99 x nginx':>12}")
    lean = summary.get("lean")
    for name, s in list(summary.items()):
        if name in ("baseline", "baseline-path") or not isinstance(s, dict):
            continue
        b = summary["baseline-path" if path_named(name) else "baseline"]
        ratio = s["rps"] / b["rps"]
        cpu_ratio = b["cpu_us"] / s["cpu_us"] if s["cpu_us"] else 0.0
        lean_ratio = s["rps"] / lean["rps"] if lean else float("nan")
        lean_cpu = lean["cpu_us"] / s["cpu_us"] if lean and s["cpu_us"] else float("nan")
        print(f"{name:<14} {ratio:>9.1%} {lean_ratio:>9.1%} {s['cpu_us']:>9.1f} "
              f"{cpu_ratio:>13.1%} {lean_cpu:>12.1%} {s['p50_ms'] / b['p50_ms']:>12.2f} "
              f"{s['p99_ms'] / b['p99_ms']:>12.2f}")
        suffix = SUFFIX.get(name, "_" + name.replace("+", "_"))
        summary["ratio_rps" + suffix] = ratio
        summary["ratio_cpu" + suffix] = cpu_ratio
        summary["lean_rps" + suffix] = lean_ratio
        summary["lean_cpu" + suffix] = lean_cpu


def saturation_rounds(args, targets: dict, masters: dict, wrk_headers: dict,
                      threads: int) -> dict[str, list[dict]]:
    """wrk (closed loop, as fast as the target answers) against every target in turn,
    `--rounds` times; the figures of every run, per target."""
    results: dict[str, list[dict]] = {name: [] for name in targets}
    print(f"{'target':<13} {'round':>6} {'req/s':>10} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'cpu us/r':>8} {'non-2xx':>8} {'sock err':>8}")
    for rnd in range(1, args.rounds + 1):
        for name, (url, k) in targets.items():
            r = run_wrk(url, k, args.duration, args.connections, threads,
                        masters[name], headers=wrk_headers.get(name),
                        path_named=path_named(name), tensor_values=args.tensor_values)
            results[name].append(r)
            print(f"{name:<13} {rnd:>6} {r['rps']:>10.0f} {r['p50_ms']:>8.3f} "
                  f"{r['p99_ms']:>8.3f} {r.get('cpu_us', 0):>8.1f} "
                  f"{r['non_2xx']:>8} {r['socket_errors']:>8}", flush=True)
    return results


def summarize(results: dict[str, list[dict]], workers: int) -> dict:
    """The median per target, its ratios to plain nginx and lean, and the HTTPS pairs."""
    summary = {name: {k: statistics.median(r[k] for r in runs)
                      for k in ("rps", "p50_ms", "p99_ms", "cpu_us")}
               for name, runs in results.items()}
    for name, s in summary.items():
        print(f"{name:<13} {'median':>6} {s['rps']:>10.0f} {s['p50_ms']:>8.3f} "
              f"{s['p99_ms']:>8.3f} {s['cpu_us']:>8.1f}")
    print_ratios(summary, workers)
    # HTTPS: Sluice terminating TLS against plain nginx terminating TLS
    for name, base in (("sluice-tls", "baseline-tls"),
                       ("sluice-tls-close", "baseline-tls-close")):
        if name not in summary or base not in summary:
            continue
        b, s = summary[base], summary[name]
        ratio = s["rps"] / b["rps"]
        cpu_ratio = b["cpu_us"] / s["cpu_us"]
        print(f"{name}/{base}: throughput {ratio:.3f} ({ratio:.1%}), "
              f"p50 x{s['p50_ms'] / b['p50_ms']:.2f}, p99 x{s['p99_ms'] / b['p99_ms']:.2f}, "
              f"worker CPU per request {s['cpu_us']:.1f} us against {b['cpu_us']:.1f} us "
              f"(bound {cpu_ratio:.1%})")
        suffix = "_tls" if name == "sluice-tls" else "_tls_close"
        summary["ratio_rps" + suffix] = ratio
        summary["ratio_cpu" + suffix] = cpu_ratio
    return summary


# ---- open loop: latency at a fixed offered load (issue 13) -----------------------

P99_GOAL_MS = 1.0   # issue 13: p99 at half of nginx's saturating load within 1 ms of nginx's


def open_loop_rounds(binary: Path, targets: dict, rate: float, args, why: str) -> dict:
    """Every plain-HTTP target at `rate` req/s, open loop (bench/openloop.c: a fixed
    timetable, latency from each request's due time), `--rounds` alternating rounds
    of `--duration` over `--connections`. Per target the medians of p50, p99, p99.9,
    and of each round's p99 minus plain nginx's p99 in the same round (Δp99)."""
    # the chat request openloop.c sends: not the HTTPS targets, not the path-named ones
    names = [n for n, (url, _) in targets.items()
             if url.startswith("http://") and not path_named(n)]
    if names[0] != "baseline":
        raise BenchError("the open-loop rounds need plain nginx (baseline) first")
    if len(names) < len(targets):
        print("# open loop: plain HTTP only; not "
              + ", ".join(n for n in targets if n not in names))
    print(f"# open loop at {rate:.0f} req/s ({why}), {args.connections} connections, "
          f"{args.rounds} rounds x {args.duration:g}s; latency from each request's due time")
    print(f"{'target':<12} {'round':>6} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'p99.9 ms':>9} {'max ms':>8} {'Δp99 ms':>8} {'failed':>7}")
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for rnd in range(1, args.rounds + 1):
        for name in names:
            url, key = targets[name]
            r = run_openloop(binary, url, key, rate, args.duration, args.connections)
            lat = r["latency_ms"]
            base = r if name == "baseline" else runs["baseline"][-1]   # this round's
            r["d_p99_ms"] = lat["p99"] - base["latency_ms"]["p99"]
            runs[name].append(r)
            print(f"{name:<12} {rnd:>6} {r['rate']:>8.0f} {lat['p50']:>8.3f} "
                  f"{lat['p99']:>8.3f} {lat['p99.9']:>9.3f} {lat['max']:>8.3f} "
                  f"{r['d_p99_ms']:>8.3f} {r['failed']:>7}", flush=True)

    summary = {}
    for name, rs in runs.items():
        s = {"rate": statistics.median(r["rate"] for r in rs),
             **{f"{k.replace('.', '_')}_ms": statistics.median(r["latency_ms"][k] for r in rs)
                for k in ("p50", "p99", "p99.9", "max")},
             "d_p99_ms": statistics.median(r["d_p99_ms"] for r in rs)}
        s["within_goal"] = s["d_p99_ms"] <= P99_GOAL_MS
        summary[name] = s
        print(f"{name:<12} {'median':>6} {s['rate']:>8.0f} {s['p50_ms']:>8.3f} "
              f"{s['p99_ms']:>8.3f} {s['p99_9_ms']:>9.3f} {s['max_ms']:>8.3f} "
              f"{s['d_p99_ms']:>8.3f}")
    print(f"# p99 within {P99_GOAL_MS:g} ms of plain nginx's at {rate:.0f} req/s (issue 13):")
    for name, s in summary.items():
        if name != "baseline":
            print(f"{name:<14} Δp99 {s['d_p99_ms']:+.3f} ms: "
                  + ("yes" if s["within_goal"] else "NO"))
        if s["rate"] < 0.95 * rate:
            print(f"warning: {name} answered {s['rate']:.0f} req/s of {rate:.0f}: "
                  "it (or this machine) did not keep up", file=sys.stderr)
    return {"rate": rate, "why": why, "connections": args.connections,
            "duration_s": args.duration, "goal_ms": P99_GOAL_MS, "summary": summary,
            "runs": runs}

# ---- main -------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10, help="seconds per wrk run")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--workers", type=int, default=1,
                        help="nginx workers for baseline and sluice")
    parser.add_argument("--threads", type=int, default=1, help="wrk threads")
    parser.add_argument("--rounds", type=int, default=2,
                        help="alternating runs per target")
    parser.add_argument("--warmup", type=float, default=2, help="seconds, per target")
    parser.add_argument("--baseline-only", action="store_true",
                        help="measure plain nginx alone (no gateway)")
    parser.add_argument("--max-in-flight", type=int,
                        help="give the backend this capacity: admission control runs on "
                             "every request (set it above --connections: nothing is shed)")
    parser.add_argument("--tensor-values", type=int, default=4,
                        help="numbers in the -path targets' input tensor (4: a ~100-byte "
                             "body like chat's; 8192: ~57 KB)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--redis", action="store_true",
                        help="also the policy target on a gateway in cluster mode (Redis)")
    parser.add_argument("--https", action="store_true",
                        help="also baseline and sluice over HTTPS (same certificate), "
                             "keep-alive and with a new connection per request")
    parser.add_argument("--half-load", action="store_true",
                        help="after the saturation rounds, every target at half of plain "
                             "nginx's median req/s, open loop (bench/openloop.c): p50, p99, "
                             "p99.9 and p99 minus nginx's (issue 13: within 1 ms)")
    parser.add_argument("--rate", type=float,
                        help="the open-loop rounds at this many req/s, instead of the "
                             "saturation rounds")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary prefix (configs, logs)")
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None or shutil.which("nginx") is None:
        print("bench needs `wrk` and `nginx` on PATH", file=sys.stderr)
        return 1
    threads = max(1, min(args.threads, args.connections))
    # SIGTERM (a CI timeout, `kill`) unwinds through the finally below like Ctrl-C.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    top = Path(tempfile.mkdtemp(prefix="sluice-bench-"))
    top.chmod(0o755)  # as root the gateway's workers run as nobody and must reach it
    key = "sk-bench-" + hashlib.sha256(str(time.time_ns()).encode()).hexdigest()[:32]
    policy_key = key + "-plan"
    procs: list = []
    gateway = None
    gateways: list = []
    redis = None
    # --https: wrk's extra headers per target, and the CA that check_answers trusts
    wrk_headers: dict[str, list[str]] = {}
    verify: str | bool = True
    try:
        openloop = build_openloop(top) if args.half_load or args.rate else None
        upstream_port, baseline_port, lean_port, contract_port = free_ports(4)
        baseline_tls, sluice_tls = ("", None)
        if args.https:
            from control_plane.runtime.certs import CertAuthority

            ca = CertAuthority.create(top / "tls", "Sluice bench CA")
            cert, cert_key = ca.issue(top / "tls", "server", ["127.0.0.1", "localhost"])
            verify = str(ca.cert)
            baseline_tls_port, sluice_tls_port = free_ports(2)
            baseline_tls = baseline_tls_lines(baseline_tls_port, cert, cert_key)
            sluice_tls = (sluice_tls_port, cert, cert_key)
        procs.append(start_nginx(top / "upstream", 1, upstream_http(upstream_port),
                                 upstream_port))
        procs.append(start_nginx(top / "baseline", args.workers,
                                 baseline_http(baseline_port, upstream_port, baseline_tls),
                                 baseline_port))
        targets = {"baseline": (f"http://127.0.0.1:{baseline_port}", None)}
        masters = {"baseline": procs[-1].pid}
        targets["baseline-path"] = targets["baseline"]
        masters["baseline-path"] = masters["baseline"]
        if args.https:
            for name in ("baseline-tls", "baseline-tls-close"):
                targets[name] = (f"https://127.0.0.1:{baseline_tls_port}", None)
                masters[name] = masters["baseline"]
            wrk_headers["baseline-tls-close"] = ["Connection: close"]
        if not args.baseline_only:
            procs.append(start_nginx(top / "lean", args.workers,
                                     lean_http(lean_port, upstream_port, key),
                                     lean_port, LUA_MODULES))
            targets["lean"] = (f"http://127.0.0.1:{lean_port}", key)
            masters["lean"] = procs[-1].pid
            procs.append(start_nginx(top / "contract", args.workers,
                                     contract_http(contract_port, upstream_port, key),
                                     contract_port, LUA_MODULES))
            targets["contract"] = (f"http://127.0.0.1:{contract_port}", key)
            masters["contract"] = procs[-1].pid

            gateway = start_gateway(top / "gateway", args.workers, upstream_port, key,
                                    policy_key, max_in_flight=args.max_in_flight,
                                    tls=sluice_tls)
            if args.https:
                for name in ("sluice-tls", "sluice-tls-close"):
                    targets[name] = (gateway.tls_url, key)
                    masters[name] = gateway.proc.pid
                wrk_headers["sluice-tls-close"] = ["Connection: close"]
            targets["sluice"] = (gateway.url.rstrip("/"), key)
            targets["sluice-path"] = (gateway.url.rstrip("/"), key)
            targets["policy"] = (gateway.url.rstrip("/"), policy_key)
            if args.redis:
                from control_plane.runtime.redis_server import RedisServer

                redis = RedisServer.start(top / "redis")
                gateways.append(start_gateway(top / "gateway-redis", args.workers,
                                              upstream_port, key, policy_key, redis.url))
                targets["policy+redis"] = (gateways[-1].url.rstrip("/"), policy_key)
                masters["policy+redis"] = gateways[-1].proc.pid
            masters["sluice"] = masters["policy"] = gateway.proc.pid
            masters["sluice-path"] = gateway.proc.pid
        for name, (url, k) in targets.items():
            check_answers(name, url, k, verify, args.tensor_values)
        if redis is not None and not redis.command("KEYS", "sluice:qd:*"):
            raise BenchError("policy+redis did not count in Redis (see its error.log)")

        print(f"# {len(targets)} targets, {args.rounds} rounds x {args.duration:g}s, "
              f"{args.connections} connections, wrk -t{threads}, "
              f"nginx workers {args.workers}, upstream 1 worker", flush=True)
        if args.warmup > 0:
            for name, (url, k) in targets.items():
                run_wrk(url, k, args.warmup, args.connections, threads,
                        headers=wrk_headers.get(name), path_named=path_named(name),
                        tensor_values=args.tensor_values)

        results: dict[str, list[dict]] = {}
        summary: dict = {}
        if args.rate is None:
            results = saturation_rounds(args, targets, masters, wrk_headers, threads)
            summary = summarize(results, args.workers)
        open_loop = None
        if openloop is not None:
            rate = args.rate or summary["baseline"]["rps"] / 2
            open_loop = open_loop_rounds(openloop, targets, rate, args,
                                         "given" if args.rate else "half of nginx's req/s")
        if args.json:
            args.json.write_text(json.dumps({
                "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "args": {k: str(v) if isinstance(v, Path) else v
                         for k, v in vars(args).items()},
                "summary": summary,
                "runs": {n: [{k: v for k, v in r.items() if k != "raw"} for r in runs]
                         for n, runs in results.items()},
                "open_loop": open_loop,
            }, indent=2))

        failed = False
        for name, runs in results.items():
            bad = sum(r["non_2xx"] for r in runs)
            sock = sum(r["socket_errors"] for r in runs)
            if sock:
                print(f"warning: {name} had {sock} socket errors", file=sys.stderr)
            if bad:
                failed = True
                print(f"FAIL: {name} answered {bad} non-2xx responses; a few now:",
                      file=sys.stderr)
                url, k = targets[name]
                show_failures(name, url, k, verify=verify, tensor_values=args.tensor_values)
        for name, runs in (open_loop or {}).get("runs", {}).items():
            bad = sum(r["failed"] for r in runs)
            if bad:
                failed = True
                print(f"FAIL: {name} left {bad} requests of the open-loop rounds without a "
                      f"2xx answer: {[(r['non_2xx'], r['unfinished'], r['errors']) for r in runs]}",
                      file=sys.stderr)
        return 1 if failed else 0
    except BenchError as exc:
        print(f"FAIL: {exc}", file=sys.stderr)
        return 1
    finally:
        for gw in [gateway, *gateways]:
            try:
                if gw is not None:
                    gw.stop()
            except Exception as exc:  # keep stopping the rest
                print(f"warning: stopping a gateway failed: {exc}", file=sys.stderr)
        if redis is not None:
            redis.stop()
        for proc in reversed(procs):
            stop(proc)
        if args.keep:
            print(f"# kept {top}", file=sys.stderr)
        else:
            shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
