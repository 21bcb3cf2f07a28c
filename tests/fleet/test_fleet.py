"""A fleet across hosts (network namespaces, see fleet_harness.py): three gateways
behind a load balancer, the control plane on a host of its own, the controller
pushing to the gateways' internal listeners over the network.

Each scenario prints its counts (`pytest -s` shows them; CI logs keep them)."""
from __future__ import annotations

import signal
import time

import requests

from fleet_traffic import Load, chat, chat_model
from waiting import eventually


def test_every_gateway_serves_the_current_version_through_the_balancer(healthy_fleet,
                                                                       report):
    fleet = healthy_fleet
    demo = chat_model(fleet, "chat-fleet")
    version = fleet.admin.config_version()
    for gw in fleet.gateway_hosts:
        eventually(lambda: gw.served_version() >= version, timeout=15,
                   message=f"{gw.name} serving {version}")
        assert chat(gw.url, demo).status_code == 200, gw.name
    answered = {chat(fleet.lb_url, demo).headers["X-Fleet-Upstream"] for _ in range(9)}
    report(f"version {version} on {len(fleet.gateway_hosts)} gateways; "
          f"the balancer used {sorted(answered)}")
    assert answered == {f"{gw.addr}:8000" for gw in fleet.gateway_hosts}


def test_a_listed_gateway_joins_and_receives_the_current_snapshot(healthy_fleet, report):
    """A fourth gateway host: its gateway answers 503 until it has a snapshot; added to
    the controller's static list (SLUICE_GATEWAYS in its SLUICE_CONFIG file, SIGHUP),
    it gets the current version at once. Statically listed gateways keep working
    beside self-registration (issue 12), so this stays true after membership."""
    fleet = healthy_fleet
    demo = chat_model(fleet, "chat-join-static")
    version = fleet.admin.config_version()
    spare = fleet.gateway(fleet.spare)
    fleet.start_gateway(fleet.spare)
    try:
        before = chat(spare.url, demo).status_code
        assert spare.served_version() == 0 and before == 503, before
        fleet.list_gateways(fleet.gateway_names + [fleet.spare])
        started = time.monotonic()
        fleet.children["controller1"].send_signal(signal.SIGHUP)
        eventually(lambda: spare.served_version() >= version, timeout=20,
                   message=f"{fleet.spare} receiving version {version}")
        took = time.monotonic() - started
        assert chat(spare.url, demo).status_code == 200
        report(f"{fleet.spare} joined: answered {before} without a snapshot, served "
              f"version {version} {took:.1f} s after the controller's SIGHUP")
    finally:
        fleet.list_gateways(fleet.gateway_names)
        fleet.children["controller1"].send_signal(signal.SIGHUP)
        for row in fleet.admin.list("gateways"):
            if row["internal_url"] == spare.internal_url:
                fleet.admin.delete("gateways", row["id"])
        fleet.kill(fleet.spare, signal.SIGTERM)


def test_gateway_cut_off_from_the_balancer_under_load(healthy_fleet, report):
    """Unplug gw2 while 8 callers go through the balancer: the requests it held and
    those sent to it next time out or fail to connect and are retried on another
    gateway, so callers see (almost) nothing."""
    fleet = healthy_fleet
    demo = chat_model(fleet, "chat-cut")
    version = fleet.admin.config_version()
    for gw in fleet.gateway_hosts:
        eventually(lambda: gw.served_version() >= version, timeout=15)
    victim = fleet.gateway("gw2")
    victim_addr = f"{victim.addr}:8000"
    with Load(fleet.lb_url, demo, threads=8) as load:
        eventually(lambda: load.summary()["answered_by"].get(victim_addr, 0) >= 100,
                   timeout=30, message="gw2 took its share before the cut")
        before = load.total
        fleet.net.link("gw2", up=False)
        cut_at = time.monotonic()
        eventually(lambda: load.total >= before + 2000, timeout=60,
                   message="2000 requests after the cut")
    fleet.net.link("gw2", up=True)
    whole, after = load.summary(), load.summary(since=cut_at)
    report(f"cut gw2 under load: {load.describe()}; of them started after the cut: "
           f"{load.describe(since=cut_at)}")
    assert whole["not_200"] < 0.001 * whole["total"], whole
    assert after["retried"] >= 1, "no request was retried: the cut was not exercised"
    # after the cut, gw2 answered nothing that was sent to it later than the
    # balancer's timeouts (500 ms connect, 3 s read)
    late = [a for a in load.answers if a.started > cut_at + 0.5
            and a.upstreams and a.upstreams[-1] == victim_addr]
    assert not late, late[:3]


