"""Hash-chained logs: the audit trail and the inference log, tampered with through the
psql binary (as anyone with database access could), found by `GET /audit/verify` and
`sluice verify-logs`; retention from the old end; anchors kept elsewhere; concurrent
writers."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import text

from control_plane.controller.ship_loop import Shipper
from control_plane.db import make_engine, make_sessionmaker
from control_plane.services import audit, log_chain
from control_plane.services.inference_logs import delete_older_than
from control_plane.settings import parse_sources

NOW = datetime.now(timezone.utc).replace(microsecond=0)
ROOT = Path(__file__).resolve().parents[2]


def psql(db_url: str, sql: str) -> str:
    """Run `sql` through the real psql binary, as an intruder with a login would."""
    done = subprocess.run(["psql", db_url, "-v", "ON_ERROR_STOP=1", "-qAtc", sql],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def as_intruder(db_url: str, sql: str) -> str:
    """audit_log refuses UPDATE and DELETE: the table's owner switches that off first."""
    return psql(db_url, "BEGIN; ALTER TABLE audit_log DISABLE TRIGGER USER; " + sql +
                "; ALTER TABLE audit_log ENABLE TRIGGER USER; COMMIT;")


def cli(db_url: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATABASE_URL": db_url, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "control_plane.cli", "verify-logs", *args],
                          capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)


def problem(api, chain: str) -> dict | None:
    r = api("get", f"/audit/verify?chain={chain}")
    assert r.status_code == 200, r.get_json()
    [result] = r.get_json()["chains"]
    assert result["ok"] == (result["problem"] is None)
    return result["problem"]


@pytest.fixture
def engine(db_url):
    e = make_engine(db_url)
    yield e
    e.dispose()


def ids(db_url: str, sql: str) -> list[int]:
    return [int(x) for x in psql(db_url, sql).split()]


# --- the audit trail -------------------------------------------------------------

@pytest.fixture
def trail(api, make, db_url):
    """Six audited changes; returns the audit_log ids in chain order."""
    for _ in range(6):
        make("model")
    rows = ids(db_url, "SELECT id FROM audit_log ORDER BY chain_seq")
    assert len(rows) == 6
    return rows


def test_audit_trail_verifies(api, trail, db_url):
    assert problem(api, "audit") is None
    body = api("get", "/audit/verify").get_json()
    assert body["ok"] and [c["chain"] for c in body["chains"]] == ["audit"]
    assert body["chains"][0]["rows"] == 6 and body["chains"][0]["head_seq"] == 6
    done = cli(db_url)
    assert done.returncode == 0 and "audit: ok, 6 rows" in done.stdout


def test_audit_row_changed_with_psql_is_named(api, trail, db_url):
    as_intruder(db_url, f"UPDATE audit_log SET actor = 'nobody' WHERE id = {trail[2]}")
    p = problem(api, "audit")
    assert p["kind"] == "altered" and p["row_id"] == trail[2] and p["seq"] == 3
    done = cli(db_url)
    assert done.returncode == 1
    assert f"audit: ALTERED row id {trail[2]} (seq 3)" in done.stdout


def test_audit_row_deleted_with_psql_is_named(api, trail, db_url):
    as_intruder(db_url, f"DELETE FROM audit_log WHERE id = {trail[3]}")
    p = problem(api, "audit")
    assert p["kind"] == "removed" and p["row_id"] == trail[4] and "4..4" in p["detail"]


def test_audit_head_deleted_is_found(api, trail, db_url):
    as_intruder(db_url, f"DELETE FROM audit_log WHERE id = {trail[5]}")
    p = problem(api, "audit")
    assert p["kind"] == "removed" and p["seq"] == 6


def test_audit_row_inserted_with_psql_is_named(api, trail, db_url):
    # a forged row that copies a real row's chain columns, slipped in after it
    new = as_intruder(db_url, (
        "INSERT INTO audit_log (actor, action, resource, chain_seq, prev_hash, row_hash) "
        "SELECT 'ghost', 'delete', 'models', chain_seq, prev_hash, row_hash "
        f"FROM audit_log WHERE id = {trail[1]} RETURNING id"))
    p = problem(api, "audit")
    assert p["kind"] == "inserted" and p["row_id"] == int(new.split()[0])


