"""Usage against quotas from usage_daily: collection from gateway counters (ingest:
idempotent, boot-aware), the seed pushed back, and the admin API's arithmetic."""
from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pytest

from control_plane.db import make_engine, make_sessionmaker
from control_plane.services import usage_sync
from control_plane.tables.config import Consumer, Gateway, Plan
from control_plane.tables.records import UsageDaily

TODAY = datetime.now(timezone.utc).date()
D = TODAY.strftime("%Y%m%d")


@pytest.fixture
def sessions(db_url):
    engine = make_engine(db_url)
    yield make_sessionmaker(engine)
    engine.dispose()


def _gateway(sessions, name="gw") -> int:
    with sessions() as s:
        g = Gateway(name=name, internal_url=f"http://{name}:1")
        s.add(g)
        s.commit()
        return g.id


def _usage(sessions) -> dict:
    with sessions() as s:
        return {(r.consumer_id, r.model, r.day): (r.requests, r.prompt_tokens,
                                                   r.completion_tokens, r.total_tokens)
                for r in s.query(UsageDaily)}


def test_ingest_adds_growth_once_and_survives_replays_and_restarts(sessions):
    gw = _gateway(sessions)
    key = f"{D}|7|chat"
    with sessions() as s:
        assert usage_sync.ingest(s, gw, "boot-a", 100.0, {key: [3, 30, 6, 36]}, TODAY)
    with sessions() as s:   # the same read again (a controller restarted mid-step)
        usage_sync.ingest(s, gw, "boot-a", 100.0, {key: [3, 30, 6, 36]}, TODAY)
    assert _usage(sessions) == {(7, "chat", TODAY): (3, 30, 6, 36)}
    with sessions() as s:
        usage_sync.ingest(s, gw, "boot-a", 100.0, {key: [5, 40, 8, 48]}, TODAY)
    with sessions() as s:   # an older read committed late: adds nothing, takes nothing
        usage_sync.ingest(s, gw, "boot-a", 100.0, {key: [4, 35, 7, 42]}, TODAY)
    assert _usage(sessions) == {(7, "chat", TODAY): (5, 40, 8, 48)}
    with sessions() as s:   # the gateway restarted: its counters start again from zero
        own = usage_sync.ingest(s, gw, "boot-b", 200.0, {key: [1, 10, 2, 12]}, TODAY)
    assert own == {key: [1, 10, 2, 12]}
    with sessions() as s:   # a late read of the old boot is ignored
        assert usage_sync.ingest(s, gw, "boot-a", 100.0, {key: [9, 90, 9, 99]}, TODAY) is None
    assert _usage(sessions) == {(7, "chat", TODAY): (6, 50, 10, 60)}


def test_fleet_sums_today_s_media_beside_requests_and_tokens(sessions):
    """The figures pushed into the plans' quotas and daily caps, over every gateway."""
    gw = _gateway(sessions, "gw-fleet")
    with sessions() as s:
        plan = Plan(name="fleet-plan")
        s.add(plan)
        s.flush()
        c = Consumer(name="fleet-consumer", plan_id=plan.id)
        s.add(c)
        s.commit()
        cid = c.id
    first = (TODAY.replace(day=1) if TODAY.day > 1 else TODAY).strftime("%Y%m%d")
    counters = {f"{D}|{cid}|asr": [2, 0, 0, 10, 3000, 7, 1, 0]}
    if first != D:
        counters[f"{first}|{cid}|asr"] = [5, 0, 0, 20, 9000, 9, 9, 0]
    with sessions() as s:
        usage_sync.ingest(s, gw, "boot-f", 1.0, counters, TODAY)
    with sessions() as s:
        got = usage_sync.fleet(s, TODAY)[(cid, "asr")]
    month = sum(v[0] for v in counters.values())
    tokens = sum(v[3] for v in counters.values())
    assert got == [2, month, tokens, 3000, 7, 1]


