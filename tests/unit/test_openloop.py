"""The open-loop load generator of the benches (bench/openloop.c), against a small
local HTTP/1.1 server: it sends the chat request on a fixed timetable, reads answers
with Content-Length and chunked bodies, counts non-2xx, follows `Connection: close`,
and charges a server stall to every request the stall held up."""
from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-test-openloop"


class ChatServer(ThreadingHTTPServer):
    """Answers the chat request; answer n (from 1): every 10th a 500, every 7th with
    `Connection: close`, odd ones chunked (three chunks), the rest with a length.
    `stall_at`: from that answer on, every request waits until `stall_s` after it."""
    daemon_threads = True

    def __init__(self, stall_at: int = 0, stall_s: float = 0.0):
        super().__init__(("127.0.0.1", 0), ChatHandler)
        self.lock = threading.Lock()
        self.count = self.errors = 0
        self.bad_requests: list[str] = []
        self.stall_at, self.stall_s, self.stall_until = stall_at, stall_s, 0.0


class ChatHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True   # else the chunks wait 40 ms for delayed ACKs

    def log_message(self, *args):  # quiet
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        srv = self.server
        with srv.lock:
            srv.count += 1
            n = srv.count
            if n == srv.stall_at:
                srv.stall_until = time.monotonic() + srv.stall_s
            if (self.path != "/v1/chat/completions" or body.get("model") != "bench-chat"
                    or self.headers["Authorization"] != f"Bearer {KEY}"):
                srv.bad_requests.append(f"{self.path} {self.headers} {body}")
        time.sleep(max(0.0, srv.stall_until - time.monotonic()))
        status = 500 if n % 10 == 0 else 200
        srv.errors += status == 500
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if n % 7 == 0:
            self.send_header("Connection", "close")
            self.close_connection = True
        answer = b'{"id":"chatcmpl-test","choices":[{"message":{"content":"hi"}}]}'
        if n % 2:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (answer[:10], answer[10:], b""):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
        else:
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)


@pytest.fixture(scope="module")
def openloop(tmp_path_factory) -> Path:
    cc = shutil.which("cc")
    assert cc, "no C compiler: scripts/setup.sh installs gcc"
    out = tmp_path_factory.mktemp("openloop") / "openloop"
    subprocess.run([cc, "-O2", "-Wall", "-Werror", "-o", str(out),
                    str(REPO / "bench" / "openloop.c")], check=True)
    return out


def run(openloop: Path, server: ChatServer, rate: int, seconds: float) -> dict:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        out = subprocess.run([str(openloop), "-r", str(rate), "-c", "4", "-d", str(seconds),
                              "-k", KEY, f"http://127.0.0.1:{server.server_port}"],
                             capture_output=True, text=True, timeout=30, check=True)
    finally:
        server.shutdown()
        server.server_close()
    assert not server.bad_requests, server.bad_requests[:3]
    return json.loads(out.stdout)


def test_sends_the_timetable_and_reads_every_answer(openloop):
    server = ChatServer()
    res = run(openloop, server, rate=200, seconds=1)
    assert res["requests"] == res["answered"] == server.count == 200, res
    assert res["unfinished"] == 0 and not any(res["errors"].values()), res
    assert res["non_2xx"] == server.errors == 20, res
    assert 160 <= res["rate"] <= 201, res


def test_a_stall_counts_against_every_request_it_held_up(openloop):
    # 0.3 s stall from the 50th request at 200 req/s on 4 connections: ~60 requests
    # come due during it and wait; ~40 of them more than 0.1 s. A closed loop would
    # charge the stall to the 4 requests in flight only, and p90 would stay small.
    server = ChatServer(stall_at=50, stall_s=0.3)
    res = run(openloop, server, rate=200, seconds=1)
    assert res["answered"] == 200, res
    assert res["latency_ms"]["p90"] >= 100, res
    assert res["latency_ms"]["max"] >= 300, res
