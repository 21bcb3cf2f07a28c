"""Nothing is lost (issue 14): a worker SIGKILLed mid-job, RabbitMQ killed and
restarted, PostgreSQL restarted — every accepted job ends exactly once: one final
status, one webhook delivery, its id at the receiver."""
from __future__ import annotations

import shutil
import signal
import tempfile
from pathlib import Path

import pytest
import requests

from control_plane.runtime import migrate
from control_plane.runtime import postgres
from control_plane.runtime.rabbitmq import Broker
from jobs_harness import Receiver, job, job_env, start_worker, submit
from waiting import eventually

N = 8


def _setup(stack, amqp_url: str, latency_ms: int,
           timeout_ms: int = 3000) -> tuple[str, Receiver]:
    gw = stack.new_gateway("gw1")
    stack.extra_env.update(job_env(amqp_url, gw.url))
    stack.extra_env["SLUICE_JOB_LEASE_S"] = "4"
    stack.write_config([gw])
    stack.start_api()
    stack.start_controller()
    url = stack.start_backend("slow", latency_ms=latency_ms)
    admin = stack.admin
    model = admin.create("models", name="chat-demo", timeout_ms=timeout_ms)
    admin.create("backends", name="slow", model_id=model["id"], url=url, protocol="openai")
    consumer = admin.create("consumers", name="alice")
    key = admin.create("keys", consumer_id=consumer["id"], name="ci")["key"]
    r = requests.post(f"{stack.admin_url}/consumers/{consumer['id']}/webhook-secret",
                      headers={"Authorization": f"Bearer {stack.admin_token}"}, timeout=10)
    assert r.status_code == 201
    stack.wait_served()
    return key, Receiver()


def _submit(stack, key: str, receiver: Receiver, n: int) -> list[str]:
    ids = []
    for i in range(n):
        r = submit(stack.gateway.url, key, f"job {i}",
                   headers={"X-Sluice-Callback-Url": receiver.url})
        assert r.status_code == 202, r.text
        ids.append(r.json()["id"])
    return ids


def _all_ended_once(stack, key: str, receiver: Receiver, ids: list[str],
                    timeout: float = 60) -> None:
    def ended():
        return all(job(stack.gateway.url, key, i).json()["status"] == "succeeded"
                   for i in ids)

    try:
        eventually(ended, timeout=timeout, interval=0.2, message="every job succeeded")
    except AssertionError:
        states = {i: {k: v for k, v in job(stack.gateway.url, key, i).json().items()
                      if k in ("status", "attempts", "error")} for i in ids}
        logs = "".join((stack.tmp / f"{n}.log").read_text()[-3000:]
                       for n in ("worker", "worker2", "api") if (stack.tmp / f"{n}.log").exists())
        raise AssertionError(f"{states}\n{logs}") from None
    eventually(lambda: {j["id"] for j in receiver.jobs()} == set(ids), timeout=30,
               message="every job's webhook arrived")
    auth = {"Authorization": f"Bearer {stack.admin_token}"}
    for i in ids:
        deliveries = requests.get(f"{stack.admin_url}/webhook-deliveries", timeout=10,
                                  params={"job": i}, headers=auth).json()["items"]
        assert len(deliveries) == 1, (i, deliveries)   # the job ended once
    # each job's final answer, once; nothing but our jobs arrived
    assert all(j["status"] == "succeeded" for j in receiver.jobs())
    assert {j["id"] for j in receiver.jobs()} <= set(ids)


@pytest.fixture
def own_broker():
    top = Path(tempfile.mkdtemp(prefix="sluice-test-rmq-"))
    broker = Broker(top)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
        shutil.rmtree(top, ignore_errors=True)


def test_a_worker_killed_mid_job(bare_stack, amqp_url):
    stack = bare_stack
    key, receiver = _setup(stack, amqp_url, latency_ms=400)
    try:
        start_worker(stack)
        ids = _submit(stack, key, receiver, N)
        eventually(lambda: any(job(stack.gateway.url, key, i).json()["status"] == "running"
                               for i in ids), timeout=20)
        stack.children["worker"].send_signal(signal.SIGKILL)
        stack.children.pop("worker").wait(5)
        start_worker(stack, "worker2")
        _all_ended_once(stack, key, receiver, ids)
        attempts = [job(stack.gateway.url, key, i).json()["attempts"] for i in ids]
        assert max(attempts) >= 2   # the job in hand was taken over
    finally:
        receiver.close()


def test_rabbitmq_killed_and_restarted(bare_stack, own_broker):
    stack = bare_stack
    key, receiver = _setup(stack, own_broker.url, latency_ms=200)
    try:
        start_worker(stack)
        ids = _submit(stack, key, receiver, N)
        eventually(lambda: any(job(stack.gateway.url, key, i).json()["status"] != "queued"
                               for i in ids), timeout=20)
        own_broker.kill()   # SIGKILL: an outage, not a shutdown
        # accepted while the broker is down: stored, enqueued once it is back
        ids += _submit(stack, key, receiver, 3)
        own_broker.start()
        _all_ended_once(stack, key, receiver, ids)
    finally:
        receiver.close()


def test_postgresql_restarted(bare_stack, amqp_url):
    stack = bare_stack
    top = Path(tempfile.mkdtemp(prefix="sluice-test-pg-"))
    top.chmod(0o755)
    cluster = postgres.Cluster(top / "data")
    cluster.init()
    cluster.start()
    try:
        stack.db_url = cluster.create_database("sluice")
        migrate.upgrade(stack.db_url)
        key, receiver = _setup(stack, amqp_url, latency_ms=300)
        try:
            start_worker(stack)
            ids = _submit(stack, key, receiver, N)
            eventually(lambda: any(job(stack.gateway.url, key, i).json()["status"] != "queued"
                                   for i in ids), timeout=20)
            cluster.stop()
            # while it is down nothing is accepted, and the caller is told so
            r = submit(stack.gateway.url, key, "refused")
            assert r.status_code == 503, r.text
            assert r.json()["error"]["type"] == "database_unavailable"
            cluster.start()
            _all_ended_once(stack, key, receiver, ids)
        finally:
            receiver.close()
    finally:
        stack.teardown()
        cluster.stop()
        shutil.rmtree(top, ignore_errors=True)


def test_a_job_longer_than_the_brokers_heartbeat_runs_once(bare_stack, amqp_url):
    """A model that answers after several heartbeat intervals: the worker keeps its
    broker connection alive meanwhile, so the job is not handed to anyone else."""
    stack = bare_stack
    key, receiver = _setup(stack, amqp_url + "?heartbeat=1", latency_ms=9000,
                           timeout_ms=15000)
    try:
        stack.extra_env["SLUICE_JOB_LEASE_S"] = "30"
        start_worker(stack)
        start_worker(stack, "worker2")   # would take the job over if the first lost it
        ids = _submit(stack, key, receiver, 2)
        _all_ended_once(stack, key, receiver, ids, timeout=40)
        assert [job(stack.gateway.url, key, i).json()["attempts"] for i in ids] == [1, 1]
        # and no worker lost its broker connection meanwhile
        for name in ("worker", "worker2"):
            log = (stack.tmp / f"{name}.log").read_text()
            assert "job queue unavailable" not in log, log[-2000:]
    finally:
        receiver.close()
