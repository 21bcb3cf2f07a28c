"""Large uploads through Sluice beside plain nginx (issue 25): multipart audio
transcriptions of 1 MiB and 50 MiB (and one of 100 MiB), throughput and the worker's
memory.

Starts one upstream (plain nginx: a 200 to any /v1/audio/transcriptions, the body
read and dropped), plain nginx proxying to it with the upload location's body
settings (client_body_buffer_size 256k: a large body waits in a temporary file), and
a one-worker Sluice gateway serving model `asr-bench` (media_tasks transcription,
max_request_bytes 200 MiB) on it. Each size is sent by --clients threads for
--duration seconds to each target in turn, --rounds times, alternating; per target
and size it prints uploads/s, MiB/s and the worker's resident memory: VmRSS after the
run and VmHWM, the peak since the worker started (read from /proc).

    .venv/bin/python bench/uploads.py [--duration 5] [--rounds 2] [--clients 4] [--peek]

--peek adds a second model that takes at most 1 MiB: every larger upload is then read
by Lua in pieces (sluice.upload's peek: the head first, for an early 413), not by
nginx.

Prints figures; never a CI gate.
"""
from __future__ import annotations

import argparse
import hashlib
import http.client
import shutil
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]

from bench.targets import start_nginx  # noqa: E402
from bench.wrk import BenchError  # noqa: E402
from control_plane.runtime.gateway import GatewayProcess as Gateway  # noqa: E402
from control_plane.runtime.nginx_conf import GatewayConfig  # noqa: E402
from control_plane.runtime.procs import free_ports, stop  # noqa: E402

KEY = "sk-bench-uploads-0123456789abcdef"
MODEL = "asr-bench"
MiB = 1024 * 1024
BOUNDARY = "bench-upload-boundary"
PATH = "/v1/audio/transcriptions"


def upstream_http(port: int) -> str:
    return f"""
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        client_max_body_size 0;
        location = {PATH} {{
            default_type application/json;
            return 200 '{{"text":"ok"}}';
        }}
    }}"""


def baseline_http(port: int, upstream_port: int) -> str:
    return f"""
    upstream bench_upstream {{
        server 127.0.0.1:{upstream_port};
        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        client_max_body_size 200m;
        client_body_buffer_size 256k;   # as Sluice's upload location
        location / {{
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_pass http://bench_upstream;
        }}
    }}"""


def snapshot(upstream_port: int, peek: bool) -> dict:
    snap = {
        "version": 1,
        "generated_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "models": {MODEL: {
            "id": 1, "name": MODEL, "timeout_ms": 120000, "media_tasks": ["transcription"],
            "max_request_bytes": 200 * MiB,
            "backends": [{"id": 1, "name": "bench-asr", "protocol": "openai",
                          "scheme": "http", "host": "127.0.0.1", "port": upstream_port,
                          "host_header": f"127.0.0.1:{upstream_port}", "base_path": "",
                          "weight": 100}]}},
        "consumers": {"1": {"id": 1, "name": "bench", "allowed_models": None}},
        "keys": {hashlib.sha256(KEY.encode()).hexdigest():
                 {"id": 1, "consumer_id": 1, "prefix": KEY[:11], "expires_at": None}},
    }
    if peek:
        small = dict(snap["models"][MODEL], id=2, name="asr-small", max_request_bytes=MiB)
        snap["models"]["asr-small"] = small
    return snap


def upload_body(size: int) -> bytes:
    """A multipart transcription request whose file is `size` bytes (model first)."""
    head = (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n"
            f"{MODEL}\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; "
            f"filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\n").encode()
    return head + b"\x00" * size + f"\r\n--{BOUNDARY}--\r\n".encode()


def worker_pids(master: int) -> list[int]:
    out = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        if int(fields.get("PPid", "0").strip()) == master:
            out.append(int(status.parent.name))
    return out