def test_gateway_partitioned_from_the_control_plane(healthy_fleet, report):
    """gw3 loses the control-plane host: it keeps serving on the snapshot it has, the
    API shows it behind (acknowledged version, last error), and it catches up on
    the change it missed once the partition heals."""
    fleet = healthy_fleet
    demo = chat_model(fleet, "chat-split")
    before = fleet.admin.config_version()
    gw3 = fleet.gateway("gw3")
    for gw in fleet.gateway_hosts:
        eventually(lambda: gw.served_version() >= before, timeout=15)

    fleet.net.partition("gw3", "cp")
    late = chat_model(fleet, "chat-late")      # a change gw3 cannot receive
    after = fleet.admin.config_version()
    assert after > before
    for gw in fleet.gateway_hosts:
        if gw.name != "gw3":
            eventually(lambda: gw.served_version() >= after, timeout=20,
                       message=f"{gw.name} serving {after} during the partition")
            assert chat(gw.url, late).status_code == 200

    def behind_in_api():
        [row] = [g for g in fleet.admin.list("gateways") if g["internal_url"] == gw3.internal_url]
        return row["last_error"] and row["acked_version"] < after and row
    row = eventually(behind_in_api, timeout=20, message="the API showing gw3 behind")
    statuses = [chat(gw3.url, demo).status_code for _ in range(50)]
    unknown = chat(gw3.url, demo, model="chat-late")   # a model it never heard of
    report(f"partitioned gw3: serves version {gw3.served_version()} of {after}; "
          f"{statuses.count(200)}/50 answered 200 on its snapshot; the model it missed: "
          f"{unknown.status_code}; API: acked {row['acked_version']}, "
          f"last_error {row['last_error'][:80]!r}")
    assert statuses == [200] * 50
    assert gw3.served_version() < after
    assert unknown.status_code == 404, unknown.text

    fleet.net.heal()
    healed = time.monotonic()
    eventually(lambda: gw3.served_version() >= after, timeout=40,
               message="gw3 catching up after the partition")
    caught_up = time.monotonic() - healed
    assert chat(gw3.url, late).status_code == 200
    report(f"gw3 caught up on version {after} {caught_up:.1f} s after the partition healed")

    def in_step_in_api():   # the controller records the acknowledgement after the push
        [row] = [g for g in fleet.admin.list("gateways") if g["internal_url"] == gw3.internal_url]
        return row["acked_version"] >= after and row["last_error"] is None
    eventually(in_step_in_api, timeout=10, message="the API showing gw3 in step again")


def test_cluster_limits_stay_exact_across_three_gateways(healthy_fleet, report):
    """One Redis on the control-plane host counts for every gateway: a daily quota and
    a token bucket admit exactly their numbers, whichever gateway a request hits."""
    fleet = healthy_fleet
    quota = chat_model(fleet, "chat-quota", plan={"rate_per_second": 1000,
                                                  "daily_requests": 60})
    bucket = chat_model(fleet, "chat-bucket", plan={"rate_per_second": 0.01, "burst": 45})
    version = fleet.admin.config_version()
    for gw in fleet.gateway_hosts:
        eventually(lambda: gw.served_version() >= version, timeout=15)

    for demo, limit in ((quota, 60), (bucket, 45)):
        with Load(fleet.lb_url, demo, threads=6) as load:
            eventually(lambda: load.summary()["statuses"].get(429, 0) >= 60, timeout=30,
                       message=f"{demo['model']}: refusals past the limit")
        s = load.summary()
        report(f"{demo['model']} (limit {limit}) over 3 gateways: {load.describe()}")
        assert s["statuses"].get(200) == limit, s
        assert set(s["statuses"]) == {200, 429}, s
        assert len(s["answered_by"]) == 3, s    # every gateway admitted some
    [key] = fleet.redis("KEYS", f"sluice:qd:{quota['consumer_id']}:*")
    assert fleet.redis("GET", key) == "60"


