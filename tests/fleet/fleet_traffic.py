"""Callers of the fleet: a model to call, and steady load with every answer recorded."""
from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import requests

from fleet_harness import Fleet


def chat_model(fleet: Fleet, name: str, plan: dict | None = None) -> dict:
    """A model on the demo backend, a consumer (on `plan`, if given) and its key."""
    admin = fleet.admin
    model = admin.create("models", name=name, timeout_ms=5000)
    admin.create("backends", name=f"{name}-a", model_id=model["id"], url=fleet.backend_url,
                 protocol="openai", weight=100)
    consumer = admin.create("consumers", name=f"{name}-team")
    if plan is not None:
        p = admin.create("plans", name=f"{name}-plan", **plan)
        admin.update("consumers", consumer["id"], plan_id=p["id"])
    key = admin.create("keys", consumer_id=consumer["id"], name="fleet")
    return {"model": name, "key": key["key"], "consumer_id": consumer["id"]}


def chat(url: str, demo: dict, session=None, model: str | None = None) -> requests.Response:
    return (session or requests).post(
        url + "/v1/chat/completions", timeout=15,
        json={"model": model or demo["model"], "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": f"Bearer {demo['key']}"})


@dataclass
class Answer:
    started: float
    status: int          # 0: no HTTP answer at all
    upstreams: list[str]  # gateways the balancer tried, the one that answered last


@dataclass
class Load:
    """`threads` callers through the load balancer until stopped."""

    url: str
    demo: dict
    threads: int = 8
    answers: list[Answer] = field(default_factory=list)

    def __post_init__(self):
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._workers = [threading.Thread(target=self._run, daemon=True)
                         for _ in range(self.threads)]

    def _run(self) -> None:
        session = requests.Session()
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                r = chat(self.url, self.demo, session)
                status = r.status_code
                upstreams = [u.strip() for u in
                             r.headers.get("X-Fleet-Upstream", "").split(",") if u.strip()]
            except requests.RequestException:
                status, upstreams = 0, []
            with self._lock:
                self.answers.append(Answer(started, status, upstreams))

    @property
    def total(self) -> int:
        return len(self.answers)

    def __enter__(self) -> "Load":
        for w in self._workers:
            w.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for w in self._workers:
            w.join(30)

    def summary(self, since: float = 0.0) -> dict:
        answers = [a for a in self.answers if a.started >= since]
        failed = [a for a in answers if a.status != 200]
        return {"total": len(answers), "not_200": len(failed),
                "statuses": dict(Counter(a.status for a in answers)),
                "retried": sum(1 for a in answers if len(a.upstreams) > 1),
                "answered_by": dict(Counter(a.upstreams[-1] for a in answers
                                            if a.upstreams and a.status == 200))}

    def describe(self, since: float = 0.0) -> str:
        """The summary in one line: "2338 requests: 200 x2338; 8 retried; by gateway
        (last octet: status x count): .31 200x1111, …"."""
        answers = [a for a in self.answers if a.started >= since]
        s = self.summary(since)
        statuses = ", ".join(f"{k} x{v}" for k, v in sorted(s["statuses"].items()))
        by = Counter((a.upstreams[-1].split(":")[0].rsplit(".", 1)[-1] if a.upstreams
                      else "-", a.status) for a in answers)
        per = ", ".join(f".{gw} {status}x{n}" for (gw, status), n in sorted(by.items()))
        return f"{s['total']} requests: {statuses}; {s['retried']} retried; by gateway: {per}"
