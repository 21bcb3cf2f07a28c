"""Plans' quotas against what their consumers used (from usage_daily)."""
from __future__ import annotations

from datetime import datetime, timezone

from flask import render_template

from control_plane.admin.blueprint import bp
from control_plane.api.views import db
from control_plane.services import usage


@bp.get("/usage/")
def quota_usage():
    now = datetime.now(timezone.utc)
    day, month = usage.period_starts(now)
    return render_template("usage.html", rows=usage.by_consumer(db(), now), day=day,
                           month=month)
