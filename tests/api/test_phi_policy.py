"""Personal and health data policies in the admin API (docs/phi.md): a model's and a
consumer's `phi_policy` checked at save (an unknown class or action refused, naming
it), stored, and pushed in the snapshot; GET /phi-classes lists the classes."""
from __future__ import annotations

from control_plane.services.phi_classes import NAMES


def test_classes_are_listed_with_their_detectors(api):
    r = api("get", "/phi-classes")
    assert r.status_code == 200
    items = r.get_json()["items"]
    assert [c["name"] for c in items] == list(NAMES)
    by_name = {c["name"]: c for c in items}
    assert len([c for c in items if c["hipaa"]]) == 18
    assert {"cn_resident_id", "cn_mobile", "bank_card"} <= set(by_name)
    assert by_name["name"]["approximate"] and by_name["name"]["how"]
    assert not by_name["cn_resident_id"]["approximate"]
    assert "MOD 11-2" in by_name["cn_resident_id"]["detector"]
    assert "Luhn" in by_name["bank_card"]["detector"]


def test_a_policy_is_stored_and_pushed(api, make):
    policy = {"ssn": "block", "phone": "log", "*": "mask"}
    model = make("model", name="phi-m", phi_policy=policy)
    assert model["phi_policy"] == policy
    plain = make("model", name="phi-plain")
    assert plain["phi_policy"] is None
    consumer = make("consumer", name="phi-c", phi_policy={"*": "log"})
    assert consumer["phi_policy"] == {"*": "log"}
    snap = api("get", "/snapshot").get_json()
    assert snap["models"]["phi-m"]["phi_policy"] == policy
    assert "phi_policy" not in snap["models"]["phi-plain"]
    assert snap["consumers"][str(consumer["id"])]["phi_policy"] == {"*": "log"}
    r = api("patch", f"/models/{model['id']}", json={"phi_policy": None})
    assert r.status_code == 200, r.get_json()
    assert "phi_policy" not in api("get", "/snapshot").get_json()["models"]["phi-m"]


def test_an_unknown_class_or_action_is_refused_with_the_reason(api, make):
    cases = [({"passport": "mask"}, "unknown class 'passport'"),
             ({"ssn": "redact"}, "unknown action 'redact'"),
             ({}, "at least one class"),
             (["ssn"], "must be null or an object")]
    for bad, reason in cases:
        r = api("post", "/models", json={"name": "phi-bad", "phi_policy": bad})
        assert r.status_code == 422, r.get_json()
        fields = r.get_json()["error"]["fields"]
        assert list(fields) == ["phi_policy"] and reason in fields["phi_policy"], fields
    consumer = make("consumer", name="phi-c2")
    r = api("patch", f"/consumers/{consumer['id']}", json={"phi_policy": {"*": "erase"}})
    assert r.status_code == 422 and "phi_policy" in r.get_json()["error"]["fields"]
