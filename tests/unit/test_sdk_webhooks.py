"""sluice_client.verify_signature against signatures the control plane makes
(control_plane.services.webhooks.sign): the SDK and the sender agree."""
from __future__ import annotations

import time

from control_plane.services.webhooks import sign
from sluice_client import verify_signature

SECRET = "whsec_test-secret"
BODY = b'{"id":"job_1","status":"succeeded"}'


def test_a_fresh_signature_verifies():
    assert verify_signature(SECRET, sign(SECRET, BODY), BODY)
    assert verify_signature(SECRET, sign(SECRET, BODY), BODY.decode())


def test_a_changed_body_wrong_secret_or_old_signature_fails():
    header = sign(SECRET, BODY)
    assert not verify_signature(SECRET, header, BODY + b" ")
    assert not verify_signature("whsec_other", header, BODY)
    old = sign(SECRET, BODY, t=int(time.time()) - 301)
    assert not verify_signature(SECRET, old, BODY)
    assert verify_signature(SECRET, old, BODY, tolerance=600)
    future = sign(SECRET, BODY, t=int(time.time()) + 301)
    assert not verify_signature(SECRET, future, BODY)


def test_malformed_headers_are_false_not_errors():
    for header in (None, "", "garbage", "t=abc,v1=00", "v1=00", "t=1", "t=1,v1",
                   f"t={int(time.time())},v1=" + "0" * 64):
        assert verify_signature(SECRET, header, BODY) is False


def test_any_of_several_v1_signatures_may_match():
    good = sign(SECRET, BODY)
    t, v1 = good.split(",")
    assert verify_signature(SECRET, f"{t},v1={'0' * 64},{v1}", BODY)
