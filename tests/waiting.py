"""The one way a test waits for a condition: `eventually(predicate, timeout)`.

Never a fixed sleep followed by an assertion: the machines are shared and noisy, so
a test polls for what a user would see and fails with the last observation.
"""
from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def eventually(predicate: Callable[[], T], timeout: float = 10.0,
               interval: float = 0.05, message: str = "") -> T:
    """Call `predicate` until it returns something truthy; return that value.

    An exception from the predicate counts as "not yet" (the last one is shown when
    time runs out), so a connection refused while a process starts is simply retried.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = predicate()
            if value:
                return value
            last = value
        except Exception as exc:  # noqa: BLE001 - reported below if it persists
            last = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"not true within {timeout} s: {message or predicate!r}; "
                                 f"last: {last!r}")
        time.sleep(interval)