def test_seed_is_the_fleet_minus_this_boots_own_reports():
    """Requests today and this month, tokens this month; and today's audio ms, speech
    characters and images (the plans' daily caps)."""
    fleet = {(7, "chat"): [10, 25, 900], (8, "chat"): [1, 1, 0],
             (7, "asr"): [3, 3, 0, 9000, 0, 0], (9, "img"): [2, 2, 0, 0, 40, 5]}
    yesterday = TODAY - timedelta(days=1)
    own = {f"{D}|7|chat": [4, 0, 0, 300], f"{D}|8|chat": [1, 0, 0, 0],
           f"{D}|7|asr": [1, 0, 0, 0, 2500, 0, 0, 0], f"{D}|9|img": [2, 0, 0, 0, 0, 40, 5, 0]}
    if yesterday.month == TODAY.month:
        own[yesterday.strftime("%Y%m%d") + "|7|chat"] = [2, 0, 0, 100]
        own[yesterday.strftime("%Y%m%d") + "|7|asr"] = [1, 0, 0, 0, 1000, 0, 0, 0]
        expected = {"7": {"chat": [6, 19, 500, 0, 0, 0], "asr": [2, 1, 0, 6500, 0, 0]}}
    else:
        expected = {"7": {"chat": [6, 21, 600, 0, 0, 0], "asr": [2, 2, 0, 6500, 0, 0]}}
    assert usage_sync.seed(fleet, own, TODAY) == expected


def test_parse_report_rejects_what_is_not_a_report():
    with pytest.raises(usage_sync.ReportError):
        usage_sync.parse_report({"boot": "", "started_at": 1, "counters": {}})
    boot, started, counters = usage_sync.parse_report(
        {"boot": "b", "started_at": 1.5, "counters": {f"{D}|1|m": [1, 2, 3, 4], "junk": [1]}})
    # a gateway of before audio and images reports four counters: the rest are 0
    assert (boot, started, counters) == ("b", 1.5, {f"{D}|1|m": [1, 2, 3, 4, 0, 0, 0, 0]})


def _fill(sessions, rows):
    with sessions() as s:
        for cid, model, day, req, tokens in rows:
            s.add(UsageDaily(consumer_id=cid, model=model, day=day, requests=req,
                             prompt_tokens=tokens // 2, completion_tokens=tokens - tokens // 2,
                             total_tokens=tokens))
        s.commit()


def test_consumer_usage_against_plan_and_per_model_quotas(api, sessions):
    plan = api("post", "/plans", json={
        "name": "gold", "daily_requests": 10, "monthly_requests": 100,
        "monthly_tokens": 5000,
        "model_overrides": {"big": {"daily_requests": 2, "monthly_tokens": None}}}).get_json()
    c = api("post", "/consumers", json={"name": "acme", "plan_id": plan["id"]}).get_json()
    other = api("post", "/consumers", json={"name": "other"}).get_json()
    earlier = TODAY.replace(day=1) if TODAY.day > 1 else None
    rows = [(c["id"], "chat", TODAY, 4, 400), (c["id"], "big", TODAY, 3, 3000),
            (other["id"], "chat", TODAY, 50, 50),
            (c["id"], "chat", TODAY.replace(day=1) - timedelta(days=1), 70, 70)]  # last month
    if earlier:
        rows.append((c["id"], "chat", earlier, 6, 600))
    _fill(sessions, rows)

    r = api("get", f"/consumers/{c['id']}/usage")
    assert r.status_code == 200, r.get_json()
    body = r.get_json()
    month_chat = 4 + (6 if earlier else 0)
    assert body["consumer"] == {"id": c["id"], "name": "acme"}
    assert body["plan"] == {"id": plan["id"], "name": "gold"}
    assert body["day"] == TODAY.isoformat()
    assert body["today"] == {"requests": 7, "prompt_tokens": 1700,
                             "completion_tokens": 1700, "total_tokens": 3400,
                             "audio_ms": 0, "input_chars": 0, "images": 0,
                             "session_seconds": 0}
    assert body["this_month"]["requests"] == 7 + (6 if earlier else 0)
    assert body["models"]["big"]["today"]["requests"] == 3
    quotas = {(q["quota"], q["scope"]): (q["limit"], q["used"], q["remaining"])
              for q in body["quotas"]}
    assert quotas == {
        ("daily_requests", "*"): (10, 4, 6),                # "big" counts on its own
        ("daily_requests", "big"): (2, 3, 0),               # over: nothing remains
        ("monthly_requests", "*"): (100, month_chat + 3, 100 - month_chat - 3),
        ("monthly_tokens", "*"): (5000, month_chat * 100, 5000 - month_chat * 100),
    }   # "big" has no token quota (null override): not listed

    no_plan = api("get", f"/consumers/{other['id']}/usage").get_json()
    assert no_plan["plan"] is None and no_plan["quotas"] == []
    assert no_plan["today"]["requests"] == 50