def memory_kib(master: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in KiB, summed over the master's workers."""
    rss = hwm = 0
    for pid in worker_pids(master):
        fields = dict(line.split(":", 1) for line in
                      Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
        rss += int(fields["VmRSS"].split()[0])
        hwm += int(fields["VmHWM"].split()[0])
    return rss, hwm


def send(port: int, body: bytes, key: str | None) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}",
               "Content-Length": str(len(body))}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    try:
        conn.request("POST", PATH, body=body, headers=headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def run(port: int, key: str | None, body: bytes, clients: int, duration: float) -> dict:
    done, errors = [0], []
    lock = threading.Lock()
    deadline = time.monotonic() + duration

    def loop():
        while time.monotonic() < deadline:
            status = send(port, body, key)
            with lock:
                if status == 200:
                    done[0] += 1
                else:
                    errors.append(status)

    started = time.monotonic()
    threads = [threading.Thread(target=loop) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - started
    if errors:
        raise BenchError(f"non-200 answers: {errors[:5]}")
    return {"per_s": done[0] / took, "mib_s": done[0] * len(body) / MiB / took}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--peek", action="store_true",
                        help="a model of 1 MiB beside: larger uploads are read by Lua")
    args = parser.parse_args()

    top = Path(tempfile.mkdtemp(prefix="sluice-uploads-"))
    top.chmod(0o755)
    up_port, base_port, port, internal_port = free_ports(4)
    upstream = start_nginx(top / "upstream", 1, upstream_http(up_port), up_port)
    baseline = gw = None
    try:
        baseline = start_nginx(top / "baseline", 1, baseline_http(base_port, up_port),
                               base_port)
        gw = Gateway(GatewayConfig(prefix=top / "sluice", port=port,
                                   internal_port=internal_port, workers=1,
                                   token="bench-uploads-token-0123456789",
                                   max_upload_size="200m"))
        gw.start()
        if gw.push(snapshot(up_port, args.peek)).status_code != 200:
            raise BenchError("snapshot push refused")
        targets = {"nginx": (base_port, None, baseline.pid), "sluice": (port, KEY, gw.proc.pid)}
        for name, (p, k, _) in targets.items():
            if send(p, upload_body(1024), k) != 200:
                raise BenchError(f"{name} did not answer 200")
        print(f"{'size':>7} {'target':<7} {'round':>5} {'uploads/s':>10} {'MiB/s':>8} "
              f"{'RSS MiB':>8} {'peak MiB':>9}")
        medians = {}
        for size in (1 * MiB, 50 * MiB):
            body = upload_body(size)
            runs = {name: [] for name in targets}
            for i in range(args.rounds):
                for name, (p, k, master) in targets.items():
                    fig = run(p, k, body, args.clients, args.duration)
                    rss, hwm = memory_kib(master)
                    fig.update(rss=rss / 1024, hwm=hwm / 1024)
                    runs[name].append(fig)
                    print(f"{size // MiB:>5}Mi {name:<7} {i + 1:>5} {fig['per_s']:>10.1f} "
                          f"{fig['mib_s']:>8.0f} {fig['rss']:>8.1f} {fig['hwm']:>9.1f}")
            for name, figs in runs.items():
                medians[(size, name)] = {k: statistics.median(f[k] for f in figs)
                                         for k in ("per_s", "mib_s", "rss", "hwm")}
        print()
        for size in (1 * MiB, 50 * MiB):
            s, n = medians[(size, "sluice")], medians[(size, "nginx")]
            print(f"{size // MiB} MiB: sluice {s['mib_s']:.0f} MiB/s, nginx {n['mib_s']:.0f} "
                  f"MiB/s (x{s['mib_s'] / n['mib_s']:.2f}); worker peak RSS sluice "
                  f"{s['hwm']:.1f} MiB, nginx {n['hwm']:.1f} MiB")
        before = memory_kib(gw.proc.pid)
        if send(port, upload_body(100 * MiB), KEY) != 200:
            raise BenchError("the 100 MiB upload was not answered 200")
        after = memory_kib(gw.proc.pid)
        print(f"one 100 MiB upload: sluice worker RSS {before[0] / 1024:.1f} -> "
              f"{after[0] / 1024:.1f} MiB, peak {before[1] / 1024:.1f} -> "
              f"{after[1] / 1024:.1f} MiB")
        return 0
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        return 1
    finally:
        if gw:
            gw.stop()
        if baseline:
            stop(baseline)
        stop(upstream)
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
