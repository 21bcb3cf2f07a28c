"""runtime/supervisor.py with real (tiny) child processes: restart, backoff, leftovers,
stop. The whole stack under `sluice up` is tests/e2e/test_supervise.py."""
from __future__ import annotations

import logging
import os
import re
import sys
import threading

import pytest
from waiting import eventually

from control_plane.runtime import procs
from control_plane.runtime.supervisor import Backoff, Process, Supervisor

PY = sys.executable


def _py(code: str) -> list[str]:
    return [PY, "-c", code]


def test_backoff_doubles_and_is_capped():
    b = Backoff(initial=0.5, cap=3.0)
    assert [b.delay(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]


@pytest.fixture
def supervisor():
    sup = Supervisor(Backoff(initial=0.05, cap=0.2, reset_after=30))
    stopping = threading.Event()
    thread = threading.Thread(target=sup.run, args=(stopping, 0.02), daemon=True)
    yield sup, thread
    stopping.set()
    if thread.is_alive():
        thread.join(10)
    sup.stop()


def _delays(caplog, name: str) -> list[float]:
    return [float(m) for m in re.findall(rf"{name}: .*restarting it in ([0-9.]+) s",
                                         caplog.text)]


def test_a_dead_child_is_restarted_and_the_others_keep_running(supervisor, caplog, tmp_path):
    caplog.set_level(logging.INFO, "sluice.supervisor")
    sup, thread = supervisor
    steady = Process(_py("import time; time.sleep(600)"))
    victim = Process(_py("import time; time.sleep(600)"), log=tmp_path / "victim.log")
    for name, child in (("steady", steady), ("victim", victim)):
        child.start()
        sup.add(name, child)
    thread.start()
    steady_pid, old = steady.pid, victim.pid

    os.kill(old, 9)
    eventually(lambda: "victim: restarted" in caplog.text, timeout=10,
               message="the killed child is started again")
    assert victim.alive() and victim.pid != old
    assert steady.pid == steady_pid and steady.alive()
    assert f"victim: pid {old} was killed by SIGKILL" in caplog.text
    assert str(tmp_path / "victim.log") in caplog.text   # where to look
    assert "steady" not in caplog.text


def test_a_child_that_keeps_dying_waits_longer_each_time_up_to_the_cap(supervisor, caplog):
    caplog.set_level(logging.INFO, "sluice.supervisor")
    sup, thread = supervisor
    crasher = Process(_py("raise SystemExit(3)"))
    crasher.start()
    sup.add("crasher", crasher)
    thread.start()
    eventually(lambda: len(_delays(caplog, "crasher")) >= 5, timeout=20)
    assert _delays(caplog, "crasher")[:5] == [0.05, 0.1, 0.2, 0.2, 0.2]
    assert "crasher: pid" in caplog.text and "exited with 3" in caplog.text


def test_a_child_that_stayed_up_long_enough_starts_over_at_the_first_delay(caplog):
    caplog.set_level(logging.INFO, "sluice.supervisor")
    sup = Supervisor(Backoff(initial=0.05, cap=5, reset_after=0.2))
    stopping = threading.Event()
    # lives 0.6 s each time, longer than reset_after: never "dying in a row"
    child = Process(_py("import time; time.sleep(0.6)"))
    child.start()
    sup.add("flaky", child)
    thread = threading.Thread(target=sup.run, args=(stopping, 0.02), daemon=True)
    thread.start()
    try:
        eventually(lambda: len(_delays(caplog, "flaky")) >= 3, timeout=20)
    finally:
        stopping.set()
        thread.join(10)
        sup.stop()
    assert _delays(caplog, "flaky")[:3] == [0.05, 0.05, 0.05]


def test_what_a_dead_child_left_behind_goes_before_it_starts_again(supervisor):
    sup, thread = supervisor
    # the shell leaves a grandchild in its process group, then is killed from outside
    parent = Process(["sh", "-c", f"{PY} -c 'import time; time.sleep(600)' & wait"])
    parent.start()
    sup.add("parent", parent)
    leader = parent.pid
    grandchild = eventually(lambda: [p for p in procs.group_members(leader) if p != leader],
                            timeout=10)[0]
    thread.start()
    os.kill(leader, 9)
    eventually(lambda: parent.alive() and parent.pid != leader, timeout=10)
    eventually(lambda: procs.group_members(leader) == [], timeout=10,
               message="the orphaned grandchild is stopped")
    assert grandchild not in procs.group_members(parent.pid)


def test_stop_stops_every_child_last_first_and_leaves_nothing(caplog):
    order = []

    class Recorded(Process):
        def stop(self):
            if self.alive():
                order.append(self.args[-1])
            super().stop()

    sup = Supervisor()
    children = [Recorded(_py("import time; time.sleep(600)") + [name])
                for name in ("first", "second", "third")]
    for child in children:
        child.start()
        sup.add(child.args[-1], child)
    pids = [c.pid for c in children]
    sup.stop()
    assert order == ["third", "second", "first"]
    assert all(procs.group_members(pid) == [] for pid in pids)
    assert sup.names() == []


def test_a_child_that_cannot_start_is_tried_again(caplog, tmp_path):
    caplog.set_level(logging.INFO, "sluice.supervisor")
    flag = tmp_path / "may-start"

    class Guarded(Process):
        def start(self):
            if not flag.exists():
                raise RuntimeError("port 1234 is in use")
            super().start()

    sup = Supervisor(Backoff(initial=0.05, cap=0.1, reset_after=30))
    child = Guarded(_py("import time; time.sleep(600)"))
    sup.add("guarded", child)   # never started: found dead at the first check
    try:
        eventually(lambda: sup.check() or caplog.text.count("did not start") >= 2,
                   timeout=10)
        assert "guarded: did not start: port 1234 is in use; trying again in 0.1 s" \
            in caplog.text
        flag.touch()
        eventually(lambda: sup.check() or child.alive(), timeout=10)
    finally:
        sup.stop()
