"""The quota usage page: consumers on plans against their quotas, from usage_daily."""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from control_plane.db import make_engine, make_sessionmaker
from control_plane.services import admin_users, usage
from control_plane.tables.records import UsageDaily

PASSWORD = "correct horse battery"


def _login(client):
    page = client.get("/admin/login").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    assert client.post("/admin/login", data={"username": "vera", "password": PASSWORD,
                                              "csrf_token": token}).status_code == 302


def test_usage_counts_today_and_this_month_against_the_plan(client, api, db_url):
    plan = api("post", "/plans", json={"name": "small", "daily_requests": 10,
                                       "monthly_tokens": 1000,
                                       "model_overrides": {"big": {"daily_requests": 1}}}
               ).get_json()
    acme = api("post", "/consumers", json={"name": "acme", "plan_id": plan["id"]}).get_json()
    api("post", "/consumers", json={"name": "no-plan"})
    now = datetime.now(timezone.utc)
    day, month = usage.period_starts(now)
    today, first = day.date(), month.date()
    engine = make_engine(db_url)
    with make_sessionmaker(engine)() as session:
        admin_users.create_user(session, "vera", PASSWORD, "viewer")
        rows = [("chat", today, 3, 45), ("big", today, 2, 30),   # big: a daily quota of its own
                ("chat", first - timedelta(days=1), 7, 105)]   # last month
        if today != first:
            rows.append(("chat", first, 1, 15))
        for model, d, requests, tokens in rows:
            session.add(UsageDaily(consumer_id=acme["id"], model=model, day=d,
                                   requests=requests, prompt_tokens=tokens,
                                   completion_tokens=0, total_tokens=tokens))
        session.commit()
    engine.dispose()

    earlier = 0 if today == first else 1
    [row] = _rows(db_url)
    assert (row.consumer, row.requests_today) == ("acme", 3)
    assert row.requests_month == 5 + earlier   # "big" counts for the monthly quota
    assert row.tokens_month == 75 + 15 * earlier
    _login(client)
    html = client.get("/admin/usage/").get_data(as_text=True)
    assert "3 / 10" in html and f"{75 + 15 * earlier} / 1,000" in html
    assert "no-plan" not in html


def _rows(db_url):
    engine = make_engine(db_url)
    try:
        with make_sessionmaker(engine)() as session:
            return usage.by_consumer(session)
    finally:
        engine.dispose()
