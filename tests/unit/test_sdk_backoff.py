"""The Python SDK's retry timing (pure logic): exponential backoff with jitter within
its bounds, Retry-After honoured (seconds or an HTTP date), a long one not waited for.
The retries themselves are tested against a real gateway in tests/gateway."""
from __future__ import annotations

import time
from email.utils import formatdate
from types import SimpleNamespace

from sluice_client import Sluice
from sluice_client.client import _retry_after


def test_backoff_doubles_with_jitter_up_to_the_ceiling():
    client = Sluice("http://127.0.0.1:1", "sk-x", backoff=0.5, max_backoff=4)
    for attempt, ceiling in enumerate([0.5, 1, 2, 4, 4, 4]):
        delays = {client._delay(attempt, None) for _ in range(50)}
        assert all(ceiling / 2 <= d <= ceiling for d in delays), (attempt, delays)
        assert len(delays) > 1          # jittered: callers do not retry in lockstep


def test_retry_after_is_honoured_and_a_long_one_refused():
    client = Sluice("http://127.0.0.1:1", "sk-x", backoff=0.5, max_retry_wait=30)
    assert all(2 <= client._delay(0, 2) <= 2.5 for _ in range(50))
    assert client._delay(3, 31) is None


def test_retry_after_header_in_seconds_or_as_a_date():
    def resp(value):
        return SimpleNamespace(headers={} if value is None else {"Retry-After": value})
    assert _retry_after(resp("7")) == 7
    assert _retry_after(resp(None)) is None
    assert _retry_after(resp("soon")) is None
    in_a_minute = _retry_after(resp(formatdate(time.time() + 60, usegmt=True)))
    assert 55 <= in_a_minute <= 61
