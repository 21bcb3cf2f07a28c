"""Rows per second of the log shipper: synthetic access-log lines (the gateway's
format) COPYed into inference_logs with their checkpoints, on a private PostgreSQL.

    .venv/bin/python bench/shipper.py [--rows 200000] [--batch-mb 8]

Prints lines written, rows shipped, seconds and rows/s. Never used as a CI gate.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from control_plane.controller.ship_loop import Shipper  # noqa: E402
from control_plane.db import make_engine  # noqa: E402
from control_plane.runtime import migrate  # noqa: E402
from control_plane.runtime import postgres  # noqa: E402
from control_plane.settings import Source  # noqa: E402


def write_log(path: Path, rows: int) -> None:
    now = time.time()
    with open(path, "w") as f:
        for i in range(rows):
            f.write(json.dumps({
                "time": f"{now - rows + i:.3f}", "request_id": f"{i:032x}",
                "consumer": f"team-{i % 50}", "plan": "gold", "model": f"model-{i % 8}",
                "backend": f"backend-{i % 16}", "method": "POST",
                "path": "/v1/chat/completions", "status": "200" if i % 20 else "502",
                "latency_ms": str(i % 2000), "upstream_ms": str(i % 1900),
                "prompt_tokens": "12", "completion_tokens": "48", "cache": "",
                "error_type": "" if i % 20 else "backend_error", "bytes_sent": "712"},
                separators=(",", ":")) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--batch-mb", type=float, default=8)
    args = ap.parse_args()
    top = Path(tempfile.mkdtemp(prefix="sluice-bench-ship-"))
    top.chmod(0o755)
    cluster = postgres.Cluster(top / "pg")
    try:
        cluster.init()
        cluster.start()
        url = postgres.create_database(cluster.url(), "bench")
        migrate.upgrade(url)
        log = top / "access.log"
        write_log(log, args.rows)
        engine = make_engine(url)
        shipper = Shipper(engine, (Source("bench", log),),
                          max_batch_bytes=int(args.batch_mb * (1 << 20)))
        t0 = time.perf_counter()
        while shipper.ship_once():
            pass
        seconds = time.perf_counter() - t0
        engine.dispose()
        print(json.dumps({"lines": args.rows, "rows_shipped": shipper.shipped,
                          "bytes": log.stat().st_size, "seconds": round(seconds, 2),
                          "rows_per_second": round(shipper.shipped / seconds)}))
        return 0 if shipper.shipped == args.rows else 1
    finally:
        cluster.stop()
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
