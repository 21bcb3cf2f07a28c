"""Personal and health data detectors (sluice.phi_classes): precision and recall per
class on the labelled corpus (tests/data/phi_corpus.jsonl, made by bench/phi_corpus.py),
and what a scan costs per KiB of request body, against baselines measured in the same
run (bench/README.md).

One nginx (one process, the repository's lua/ and bench/ on its Lua path) in a
temporary prefix runs bench/phi_bench.lua: GET /corpus scans every corpus sentence
with every class and returns the hits; POST /cost times each scanner over a body.

    .venv/bin/python bench/phi.py                  # both parts
    .venv/bin/python bench/phi.py --iter 500 --json artifacts/phi.json
"""
from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "data" / "phi_corpus.jsonl"
NGINX = "/usr/sbin/nginx"
MISSES: list[str] = []

CONF = """
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
daemon off;
master_process off;
worker_processes 1;
pid logs/nginx.pid;
error_log logs/error.log warn;
events { worker_connections 64; }
http {
    lua_package_path "{repo}/lua/?.lua;{repo}/bench/?.lua;/usr/share/lua/5.1/?.lua;;";
    lua_package_cpath "/usr/lib/x86_64-linux-gnu/lua/5.1/?.so;;";
    lua_shared_dict sluice_metrics 4m;
    access_log off;
    client_body_temp_path tmp/body;
    client_max_body_size 16m;
    client_body_buffer_size 16m;
    server {
        listen 127.0.0.1:{port};
        location = /corpus { content_by_lua_block { require("phi_bench").corpus() } }
        location = /cost { content_by_lua_block { require("phi_bench").cost() } }
    }
}
"""

CLEAN = ("The patient reported mild pain in the lower back after lifting a heavy box; "
         "rest, heat and a short course of anti-inflammatory medicine were advised, with "
         "a follow-up visit if the pain does not ease within two weeks. ")
DENSE = ("Patient John Smith (MRN: 48213377, SSN 123-45-6789) lives at 12 Oak Street, "
         "phone (415) 555-0100, john.smith@example.com; 身份证号 11010519491231002X，"
         "手机 13912345678，银行卡 6222021234567890128。 ")


