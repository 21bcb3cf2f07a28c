"""Models with `mask_pii`: e-mail addresses, phone, national ID and card numbers in
the request are masked before it reaches the backend (the demo backend echoes the
last user message, so the answer shows what it received). Models and consumers with a
`phi_policy` (docs/phi.md): personal and health data masked, blocked or counted by
class, in the request and in the answer (a scripted backend keeps what it received and
answers what the test says)."""
from __future__ import annotations

import json

import pytest
import requests
from backend_http import Backend, entry, served
from gateway_readings import access_lines, scrape
from waiting import eventually

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


# ---- phi_policy (docs/phi.md): personal and health data by class, both directions ----

SAID: list[dict] = []   # what the scripted backend received, newest last
REPLY = {"text": ""}    # what it answers next


class _Scripted(Backend):
    """An OpenAI chat backend that keeps each request and answers REPLY["text"]."""

    def do_POST(self):
        SAID.append(json.loads(self.read_body()))
        self.answer(200, json.dumps({
            "id": "c1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": REPLY["text"]}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }, ensure_ascii=False).encode())


@pytest.fixture(scope="module")
def scripted():
    with served(_Scripted) as port:
        yield port


def _phi(gateway, helpers, scripted, model, policy, consumer_policy=None):
    snap = helpers.make_snapshot(1, {model: (5000, [entry(1, "scripted", "openai", scripted)])})
    snap["models"][model]["phi_policy"] = policy
    if consumer_policy:
        snap["consumers"]["1"]["phi_policy"] = consumer_policy
    r = gateway.push(snap)
    assert r.status_code == 200, r.text
    SAID.clear()
    return gateway


def _ask(helpers, gw, model, text, reply=""):
    REPLY["text"] = reply
    return helpers.chat(gw, model=model, messages=[{"role": "user", "content": text}])


def _detections(gw, model, cls, direction, action):
    def counted():
        m = scrape(gw)
        found = [s.value for s in m.get("sluice_phi_detections_total", [])
                 if s.labels == {"model": model, "class": cls, "direction": direction,
                                 "action": action}]
        return found[0] if found else None
    return eventually(counted)


def test_phi_mask_in_the_request_same_value_same_placeholder(gateway, helpers, scripted):
    gw = _phi(gateway, helpers, scripted, "phi-mask", {"*": "mask"})
    text = ("SSN 123-45-6789, again 123-45-6789; call (415) 555-0100; "
            "身份证号 11010519491231002X，手机 13912345678，卡 6222021234567890128")
    r = _ask(helpers, gw, "phi-mask", text, reply="noted")
    assert r.status_code == 200, r.text
    sent = SAID[-1]["messages"][-1]["content"]
    assert sent == ("SSN [SSN_1], again [SSN_1]; call [PHONE_1]; "
                    "身份证号 [CN_ID_1]，手机 [MOBILE_1]，卡 [CARD_1]"), sent
    assert _detections(gw, "phi-mask", "ssn", "request", "mask") == 2
    line = access_lines(gw, 1)[-1]
    assert line["phi"] == "bank_card:1,cn_mobile:1,cn_resident_id:1,phone:1,ssn:2"
    assert "123-45-6789" not in json.dumps(line)


def test_phi_block_in_the_request_names_the_class(gateway, helpers, scripted):
    gw = _phi(gateway, helpers, scripted, "phi-block", {"ssn": "block", "*": "log"})
    r = _ask(helpers, gw, "phi-block", "my SSN is 123-45-6789")
    err = helpers.assert_error(r, 451, "policy_violation")
    assert "ssn" in err["message"] and "123-45-6789" not in err["message"]
    assert SAID == []   # it never left
    r = _ask(helpers, gw, "phi-block", "mail me at a.b@example.com", reply="ok")
    assert r.status_code == 200, r.text   # e-mail is only counted
    assert SAID[-1]["messages"][-1]["content"] == "mail me at a.b@example.com"
    assert _detections(gw, "phi-block", "email", "request", "log") == 1
    assert _detections(gw, "phi-block", "ssn", "request", "block") == 1


def test_phi_in_the_answer_masked_blocked_or_counted(gateway, helpers, scripted):
    gw = _phi(gateway, helpers, scripted, "phi-answer",
              {"email": "mask", "name": "mask", "ssn": "block", "ip": "log"})
    # the answer repeats the request's e-mail: the same placeholder both ways
    r = _ask(helpers, gw, "phi-answer", "I am bob@example.com",
             reply="Dr. Watson wrote to bob@example.com and carol@example.com from 10.1.2.3")
    assert r.status_code == 200, r.text
    assert SAID[-1]["messages"][-1]["content"] == "I am [EMAIL_1]"
    assert r.json()["choices"][0]["message"]["content"] == \
        "Dr. [NAME_1] wrote to [EMAIL_1] and [EMAIL_2] from 10.1.2.3"
    assert _detections(gw, "phi-answer", "ip", "answer", "log") == 1
    r = _ask(helpers, gw, "phi-answer", "what is on file?", reply="SSN 078-05-1120")
    err = helpers.assert_error(r, 451, "policy_violation")
    assert "answer" in err["message"] and "ssn" in err["message"]
    assert "078-05-1120" not in r.text


def test_phi_consumer_policy_overrides_the_model_s(gateway, helpers, scripted):
    gw = _phi(gateway, helpers, scripted, "phi-override", {"*": "block"},
              consumer_policy={"*": "log"})
    r = _ask(helpers, gw, "phi-override", "call (415) 555-0100", reply="ok")
    assert r.status_code == 200, r.text
    assert SAID[-1]["messages"][-1]["content"] == "call (415) 555-0100"
    assert _detections(gw, "phi-override", "phone", "request", "log") == 1


def test_phi_policy_with_an_unknown_class_is_refused_by_the_gateway(gateway, helpers, scripted):
    snap = helpers.make_snapshot(1, {"phi-bad": (5000, [entry(1, "s", "openai", scripted)])})
    snap["models"]["phi-bad"]["phi_policy"] = {"passport": "mask"}
    r = gateway.push(snap)
    assert r.status_code == 400 and "phi_policy.passport: unknown class" in r.text, r.text