def test_consumer_usage_errors(api, client, make):
    r = api("get", "/consumers/999999/usage")
    assert r.status_code == 404 and r.get_json()["error"]["type"] == "not_found"
    c = make("consumer")
    assert client.get(f"/api/v1/consumers/{c['id']}/usage").status_code == 401
    r = client.get(f"/api/v1/consumers/{c['id']}/usage",
                   headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 403
    assert client.get("/api/v1/usage").status_code == 401


def test_usage_rows_filtered_by_consumer_model_and_days(api, sessions):
    a = api("post", "/consumers", json={"name": "a"}).get_json()
    b = api("post", "/consumers", json={"name": "b"}).get_json()
    day1, day2 = date(2026, 10, 30), date(2026, 11, 2)
    _fill(sessions, [(a["id"], "chat", day1, 1, 10), (a["id"], "chat", day2, 2, 20),
                     (a["id"], "embed", day2, 3, 30), (b["id"], "chat", day2, 4, 40)])
    body = api("get", f"/usage?consumer={a['id']}&from=2026-10-01&to=2026-11-30").get_json()
    assert [(i["consumer"], i["model"], i["day"], i["requests"]) for i in body["items"]] == [
        ("a", "chat", "2026-10-30", 1), ("a", "chat", "2026-11-02", 2),
        ("a", "embed", "2026-11-02", 3)]
    assert body["totals"]["requests"] == 6 and body["totals"]["total_tokens"] == 60
    body = api("get", "/usage?model=chat&from=2026-11-01&to=2026-11-30").get_json()
    assert [(i["consumer"], i["requests"]) for i in body["items"]] == [("a", 2), ("b", 4)]
    r = api("get", "/usage?from=2026-11-30&to=2026-11-01")
    assert r.status_code == 422 and "from" in r.get_json()["error"]["fields"]
    r = api("get", "/usage?from=yesterday&colour=red")
    assert r.status_code == 422
    assert set(r.get_json()["error"]["fields"]) == {"from", "colour"}


def test_mask_pii_flag_through_the_api_into_the_snapshot(api, make):
    model = make("model")
    assert model["mask_pii"] is False
    version = api("get", "/config").get_json()["version"]
    r = api("patch", f"/models/{model['id']}", json={"mask_pii": True})
    assert r.status_code == 200 and r.get_json()["mask_pii"] is True
    assert api("get", "/config").get_json()["version"] == version + 1
    assert api("get", "/snapshot").get_json()["models"][model["name"]]["mask_pii"] is True
    r = api("patch", f"/models/{model['id']}", json={"mask_pii": "yes"})
    assert r.status_code == 422 and "mask_pii" in r.get_json()["error"]["fields"]
    [entry] = api("get", f"/audit?resource=model&resource_id={model['id']}&action=update"
                  ).get_json()["items"]
    assert entry["before"]["mask_pii"] is False and entry["after"]["mask_pii"] is True
