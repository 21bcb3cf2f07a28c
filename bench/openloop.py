"""Building and running the open-loop load generator (bench/openloop.c).

wrk is closed-loop: each connection sends its next request when the previous answer
arrives, so a slow server slows the load down and the requests it would have delayed
are never sent (coordinated omission); its latency figures are not those of a fixed
offered load. openloop.c sends on a fixed timetable and measures every request from
its due time. It is compiled with the machine's `cc` into the bench's temporary
prefix (scripts/setup.sh installs gcc). Used by bench/gateway.py (--half-load, --rate).
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from bench.wrk import MODEL, BenchError

SOURCE = Path(__file__).resolve().parent / "openloop.c"


def build_openloop(dest: Path) -> Path:
    """Compile openloop.c into `dest`; return the binary's path."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise BenchError("the open-loop generator needs a C compiler (`cc`); "
                         "scripts/setup.sh installs gcc")
    binary = dest / "openloop"
    out = subprocess.run([cc, "-O2", "-Wall", "-o", str(binary), str(SOURCE)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise BenchError(f"compiling {SOURCE.name} failed:\n{out.stderr}")
    return binary


def run_openloop(binary: Path, url: str, key: str | None, rate: float, duration: float,
                 connections: int) -> dict:
    """`rate` req/s for `duration` s over `connections` keep-alive connections.

    Returns openloop.c's JSON: target_rate, rate (achieved), requests, answered,
    non_2xx, unfinished, errors {connect, read, write, parse}, latency_ms {p50, p90,
    p99, p99.9, max, mean}, with `failed` added: requests not answered 2xx.
    """
    args = [str(binary), "-r", f"{rate:.1f}", "-c", str(connections),
            "-d", f"{duration:g}", "-k", key or "", "-m", MODEL, url]
    # 10 s of drain after the timetable (openloop.c), and some slack
    out = subprocess.run(args, capture_output=True, text=True, timeout=duration + 30)
    if out.returncode != 0:
        raise BenchError(f"openloop failed ({out.returncode}): {out.stderr}{out.stdout}")
    try:
        figures = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise BenchError(f"cannot read openloop's output: {out.stdout!r}") from None
    figures["failed"] = figures["requests"] - figures["answered"] + figures["non_2xx"]
    return figures
