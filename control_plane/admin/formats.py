"""How the admin pages print figures, one rule each (dashboard.js's fmtRate keeps the
same rule for the live tiles): a rate in requests per second, a latency in ms."""
from __future__ import annotations

import math

from control_plane.admin.blueprint import bp

NONE = "—"


@bp.app_template_filter("rate")
def rate(per_second: float | None) -> str:
    """Requests per second: one decimal from 10 up, two significant digits below
    (0.011, 2.5), 0 for none at all."""
    if per_second is None:
        return NONE
    if per_second <= 0:
        return "0"
    if per_second >= 10:
        return f"{per_second:.1f}"
    decimals = max(1, 1 - math.floor(math.log10(per_second)))
    text = f"{per_second:.{decimals}f}"
    return f"{per_second:.1f}" if float(text) >= 10 else text   # 9.96 rounds to 10.0


@bp.app_template_filter("ms")
def ms(milliseconds: float | None) -> str:
    """A latency in whole milliseconds, as the log rows store it."""
    if milliseconds is None:
        return NONE
    return f"{math.floor(milliseconds + 0.5)} ms"
