"""The log shipper against a real gateway and a real Postgres: every request is one
row, across a shipper killed mid-batch (kill -9), a log rotation mid-stream (rename +
USR1) and a gateway restart; the brief's query runs as written."""
from __future__ import annotations

import os
import signal
import sys
import time

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from control_plane.db import make_engine
from control_plane.runtime import procs
from control_plane.services.inference_logs import brief_query

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def served(own_gateway, default_snapshot):
    """A gateway of its own serving `default_snapshot`: the shipper reads its whole
    access log."""
    assert own_gateway.push(default_snapshot).status_code == 200
    return own_gateway


@pytest.fixture
def engine(db_url):
    e = make_engine(db_url)
    yield e
    e.dispose()


def send(gw, helpers, prefix: str, n: int, sent: list[str], **headers) -> None:
    for i in range(n):
        rid = f"{prefix}-{i}"
        key = "sk-wrong-0123456789" if i % 10 == 9 else helpers.KEY
        r = helpers.chat(gw, key=key, headers={"X-Request-Id": rid, **headers})
        assert r.status_code == (403 if i % 10 == 9 else 200), r.text
        sent.append(rid)


def log_lines(path) -> int:
    return sum(len(p.read_bytes().splitlines()) for p in path.parent.glob("access.log*"))


def wait_for(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def start_shipper(db_url, log_path, tmp_path, name="shipper"):
    env = dict(os.environ, DATABASE_URL=db_url, SLUICE_ACCESS_LOGS=f"gw1={log_path}",
               SLUICE_SHIP_INTERVAL="0.2")
    return procs.spawn([sys.executable, "-m", "control_plane.cli", "shipper"],
                       log=tmp_path / f"{name}.log", env=env, cwd=REPO)


def count(engine, sql="SELECT count(*) FROM inference_logs") -> int:
    with engine.connect() as conn:
        return conn.execute(text(sql)).scalar()


def test_nothing_lost_nothing_doubled(served, helpers, db_url, engine, tmp_path):
    log_path = served.prefix / "logs" / "access.log"
    sent: list[str] = []
    send(served, helpers, "a", 40, sent)
    wait_for(lambda: log_lines(log_path) >= 40, 10, "the first 40 lines")

    # 1. a shipper killed mid-batch: rows COPYed, checkpoint not yet written
    blocker = engine.connect()
    tx = blocker.begin()
    blocker.execute(text("LOCK TABLE log_checkpoints IN SHARE MODE"))
    first = start_shipper(db_url, log_path, tmp_path, "shipper-1")
    try:
        wait_for(lambda: count(engine, "SELECT count(*) FROM pg_stat_activity "
                                       "WHERE wait_event_type = 'Lock' AND query LIKE "
                                       "'INSERT INTO log_checkpoints%'"),
                 20, "the shipper to block on its checkpoint")
        first.kill()
        first.wait(timeout=10)
    finally:
        tx.rollback()
        blocker.close()
    time.sleep(0.5)
    assert count(engine) == 0   # the killed batch never committed

    # 2. a new shipper; rotation while requests flow
    second = start_shipper(db_url, log_path, tmp_path, "shipper-2")
    try:
        send(served, helpers, "b", 20, sent)
        os.rename(log_path, log_path.with_name("access.log.1"))
        send(served, helpers, "c", 10, sent)   # still written to access.log.1
        served.proc.send_signal(signal.SIGUSR1)   # nginx reopens: a new access.log
        wait_for(lambda: log_path.exists(), 10, "nginx to reopen access.log")
        send(served, helpers, "d", 20, sent)

        # 3. a gateway restart (graceful stop flushes its buffers)
        served.stop()
        served.start()
        send(served, helpers, "e", 20, sent)
        # two slow requests for the brief's query
        send(served, helpers, "slow", 2, sent, **{"X-Demo-Latency-Ms": "1100"})

        wait_for(lambda: count(engine) >= len(sent), 30, f"{len(sent)} rows")
        time.sleep(1.5)   # more passes: nothing may be shipped twice
    finally:
        procs.stop(second)

    with engine.connect() as conn:
        ids = [r[0] for r in conn.execute(text("SELECT request_id FROM inference_logs"))]
        refused = conn.execute(text(
            "SELECT count(*) FROM inference_logs WHERE status = 403 "
            "AND error_type = 'forbidden' AND model_name IS NULL")).scalar()
        row = conn.execute(text(
            "SELECT gateway, consumer, model_name, backend, status, latency, "
            "upstream_latency, plan FROM inference_logs WHERE request_id = 'a-0'")).one()
    assert sorted(ids) == sorted(sent)   # every request once: none lost, none doubled
    assert refused == sum(1 for rid in sent if int(rid.split("-")[1]) % 10 == 9)
    assert row.gateway == "gw1" and row.consumer == "alice" and row.model_name == "chat-demo"
    assert row.backend == "openai-a" and row.status == 200 and row.plan == "none"
    assert row.latency is not None and row.upstream_latency is not None
    with Session(engine) as session:
        assert brief_query(session) == [("chat-demo", 2)]


def test_admin_api_finds_shipped_rows(served, helpers, db_url, engine, tmp_path):
    from control_plane.app import create_app, dispose
    from control_plane.controller.ship_loop import Shipper
    from control_plane.settings import parse_sources

    sent: list[str] = []
    send(served, helpers, "api", 10, sent)
    log_path = served.prefix / "logs" / "access.log"
    wait_for(lambda: log_lines(log_path) >= 10, 10, "10 lines")
    shipper = Shipper(engine, parse_sources(f"gw1={log_path}"))
    assert shipper.ship_once() == 10
    assert shipper.ship_once() == 0

    app = create_app({"DATABASE_URL": db_url, "ADMIN_TOKEN": "t" * 20, "TESTING": True})
    try:
        client = app.test_client()
        auth = {"Authorization": "Bearer " + "t" * 20}
        r = client.get("/api/v1/logs?request_id=api-3", headers=auth)
        assert r.status_code == 200
        [item] = r.get_json()["items"]
        assert item["status"] == 200 and item["consumer"] == "alice"
        r = client.get("/api/v1/logs?status=403&model=chat-demo", headers=auth)
        assert r.get_json()["items"] == []      # refused before the model was known
        r = client.get("/api/v1/logs?status=403", headers=auth)
        assert [i["request_id"] for i in r.get_json()["items"]] == ["api-9"]
        r = client.get("/api/v1/logs/stats", headers=auth)
        models = {m["model"]: m for m in r.get_json()["models"]}
        assert models["chat-demo"]["requests"] == 9
        assert models["chat-demo"]["error_rate"] == 0
        assert models[None]["client_error_rate"] == 1.0
    finally:
        dispose(app)
