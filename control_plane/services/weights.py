"""The weight formula (DESIGN.md) and the inputs it merges from every gateway.

Per pool (the backends of one model that speak one protocol), for each backend::

    score  = (c_mem · free_memory + c_ok · success_rate + c_lat · latency_score)
             / (c_mem + c_ok + c_lat)
    weight = round(1000 · score)            (0 = drained)

- free_memory: free / total memory of the backend's GPUs, from fresh telemetry. A
  backend without fresh telemetry (no agent, or its agent went quiet) gets the mean
  of the pool's fresh backends, or 1.0 when none is fresh: stale telemetry never
  drains a backend, it only stops steering it.
- success_rate: successes / attempts over the last WINDOW_S seconds, summed over
  every gateway; 1.0 with no attempts (no evidence of trouble).
- latency_score: from the mean latency L of the last 5 requests on every gateway
  (up to 5 per gateway), relative to the pool's fastest backend F:
  (F + 50 ms) / (L + 50 ms). The fastest gets 1.0; the 50 ms keeps sub-millisecond
  noise from moving traffic. No latency seen yet: 1.0.
- A pool whose every weight came out 0 gets 1 for each: serving evenly beats
  refusing everything (the circuit breakers still take failing backends out).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

WINDOW_S = 30.0
LATENCY_SMOOTHING_MS = 50.0
MAX_WEIGHT = 1000


@dataclass(frozen=True)
class Coefficients:
    memory: float = 0.6
    success: float = 0.3
    latency: float = 0.1

    @classmethod
    def of(cls, value: Mapping[str, float] | None, default: Coefficients) -> Coefficients:
        if not value:
            return default
        return cls(value["memory"], value["success"], value["latency"])


@dataclass
class BackendInput:
    id: int
    free_fraction: float | None = None      # None: no fresh telemetry
    successes: int = 0                      # within the window, all gateways
    failures: int = 0
    latencies_ms: list[float] = field(default_factory=list)


def pool_weights(backends: list[BackendInput], coef: Coefficients) -> dict[int, int]:
    """Integer weights 0..1000 of one pool's backends, by backend id."""
    if not backends:
        return {}
    fresh = [b.free_fraction for b in backends if b.free_fraction is not None]
    unknown_memory = sum(fresh) / len(fresh) if fresh else 1.0
    means = {b.id: sum(b.latencies_ms) / len(b.latencies_ms)
             for b in backends if b.latencies_ms}
    fastest = min(means.values()) if means else 0.0
    total = coef.memory + coef.success + coef.latency
    out = {}
    for b in backends:
        memory = b.free_fraction if b.free_fraction is not None else unknown_memory
        memory = min(max(memory, 0.0), 1.0)
        attempts = b.successes + b.failures
        success = b.successes / attempts if attempts else 1.0
        latency = ((fastest + LATENCY_SMOOTHING_MS) / (means[b.id] + LATENCY_SMOOTHING_MS)
                   if b.id in means else 1.0)
        score = (coef.memory * memory + coef.success * success + coef.latency * latency) / total
        out[b.id] = max(0, min(MAX_WEIGHT, round(MAX_WEIGHT * score)))
    if not any(out.values()):
        out = dict.fromkeys(out, 1)
    return out


class OutcomeWindow:
    """Successes and failures per backend over the last WINDOW_S seconds, from the
    cumulative counters each gateway reports (a counter that went down means the
    gateway restarted: its new value is all new)."""

    def __init__(self, window_s: float = WINDOW_S):
        self.window_s = window_s
        self._last: dict[tuple[str, str], tuple[int, int]] = {}
        self._events: dict[str, deque[tuple[float, int, int]]] = {}

    def update(self, gateway: str, backend: str, successes: int, failures: int,
               now: float) -> None:
        prev_ok, prev_fail = self._last.get((gateway, backend), (0, 0))
        d_ok = successes - prev_ok if successes >= prev_ok else successes
        d_fail = failures - prev_fail if failures >= prev_fail else failures
        self._last[(gateway, backend)] = (successes, failures)
        if d_ok or d_fail:
            self._events.setdefault(backend, deque()).append((now, d_ok, d_fail))

    def totals(self, backend: str, now: float) -> tuple[int, int]:
        events = self._events.get(backend)
        if not events:
            return 0, 0
        while events and events[0][0] < now - self.window_s:
            events.popleft()
        return sum(e[1] for e in events), sum(e[2] for e in events)


@dataclass(frozen=True)
class Pool:
    model: str
    protocol: str
    backend_ids: tuple[int, ...]
    backend_names: tuple[str, ...]


# A backend whose fresh free fraction (GPU memory from agents, or the free capacity a
# scrape of its model server reports) is at most this is saturated: the gateway then
# sends it no more than it has in flight, and its pool queues (lua/sluice/admission.lua).
SATURATED_FREE = 0.02


def saturated(pools: Iterable[Pool], free: Mapping[str, float],
              threshold: float = SATURATED_FREE) -> list[str]:
    """Ids of the backends whose fresh free fraction is at or below `threshold`;
    a backend without a fresh figure is never saturated."""
    out = {str(bid) for pool in pools
           for bid, name in zip(pool.backend_ids, pool.backend_names)
           if name in free and free[name] <= threshold}
    return sorted(out, key=int)


def pools_of(snapshot: Mapping) -> list[Pool]:
    """The pools of a snapshot: per model and protocol, backends with weight > 0."""
    pools = []
    for name, model in snapshot["models"].items():
        by_protocol: dict[str, list[Mapping]] = {}
        for b in model["backends"]:
            if b["weight"] > 0:
                by_protocol.setdefault(b["protocol"], []).append(b)
        for protocol, bs in by_protocol.items():
            pools.append(Pool(name, protocol, tuple(b["id"] for b in bs),
                              tuple(b["name"] for b in bs)))
    return pools


def compute(pools: Iterable[Pool], coefficients: Mapping[str, Coefficients],
            default: Coefficients, free: Mapping[str, float],
            window: OutcomeWindow, latencies: Mapping[str, list[float]],
            now: float) -> dict[str, int]:
    """The whole weight table, {"<backend id>": weight}, for every pool."""
    table: dict[str, int] = {}
    for pool in pools:
        inputs = []
        for bid, bname in zip(pool.backend_ids, pool.backend_names):
            ok, fail = window.totals(str(bid), now)
            inputs.append(BackendInput(bid, free.get(bname), ok, fail,
                                       latencies.get(str(bid), [])))
        coef = coefficients.get(pool.model, default)
        for bid, w in pool_weights(inputs, coef).items():
            table[str(bid)] = w
    return table
