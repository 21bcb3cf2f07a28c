"""services/jwks_sync.merge: what a fetch of an issuer's jwks_uri does to its keys."""
from __future__ import annotations

from control_plane.services.jwks_sync import merge

A = {"kid": "a", "alg": "RS256", "pem": "PEM-A"}
B = {"kid": "b", "alg": "RS256", "pem": "PEM-B"}


def test_a_new_key_joins_and_a_departed_one_retires_for_the_grace():
    assert merge([A], [], [A, B], 100.0, 600) == ([A, B], [])
    keys, retired = merge([A, B], [], [B], 100.0, 600)
    assert keys == [B] and retired == [{**A, "until": 700.0}]
    # the grace is counted from the first fetch that missed it, not the latest
    assert merge([B], retired, [B], 650.0, 600) == ([B], retired)
    assert merge([B], retired, [B], 701.0, 600) == ([B], [])


def test_a_retired_key_that_comes_back_is_current_again():
    assert merge([B], [{**A, "until": 700.0}], [A, B], 200.0, 600) == ([A, B], [])


def test_a_failed_fetch_keeps_the_keys_but_still_ends_graces():
    retired = [{**A, "until": 700.0}]
    assert merge([B], retired, None, 200.0, 600) == ([B], retired)
    assert merge([B], retired, None, 800.0, 600) == ([B], [])
