"""Inference logs through the admin API: search filters, per-model aggregates,
retention; rows inserted the way the shipper does (COPY)."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import text

from control_plane.controller.ship_loop import Shipper, to_row
from control_plane.db import make_engine
from control_plane.services.inference_logs import delete_older_than
from control_plane.settings import parse_sources

NOW = datetime.now(timezone.utc).replace(microsecond=0)


def line(rid, model="chat-demo", status=200, latency=10, consumer="alice", age_s=60, **kw):
    rec = {"time": str((NOW - timedelta(seconds=age_s)).timestamp()), "request_id": rid,
           "consumer": consumer, "plan": "none", "model": model, "backend": "b1",
           "method": "POST", "path": "/v1/chat/completions", "status": str(status),
           "latency_ms": str(latency), "upstream_ms": "", "prompt_tokens": "",
           "completion_tokens": "", "cache": "", "error_type": "", "bytes_sent": "100"}
    rec.update(kw)
    return json.dumps(rec)


@pytest.fixture
def engine(db_url):
    e = make_engine(db_url)
    yield e
    e.dispose()


@pytest.fixture
def shipped(engine, tmp_path):
    """One 2-day-old line, 100 chat-demo requests (latency 1..100 ms, every 10th a
    502), 5 predict-demo ones by bob, one line that is not ours."""
    lines = [line("old-1", age_s=2 * 86400)]
    lines += [line(f"c-{i}", latency=i, status=502 if i % 10 == 0 else 200)
              for i in range(1, 101)]
    # bob's waited in the gateway's queue; the others' lines have no queue_ms (as a
    # gateway from before the queue writes them)
    lines += [line(f"p-{i}", model="predict-demo", consumer="bob", latency=2000,
                   queue_ms="250") for i in range(5)]
    lines += ["not json at all"]
    path = tmp_path / "access.log"
    path.write_text("\n".join(lines) + "\n")
    shipper = Shipper(engine, parse_sources(f"gw={path}"))
    assert shipper.ship_once() == 106
    assert shipper.skipped == 1
    return engine


def test_search_filters(api, shipped):
    r = api("get", "/logs?request_id=c-7")
    [item] = r.get_json()["items"]
    assert item["latency_ms"] == 7 and item["model"] == "chat-demo" and item["gateway"] == "gw"
    assert item["upstream_latency_ms"] is None and item["bytes_sent"] == 100
    assert item["queue_ms"] is None
    [item] = api("get", "/logs?request_id=p-1").get_json()["items"]
    assert item["queue_ms"] == 250
    r = api("get", "/logs?consumer=bob&limit=1000")
    assert {i["request_id"] for i in r.get_json()["items"]} == {f"p-{i}" for i in range(5)}
    r = api("get", "/logs?model=chat-demo&status=502&limit=1000")
    assert len(r.get_json()["items"]) == 10
    since = (NOW - timedelta(days=1)).isoformat()
    r = api("get", f"/logs?until={since}")
    assert [i["request_id"] for i in r.get_json()["items"]] == ["old-1"]
    # paging, newest first
    r = api("get", "/logs?limit=50").get_json()
    assert len(r["items"]) == 50
    rest = api("get", f"/logs?limit=1000&before_id={r['next_before_id']}").get_json()
    assert len(rest["items"]) == 56 and "next_before_id" not in rest


@pytest.mark.parametrize("query, field", [
    ("status=abc", "status"), ("status=99", "status"), ("since=yesterday", "since"),
    ("limit=0", "limit"), ("limit=5000", "limit"), ("modle=x", "modle"),
])
def test_bad_query_is_a_422(api, query, field):
    r = api("get", f"/logs?{query}")
    assert r.status_code == 422
    err = r.get_json()["error"]
    assert err["type"] == "validation_error" and field in err["fields"]


def test_stats_per_model(api, shipped):
    since = (NOW - timedelta(hours=1)).timestamp()
    r = api("get", f"/logs/stats?since={since}&until={NOW.timestamp()}")
    assert r.status_code == 200
    models = {m["model"]: m for m in r.get_json()["models"]}
    chat = models["chat-demo"]
    assert chat["requests"] == 100 and chat["error_rate"] == 0.1
    assert chat["requests_per_second"] == pytest.approx(100 / 3600, abs=1e-4)
    assert chat["latency_ms"] == {"p50": 50.5, "p95": 95.05, "p99": 99.01}
    assert models["predict-demo"]["latency_ms"]["p99"] == 2000
    assert "old" not in json.dumps(models)
    r = api("get", f"/logs/stats?since={NOW.timestamp()}&until={since}")
    assert r.status_code == 422


def test_brief_query_as_written(shipped):
    with shipped.connect() as conn:
        rows = conn.execute(text(
            "SELECT model_name, COUNT(*) FROM inference_logs WHERE latency > 1000 "
            "GROUP BY model_name ORDER BY COUNT(*) DESC LIMIT 5;")).all()
    assert [tuple(r) for r in rows] == [("predict-demo", 5)]


def test_retention_removes_only_old_rows_in_batches(shipped):
    removed = delete_older_than(shipped, NOW - timedelta(hours=1), batch=1)
    assert removed == 1
    with shipped.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM inference_logs")).scalar() == 105
    assert delete_older_than(shipped, NOW - timedelta(hours=1)) == 0


def test_a_line_is_never_a_key():
    row = to_row("gw", line("x", Authorization="Bearer sk-secret").encode())
    assert "sk-secret" not in json.dumps(row, default=str)
    assert to_row("gw", b'{"time": "x"}') is None
    assert to_row("gw", b"[1, 2]") is None
