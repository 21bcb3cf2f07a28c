"""Models with `mask_pii`: e-mail addresses, phone, national ID and card numbers in
the request are masked before it reaches the backend (the demo backend echoes the
last user message, so the answer shows what it received)."""
from __future__ import annotations

import requests

SECRET = ("write to bob.smith@example.com, call +1 415 555 0100, "
          "SSN 123-45-6789, card 4111 1111 1111 1111")
MASKED = "write to <email>, call <phone>, SSN <national_id>, card <card>"


def _serve(gateway, helpers, backends):
    snap = helpers.make_snapshot(1, {
        "chat-demo": (5000, [backends["openai-a"].entry(1)]),
        "open-demo": (5000, [backends["openai-a"].entry(2)]),
    })
    snap["models"]["chat-demo"]["mask_pii"] = True
    r = gateway.push(snap)
    assert r.status_code == 200, r.text
    return gateway


def test_masked_for_a_model_with_mask_pii_only(gateway, helpers, backends):
    gw = _serve(gateway, helpers, backends)
    r = helpers.chat(gw, messages=[{"role": "user", "content": SECRET}], max_tokens=50,
                     seed=13912345678)   # a number that looks like a phone stays a number
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "echo: " + MASKED

    r = helpers.chat(gw, model="open-demo", messages=[{"role": "user", "content": SECRET}])
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "echo: " + SECRET


def test_masked_before_conversion(gateway, helpers, backends):
    gw = _serve(gateway, helpers, backends)
    r = requests.post(gw.url + "/api/v1/model/chat-demo/infer",
                      json={"input": "mail " + "me@corp.example" + " now"},
                      headers={"Authorization": f"Bearer {helpers.KEY}"}, timeout=10)
    assert r.status_code == 200, r.text
    assert r.json()["output"] == "echo: mail <email> now"
