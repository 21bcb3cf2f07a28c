"""Running wrk (bench/chat.lua) against a target and reading its figures.

`run_wrk` returns requests/s, p50 and p99 from chat.lua's BENCH_JSON line (wrk's text
output as a fallback), the non-2xx and socket error counts, and, given an nginx
master's pid, the CPU its workers spent per request (from /proc). Used by
bench/gateway.py and bench/cpu_per_request.py.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

WRK_SCRIPT = Path(__file__).resolve().parent / "chat.lua"
MODEL = "bench-chat"   # the model the benches' snapshots serve and chat.lua asks for
# a path-named request (KServe v2 infer), the model in the URL: bench/gateway.py's
# sluice-path and baseline-path targets
PATH_SCRIPT = Path(__file__).resolve().parent / "v2_infer.lua"
PATH_MODEL = "bench-v2"


def path_named(name: str) -> bool:
    """Does target `name` send v2_infer.lua's request (model in the path)?"""
    return name.endswith("-path")


def path_request(tensor_values: int = 4) -> tuple[str, dict]:
    """v2_infer.lua's request as a path and a JSON body: an input tensor of
    `tensor_values` numbers (bench/gateway.py's checks, bench/instructions.py)."""
    body = {"id": "bench", "inputs": [{
        "name": "x", "shape": [1, tensor_values], "datatype": "FP32",
        "data": [round(i / tensor_values, 4) for i in range(1, tensor_values + 1)]}]}
    return f"/v2/models/{PATH_MODEL}/infer", body


class BenchError(RuntimeError):
    """The run cannot produce trustworthy figures."""


_UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def _seconds(value: str, unit: str) -> float:
    return float(value) * _UNIT_S[unit]


def parse_wrk(output: str) -> dict:
    """Figures from a wrk run: the BENCH_JSON line of chat.lua's done(), else the text.

    Returns rps, p50_ms, p99_ms, requests, non_2xx, socket_errors.
    """
    for line in output.splitlines():
        if line.startswith("BENCH_JSON "):
            data = json.loads(line[len("BENCH_JSON "):])
            errors = data["errors"]
            return {
                "requests": data["requests"],
                "rps": data["requests"] / (data["duration_us"] / 1e6),
                "p50_ms": data["latency_us"]["p50"] / 1000,
                "p99_ms": data["latency_us"]["p99"] / 1000,
                "non_2xx": errors["status"],
                "socket_errors": sum(errors[k] for k in ("connect", "read", "write",
                                                         "timeout")),
            }
    # Text fallback (wrk's human output), in case the script's done() did not run.
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", output, re.M)
    total = re.search(r"^\s*(\d+) requests in", output, re.M)
    pct = {p: re.search(rf"^\s+{p}%\s+([\d.]+)(us|ms|s|m)\s*$", output, re.M)
           for p in ("50", "99")}
    if not (rps and total and all(pct.values())):
        raise BenchError(f"cannot read wrk's output:\n{output}")
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), "
                     r"timeout (\d+)", output)
    return {
        "requests": int(total.group(1)),
        "rps": float(rps.group(1)),
        "p50_ms": _seconds(*pct["50"].groups()) * 1000,
        "p99_ms": _seconds(*pct["99"].groups()) * 1000,
        "non_2xx": int(non_2xx.group(1)) if non_2xx else 0,
        "socket_errors": sum(map(int, sock.groups())) if sock else 0,
    }


def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(entry.name))
    return kids


def worker_cpu_seconds(master_pid: int) -> float:
    """User + system CPU of an nginx master's workers so far (from /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in _children(master_pid):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])   # utime, stime (fields 14, 15)
    return total / tick


def run_wrk(url: str, key: str | None, duration: float, connections: int,
            threads: int, master_pid: int | None = None,
            headers: list[str] | None = None, path_named: bool = False,
            tensor_values: int = 4) -> dict:
    """`headers` ("Name: value") go on every request: "Connection: close" makes wrk
    open a new connection (and, over https, do a full TLS handshake) per request.
    `path_named`: v2_infer.lua's request (model in the path, an input tensor of
    `tensor_values` numbers) instead of chat.lua's."""
    extra = [arg for h in headers or [] for arg in ("-H", h)]
    script, model = (PATH_SCRIPT, PATH_MODEL) if path_named else (WRK_SCRIPT, MODEL)
    args = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{max(1, round(duration))}s", "--latency",
            *extra, "-s", str(script), url, "--", key or "", model, str(tensor_values)]
    cpu0 = worker_cpu_seconds(master_pid) if master_pid else None
    out = subprocess.run(args, capture_output=True, text=True, timeout=duration + 60)
    if out.returncode != 0:
        raise BenchError(f"wrk failed ({out.returncode}): {out.stderr}{out.stdout}")
    figures = parse_wrk(out.stdout)
    if cpu0 is not None and figures["requests"]:
        # CPU the nginx workers spent per request: unlike req/s, it barely moves when
        # other processes take the cores, so it is the steadier figure to compare.
        figures["cpu_us"] = ((worker_cpu_seconds(master_pid) - cpu0)
                             / figures["requests"] * 1e6)
    figures["raw"] = out.stdout
    return figures
