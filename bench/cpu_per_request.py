"""CPU time the gateway's one nginx worker spends per request, under wrk: an A/B
measure of the Lua hot path between two checkouts that is less sensitive to the
machine's other load than requests/s (that load slows the clock, it does not add
CPU time to our worker; cache contention still does, a little).

Starts the upstream and the gateway of bench/gateway.py from the checkout TREE (its
own lua/ and nginx template), warms up, runs wrk, and divides the worker's utime +
stime (/proc) by the requests served. Targets as in gateway.py: `sluice` (consumer
without a plan), `policy` (consumer on a plan with every limit).

    .venv/bin/python bench/cpu_per_request.py TREE [--target sluice] [--duration 6]

e.g. an A/B against the main branch, alternating:

    git worktree add /tmp/main-tree main   # or: git archive main | tar -x -C /tmp/main-tree
    for i in 1 2 3 4; do for t in /tmp/main-tree .; do
        .venv/bin/python bench/cpu_per_request.py $t; done; done
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", type=Path, help="checkout whose gateway is measured")
    parser.add_argument("--target", choices=("sluice", "policy"), default="sluice")
    parser.add_argument("--duration", type=float, default=6)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    tree = args.tree.resolve()
    sys.path[:0] = [str(tree), str(tree / "bench")]
    import gateway as bench   # that tree's bench/gateway.py
    from control_plane.runtime.procs import free_ports, stop

    top = Path(tempfile.mkdtemp(prefix="sluice-cpu-"))
    top.chmod(0o755)
    up_port, = free_ports(1)
    upstream = bench.start_nginx(top / "upstream", 1, bench.upstream_http(up_port), up_port)
    key, policy_key = "sk-bench-0123456789abcdef", "sk-bench-policy-0123456789ab"
    gw = None
    try:
        gw = bench.start_gateway(top / "gateway", 1, up_port, key, policy_key)
        k = key if args.target == "sluice" else policy_key
        bench.check_answers(args.target, gw.url, k)
        bench.run_wrk(gw.url, k, 2, args.connections, 1)   # warm-up
        [pid] = list(gw._worker_pids())
        before = cpu_seconds(pid)
        fig = bench.run_wrk(gw.url, k, args.duration, args.connections, 1)
        used = cpu_seconds(pid) - before
        if fig["non_2xx"] or fig["socket_errors"]:
            print(f"non-2xx or socket errors: {fig}", file=sys.stderr)
            return 1
        print(f"{tree} {args.target}: {fig['requests']} requests, {fig['rps']:.0f} req/s, "
              f"{used / fig['requests'] * 1e6:.1f} us CPU per request")
        return 0
    finally:
        if gw is not None:
            gw.stop()
        stop(upstream)
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