def test_a_restarted_gateway_serves_its_last_known_good_snapshot_then_catches_up(
        healthy_fleet, report):
    """gw1 restarts while cut off from the control plane: it comes back on the
    snapshot file it wrote (source "lkg") and serves, then takes the version it
    missed once the control plane reaches it again."""
    fleet = healthy_fleet
    demo = chat_model(fleet, "chat-restart")
    before = fleet.admin.config_version()
    gw1 = fleet.gateway("gw1")
    eventually(lambda: gw1.served_version() >= before, timeout=15)

    fleet.net.partition("gw1", "cp")
    fleet.kill("gw1", signal.SIGTERM)
    late = chat_model(fleet, "chat-restart-late")
    after = fleet.admin.config_version()
    fleet.start_gateway("gw1")
    status = snapshot_status(gw1)
    statuses = [chat(gw1.url, demo).status_code for _ in range(30)]
    report(f"gw1 restarted cut off from the control plane: source {status['source']!r}, "
          f"version {status['version']} of {after}; {statuses.count(200)}/30 answered 200")
    assert status["source"] == "lkg" and before <= status["version"] < after, status
    assert statuses == [200] * 30

    fleet.net.heal()
    eventually(lambda: gw1.served_version() >= after, timeout=40,
               message="gw1 catching up after its restart")
    assert chat(gw1.url, late).status_code == 200


def snapshot_status(gw) -> dict:
    r = requests.get(gw.internal_url + "/internal/snapshot", timeout=2,
                     headers={"Authorization": f"Bearer {gw.token}"})
    r.raise_for_status()
    return r.json()


def test_postgres_down_the_fleet_keeps_serving(healthy_fleet, report):
    """PostgreSQL stops under load: callers notice nothing, the admin API says 503
    database_unavailable (and its /readyz fails), and once it is back a change made
    through the API reaches every gateway again."""
    fleet = healthy_fleet
    demo = chat_model(fleet, "chat-nodb")
    version = fleet.admin.config_version()
    for gw in fleet.gateway_hosts:
        eventually(lambda: gw.served_version() >= version, timeout=15)
    api_root = fleet.admin_url.rsplit("/api/v1", 1)[0]

    def config_status() -> requests.Response:
        return requests.get(fleet.admin_url + "/config", timeout=10,
                            headers={"Authorization": f"Bearer {fleet.admin_token}"})

    with Load(fleet.lb_url, demo, threads=4) as load:
        eventually(lambda: load.total >= 100, timeout=30)
        fleet.stop_postgres()
        stopped = time.monotonic()
        try:
            eventually(lambda: config_status().status_code == 503, timeout=20,
                       message="the API answering 503 without its database")
            r = config_status()
            ready = requests.get(api_root + "/readyz", timeout=10).status_code
            eventually(lambda: load.summary(since=stopped)["total"] >= 300, timeout=30)
        finally:
            fleet.start_postgres()
    during = load.summary(since=stopped)
    report(f"PostgreSQL down: API {r.status_code} {r.json()['error']['type']}, /readyz "
          f"{ready}; through the balancer meanwhile and after: {load.describe(since=stopped)}")
    assert r.json()["error"]["type"] == "database_unavailable" and ready == 503
    assert during["not_200"] == 0, during

    eventually(lambda: config_status().status_code == 200, timeout=30,
               message="the API answering again")
    late = chat_model(fleet, "chat-nodb-after")
    after = fleet.admin.config_version()
    for gw in fleet.gateway_hosts:
        eventually(lambda: gw.served_version() >= after, timeout=30,
                   message=f"{gw.name} on version {after} after PostgreSQL came back")
        assert chat(gw.url, late).status_code == 200
