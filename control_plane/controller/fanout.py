"""What the controller's loops share when they call every gateway (or backend) each
tick: a bounded thread pool for the calls, and warnings logged once per change of
state rather than once per tick (weights_loop, usage_loop, health_loop)."""
from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

MAX_PARALLEL = 16   # calls in flight at once, per loop

T = TypeVar("T")


def parallel(items: list[T], fn: Callable[[T], Any],
             max_parallel: int = MAX_PARALLEL) -> list[Any]:
    """fn over items, in order; at most `max_parallel` at once (no pool for one item)."""
    if len(items) <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(len(items), max_parallel)) as pool:
        return list(pool.map(fn, items))


class Notes:
    """The last error per key: logs a warning when one appears or changes, and
    "ok again" when it clears."""

    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._errors: dict[Hashable, str | None] = {}

    def __call__(self, key: Hashable, error: str | None, ok_name: str | None = None) -> None:
        if self._errors.get(key) != error:
            if error:
                self._log.warning("%s", error)
            elif key in self._errors:
                self._log.info("%s: ok again", key if ok_name is None else ok_name)
            self._errors[key] = error
