"""The quota usage page: consumers on plans against their quotas, from the log."""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from control_plane.db import make_engine, make_sessionmaker
from control_plane.models import InferenceLog
from control_plane.services import admin_users, usage

PASSWORD = "correct horse battery"


def _login(client):
    page = client.get("/admin/login").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    assert client.post("/admin/login", data={"username": "vera", "password": PASSWORD,
                                              "csrf_token": token}).status_code == 302


def test_usage_counts_today_and_this_month_against_the_plan(client, api, db_url):
    plan = api("post", "/plans", json={"name": "small", "daily_requests": 10,
                                       "monthly_tokens": 1000}).get_json()
    api("post", "/consumers", json={"name": "acme", "plan_id": plan["id"]})
    api("post", "/consumers", json={"name": "no-plan"})
    now = datetime.now(timezone.utc)
    day, month = usage.period_starts(now)
    engine = make_engine(db_url)
    with make_sessionmaker(engine)() as session:
        admin_users.create_user(session, "vera", PASSWORD, "viewer")
        rows = [(now - timedelta(seconds=1), 200), (now - timedelta(seconds=2), 200),
                (now - timedelta(seconds=3), 502), (now - timedelta(seconds=4), 429),
                (month, 200), (month - timedelta(seconds=1), 200)]  # last: last month
        for i, (ts, status) in enumerate(rows):
            session.add(InferenceLog(ts=ts, gateway="gw", request_id=f"r{i}",
                                     consumer="acme", status=status, prompt_tokens=10,
                                     completion_tokens=5))
        session.commit()
    engine.dispose()

    today = 3 + (1 if month == day else 0)  # on the 1st the month's first row is today's
    [acme] = _rows(db_url)
    assert (acme.consumer, acme.requests_today, acme.requests_month) == ("acme", today, 4)
    assert acme.tokens_month == 5 * 15
    _login(client)
    html = client.get("/admin/usage/").get_data(as_text=True)
    assert f"{today} / 10" in html and "75 / 1,000" in html
    assert "no-plan" not in html


def _rows(db_url):
    engine = make_engine(db_url)
    try:
        with make_sessionmaker(engine)() as session:
            return usage.by_consumer(session)
    finally:
        engine.dispose()
