"""Keep a set of children running, the way a small process manager does.

`sluice up` hands each child it started to a `Supervisor` under a name: anything with
`start()`, `alive()`, `stop()` and `describe()` (a `Process` for a command; the
`GatewayProcess` for nginx; the PostgreSQL `Cluster`). The supervisor checks them every
`interval`; a child found dead is logged and started again after a backoff that
doubles with each death in a row (capped) and starts over once the child has stayed
up for `reset_after` seconds. A child that cannot start is tried again on the same
schedule, forever: one child's death never stops another. `stop()` stops them all,
last added first.
"""
from __future__ import annotations

import logging
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from control_plane.runtime import procs

log = logging.getLogger("sluice.supervisor")


class Supervised(Protocol):
    def start(self) -> None:
        """Start (again); return once it serves; raise when it cannot."""

    def alive(self) -> bool:
        """Whether it still runs; cheap, called every interval."""

    def stop(self) -> None:
        """Stop it and everything it left behind; a no-op when it is not running."""

    def describe(self) -> str:
        """How it ended, for the log: "pid 12 was killed by SIGKILL"."""


@dataclass(frozen=True)
class Backoff:
    """Seconds before restart number n (n = deaths in a row): initial · 2^(n-1), capped."""

    initial: float = 1.0
    cap: float = 30.0
    # a child up this long has recovered: its next death waits `initial` again
    reset_after: float = 30.0

    def delay(self, deaths_in_a_row: int) -> float:
        return min(self.cap, self.initial * 2 ** max(0, deaths_in_a_row - 1))


@dataclass
class _Entry:
    name: str
    child: Supervised
    started_at: float
    deaths: int = 0                  # in a row, without `reset_after` of uptime between
    restart_at: float | None = None  # set while it is dead and waiting for its restart
    restarts: int = 0


class Process:
    """One command, started again with the same arguments, environment and log."""

    def __init__(self, args: list[str], env: dict | None = None, log: Path | None = None,
                 cwd: Path | None = None):
        self.args, self.env, self.log, self.cwd = args, env, log, cwd
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> None:
        self.stop()   # what a dead predecessor left in its process group
        self.proc = procs.spawn(self.args, log=self.log, env=self.env, cwd=self.cwd)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        procs.stop(self.proc)

    def describe(self) -> str:
        if self.proc is None:
            return "was never started"
        where = f" (log: {self.log})" if self.log else ""
        return f"pid {self.proc.pid} {procs.exit_reason(self.proc.poll())}{where}"


@dataclass
class Supervisor:
    backoff: Backoff = field(default_factory=Backoff)
    _entries: list[_Entry] = field(default_factory=list)

    def add(self, name: str, child: Supervised) -> None:
        """Watch `child`, already started by the caller."""
        self._entries.append(_Entry(name, child, started_at=time.monotonic()))

    def names(self) -> list[str]:
        return [e.name for e in self._entries]

    def dead(self) -> list[tuple[str, str]]:
        """(name, how it ended) of each child that is not running now."""
        return [(e.name, e.child.describe()) for e in self._entries if not e.child.alive()]

    def check(self) -> None:
        """One round: notice deaths, schedule restarts, start the children that are due."""
        for entry in self._entries:
            now = time.monotonic()
            if entry.restart_at is None:
                if entry.child.alive():
                    continue
                uptime = now - entry.started_at
                if uptime >= self.backoff.reset_after:
                    entry.deaths = 0
                entry.deaths += 1
                delay = self.backoff.delay(entry.deaths)
                log.warning("%s: %s, after %.1f s up; restarting it in %g s",
                            entry.name, entry.child.describe(), uptime, delay)
                entry.restart_at = now + delay
            if now >= entry.restart_at:
                self._restart(entry)

    def _restart(self, entry: _Entry) -> None:
        try:
            entry.child.start()
        except Exception as exc:  # noqa: BLE001 - any failure: try again later
            entry.deaths += 1
            delay = self.backoff.delay(entry.deaths)
            log.warning("%s: did not start: %s; trying again in %g s", entry.name,
                        str(exc).splitlines()[0] if str(exc) else type(exc).__name__, delay)
            entry.restart_at = time.monotonic() + delay
            return
        entry.started_at = time.monotonic()
        entry.restart_at = None
        entry.restarts += 1
        log.info("%s: restarted (restart %d)", entry.name, entry.restarts)

    def run(self, stopping: threading.Event, interval: float = 0.5) -> None:
        """check() every `interval` until `stopping` is set."""
        while not stopping.wait(interval):
            self.check()

    def stop(self) -> None:
        """Stop every child, last added first; a failure to stop one stops no other."""
        for entry in reversed(self._entries):
            try:
                entry.child.stop()
            except Exception:  # noqa: BLE001 - the next ones must still be stopped
                log.exception("stopping %s failed", entry.name)
        self._entries.clear()