def test_audit_row_inserted_without_the_trigger_is_named(api, trail, db_url):
    new = as_intruder(db_url, "INSERT INTO audit_log (actor, action, resource) "
                              "VALUES ('ghost', 'create', 'models') RETURNING id")
    p = problem(api, "audit")
    assert p["kind"] == "inserted" and p["row_id"] == int(new.split()[0])


def test_concurrent_audit_writers_chain_in_commit_order(engine, db_url):
    sessions = make_sessionmaker(engine)
    errors = []

    def write(n: int) -> None:
        try:
            for i in range(15):
                with sessions() as s, s.begin():
                    audit.record(s, "create", "models", n * 100 + i, None, {"n": i})
        except Exception as exc:   # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    [result] = log_chain.verify(engine, "audit")
    assert result["ok"] and result["rows"] == 90 and result["head_seq"] == 90


def test_unknown_chain_is_a_422(api):
    r = api("get", "/audit/verify?chain=nope")
    assert r.status_code == 422 and "chain" in r.get_json()["error"]["fields"]


# --- the inference log ------------------------------------------------------------

def line(rid: str, age_s: float = 60, status: int = 200) -> str:
    return json.dumps({"time": str((NOW - timedelta(seconds=age_s)).timestamp()),
                       "request_id": rid, "consumer": "alice", "model": "chat-demo",
                       "status": str(status), "latency_ms": "12", "path": "/v1/x"})


@pytest.fixture
def shipped(engine, tmp_path):
    """gw: 3 lines 2 days old, then 20 fresh ones, shipped in two passes."""
    path = tmp_path / "access.log"
    path.write_text("".join(line(f"old-{i}", age_s=2 * 86400) + "\n" for i in range(3))
                    + "".join(line(f"r-{i}") + "\n" for i in range(10)))
    shipper = Shipper(engine, parse_sources(f"gw={path}"))
    assert shipper.ship_once() == 13
    with path.open("a") as f:
        f.write("".join(line(f"r-{i}") + "\n" for i in range(10, 20)))
    assert shipper.ship_once() == 10
    return path


def row_id(db_url: str, rid: str) -> int:
    return ids(db_url, f"SELECT id FROM inference_logs WHERE request_id = '{rid}'")[0]


def test_inference_chain_verifies_across_passes(api, shipped, db_url):
    assert problem(api, "inference:gw") is None
    assert ids(db_url, "SELECT chain_seq FROM inference_logs ORDER BY id") == \
        list(range(1, 24))
    done = cli(db_url, "--chain", "inference:gw")
    assert done.returncode == 0 and "inference:gw: ok, 23 rows, head seq 23" in done.stdout