def chat_body(text: str, kib: int) -> bytes:
    content = (text * (kib * 1024 // len(text.encode()) + 1))
    body = {"model": "m", "messages": [{"role": "system", "content": "You are a clinician."},
                                       {"role": "user", "content": content}]}
    raw = json.dumps(body, ensure_ascii=False).encode()
    return raw


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start(prefix: Path) -> tuple[subprocess.Popen, str]:
    for sub in ("conf", "logs", "tmp"):
        (prefix / sub).mkdir(parents=True, exist_ok=True)
    port = free_port()
    (prefix / "conf" / "nginx.conf").write_text(
        CONF.replace("{repo}", str(REPO)).replace("{port}", str(port)))
    proc = subprocess.Popen([NGINX, "-p", f"{prefix}/", "-c", "conf/nginx.conf"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 15
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"nginx exited: {proc.stdout.read().decode()}"
                             f"{(prefix / 'logs' / 'error.log').read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def span(text: str, value: str) -> tuple[int, int]:
    raw, v = text.encode(), value.encode()
    at = raw.find(v)
    assert at >= 0, (text, value)
    return at + 1, at + len(v)


def hits_of(url: str) -> list[list]:
    with urllib.request.urlopen(f"{url}/corpus?path={CORPUS}", timeout=60) as r:
        return [json.loads(line) for line in r.read().decode().splitlines()]


def score(rows: list[dict], found: list[list], hard: bool) -> dict[str, dict[str, float]]:
    """Per class: true positives, false positives, false negatives, precision, recall.
    A hit is right when a label of its class overlaps it. `hard`: the known
    shortfalls too (bench/phi_corpus.py)."""
    assert len(found) == len(rows), (len(found), len(rows))
    tally: dict[str, dict[str, int]] = defaultdict(lambda: {"tp": 0, "fp": 0, "fn": 0})
    for row, hits in zip(rows, found):
        if row.get("hard") and not hard:
            continue
        labels = [(lab["class"], *span(row["text"], lab["value"])) for lab in row["labels"]]
        matched = set()
        for cls, lo, hi in hits:
            ok = [i for i, (c, a, b) in enumerate(labels) if c == cls and lo <= b and hi >= a]
            if ok:
                tally[cls]["tp"] += 1
                matched.update(ok)
            else:
                tally[cls]["fp"] += 1
                MISSES.append(f"fp {cls}: {row['text'].encode()[lo - 1:hi].decode()!r} in {row['text']!r}")
        for i, (cls, _, _) in enumerate(labels):
            if i not in matched:
                tally[cls]["fn"] += 1
                MISSES.append(f"fn {cls}: {row['labels'][i]['value']!r} in {row['text']!r}")
    out = {}
    for cls, t in sorted(tally.items()):
        p = t["tp"] / (t["tp"] + t["fp"]) if t["tp"] + t["fp"] else 1.0
        rc = t["tp"] / (t["tp"] + t["fn"]) if t["tp"] + t["fn"] else 1.0
        out[cls] = {**t, "precision": round(p, 3), "recall": round(rc, 3)}
    return out


def cost(url: str, iters: int, kib: int) -> dict[str, dict[str, float]]:
    out = {}
    for kind, text in (("clean", CLEAN), ("dense", DENSE)):
        req = urllib.request.Request(f"{url}/cost?iter={iters}", data=chat_body(text, kib),
                                     method="POST")
        with urllib.request.urlopen(req, timeout=300) as r:
            out[kind] = json.loads(r.read())
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iter", type=int, default=200, help="scans per scanner and body")
    ap.add_argument("--kib", type=int, default=4, help="size of the timed bodies (KiB)")
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--misses", action="store_true", help="print each wrong or missed hit")
    args = ap.parse_args()
    prefix = Path(tempfile.mkdtemp(prefix="sluice-phi-bench-"))
    proc, url = start(prefix)
    try:
        found = hits_of(url)
        costs = cost(url, args.iter, args.kib)
    except Exception:
        print((prefix / "logs" / "error.log").read_text()[-3000:], file=sys.stderr)
        raise
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(prefix, ignore_errors=True)
    rows = [json.loads(x) for x in CORPUS.read_text().splitlines()]
    langs: dict[str, int] = defaultdict(int)
    for r in rows:
        langs[r["lang"]] += 1
    n_hard = sum(1 for r in rows if r.get("hard"))
    print(f"corpus: {len(rows)} sentences ({', '.join(f'{k} {v}' for k, v in sorted(langs.items()))}"
          f"; {n_hard} of them hard: the known shortfalls)")
    templated, everything = score(rows, found, False), score(rows, found, True)
    scores = {"templated": templated, "with_hard": everything}
    print(f"{'class':16} {'tp':>4} {'fp':>4} {'fn':>4} {'precision':>10} {'recall':>7}"
          f"   {'with the hard ones:':>20} {'precision':>10} {'recall':>7}")
    for cls, s in everything.items():
        t = templated.get(cls, {"tp": 0, "fp": 0, "fn": 0, "precision": 1.0, "recall": 1.0})
        print(f"{cls:16} {t['tp']:4} {t['fp']:4} {t['fn']:4} {t['precision']:10.3f} "
              f"{t['recall']:7.3f}   {'':>20} {s['precision']:10.3f} {s['recall']:7.3f}")
    if args.misses:
        print("\n".join(MISSES))
    print(f"\nCPU per KiB of a {args.kib} KiB chat body, {args.iter} scans each "
          "(walk: the JSON string literals alone; mask_pii: today's four classes)")
    names = ["walk", "mask_pii", "phi_one", "phi_log", "phi_mask"]
    print(f"{'body':6} " + " ".join(f"{n:>10}" for n in names) + "   phi_log/walk  phi_log/mask_pii")
    for kind, c in costs.items():
        print(f"{kind:6} " + " ".join(f"{c[n]:8.1f}us" for n in names)
              + f"   {c['phi_log'] / c['walk']:11.1f}x  {c['phi_log'] / c['mask_pii']:15.1f}x")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"scores": scores, "cost_us_per_kib": costs},
                                              indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