def test_inference_row_changed_with_psql_is_named(api, shipped, db_url):
    victim = row_id(db_url, "r-4")
    psql(db_url, f"UPDATE inference_logs SET status = 503 WHERE id = {victim}")
    p = problem(api, "inference:gw")
    assert p["kind"] == "altered" and p["row_id"] == victim
    done = cli(db_url, "--json")
    assert done.returncode == 1
    by_chain = {r["chain"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert by_chain["audit"]["ok"] and by_chain["inference:gw"]["problem"]["row_id"] == victim


def test_inference_row_deleted_with_psql_is_named(api, shipped, db_url):
    psql(db_url, f"DELETE FROM inference_logs WHERE id = {row_id(db_url, 'r-4')}")
    p = problem(api, "inference:gw")
    assert p["kind"] == "removed" and p["row_id"] == row_id(db_url, "r-5")


def test_oldest_rows_deleted_without_retention_are_found(api, shipped, db_url):
    psql(db_url, "DELETE FROM inference_logs WHERE request_id LIKE 'old-%'")
    p = problem(api, "inference:gw")
    assert p["kind"] == "removed" and p["row_id"] == row_id(db_url, "r-0")


def test_inference_row_inserted_with_psql_is_named(api, shipped, db_url):
    new = psql(db_url, (
        "INSERT INTO inference_logs (ts, gateway, request_id, status, chain_seq, "
        "prev_hash, row_hash) SELECT ts, gateway, 'forged', 200, chain_seq, prev_hash, "
        f"row_hash FROM inference_logs WHERE id = {row_id(db_url, 'r-7')} RETURNING id"))
    p = problem(api, "inference:gw")
    assert p["kind"] == "inserted" and p["row_id"] == int(new.split()[0])


def test_retention_keeps_the_rest_verifiable(api, shipped, engine, db_url):
    assert delete_older_than(engine, NOW - timedelta(hours=1), batch=2) == 3
    assert problem(api, "inference:gw") is None
    anchors = api("get", "/audit/anchors?chain=inference:gw").get_json()["items"]
    [kept] = [a for a in anchors if a["kind"] == "retention"]
    assert kept["seq"] == 3 and len(kept["head_hash"]) == 64
    # and a row removed after retention is still found
    psql(db_url, f"DELETE FROM inference_logs WHERE id = {row_id(db_url, 'r-0')}")
    assert problem(api, "inference:gw")["kind"] == "removed"


def test_retention_of_a_whole_chain(api, engine, tmp_path):
    path = tmp_path / "access.log"
    path.write_text("".join(line(f"o-{i}", age_s=3 * 86400) + "\n" for i in range(4)))
    assert Shipper(engine, parse_sources(f"gw={path}")).ship_once() == 4
    assert delete_older_than(engine, NOW - timedelta(days=1)) == 4
    assert problem(api, "inference:gw") is None


def test_anchors_kept_elsewhere_catch_a_rewritten_chain(api, engine, db_url, tmp_path,
                                                        monkeypatch):
    monkeypatch.setattr(log_chain, "ANCHOR_ROWS", 5)
    path = tmp_path / "access.log"
    shipper = Shipper(engine, parse_sources(f"gw={path}"))
    for n in range(3):
        with path.open("a") as f:
            f.write("".join(line(f"a-{n}-{i}") + "\n" for i in range(6)))
        shipper.ship_once()
    exported = tmp_path / "anchors.json"
    done = cli(db_url, "--export-anchors")
    assert done.returncode == 0
    exported.write_text(done.stdout)
    kept = [a for a in json.loads(done.stdout)["items"] if a["chain"] == "inference:gw"]
    assert [a["seq"] for a in kept] == [6, 12, 18]
    # an intruder who knows the scheme changes a row, recomputes every hash after it,
    # moves the head and drops the anchors in the database
    victim = row_id(db_url, "a-0-2")
    psql(db_url, f"UPDATE inference_logs SET status = 500 WHERE id = {victim}")
    with engine.begin() as conn:
        rows = conn.execute(text(
            "SELECT id, chain_seq, ts, gateway, request_id, consumer, plan, model_name, "
            "backend, method, path, status, latency, upstream_latency, prompt_tokens, "
            "completion_tokens, cache_status, error_type, bytes_sent, queue_wait "
            "FROM inference_logs ORDER BY chain_seq")).all()
        h = log_chain.GENESIS
        for r in rows:
            new = log_chain.link(h, log_chain.inference_content(r[1], tuple(r[2:])))
            conn.execute(text("UPDATE inference_logs SET prev_hash = :p, row_hash = :h "
                              "WHERE id = :i"), {"p": h, "h": new, "i": r[0]})
            h = new
        conn.execute(text("UPDATE log_chains SET head_hash = :h WHERE name = 'inference:gw'"),
                     {"h": h})
        conn.execute(text("DELETE FROM log_anchors"))
    assert problem(api, "inference:gw") is None   # the database alone cannot tell
    done = cli(db_url, "--chain", "inference:gw", "--anchors", str(exported))
    assert done.returncode == 1
    assert "inference:gw: ALTERED" in done.stdout and "(seq 6)" in done.stdout


def test_concurrent_shippers_keep_each_chain_whole(engine, tmp_path):
    """Two shippers on the same two sources at once (as two controllers around a
    failover): the advisory lock gives each source one writer at a time."""
    paths = {name: tmp_path / name / "access.log" for name in ("gw1", "gw2")}
    for name, path in paths.items():
        path.parent.mkdir()
        path.write_text("".join(line(f"{name}-{i}") + "\n" for i in range(400)))
    spec = ",".join(f"{name}={path}" for name, path in paths.items())
    shippers = [Shipper(engine, parse_sources(spec), max_batch_bytes=4096) for _ in range(2)]

    def drain(s: Shipper) -> None:
        for _ in range(400):
            s.ship_once()

    threads = [threading.Thread(target=drain, args=(s,)) for s in shippers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(s.shipped for s in shippers) == 800
    results = {r["chain"]: r for r in log_chain.verify(engine)}
    for name in paths:
        r = results[f"inference:{name}"]
        assert r["ok"] and r["rows"] == 400 and r["head_seq"] == 400, r
