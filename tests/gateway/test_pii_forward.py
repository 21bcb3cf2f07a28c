"""Models with `mask_pii`: e-mail addresses, phone, national ID and card numbers in
the request are masked before it reaches the backend (the demo backend echoes the
last user message, so the answer shows what it received). Models and consumers with a
`phi_policy` (docs/phi.md): personal and health data masked, blocked or counted by
class, in the request and in the answer (a scripted backend keeps what it received and
answers what the test says)."""
from __future__ import annotations

import json
import time

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
    """An OpenAI chat backend that keeps each request and answers REPLY["text"]; a
    stream answers REPLY["pieces"], one chunk each, every event written in two halves
    a moment apart (so frames split events, and events split values)."""

    def do_POST(self):
        SAID.append(json.loads(self.read_body()))
        if SAID[-1].get("stream"):
            return self._stream()
        self.answer(200, json.dumps({
            "id": "c1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": REPLY["text"]}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }, ensure_ascii=False).encode())


    def _stream(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        events = [{"role": "assistant", "content": ""}] + [{"content": p} for p in REPLY["pieces"]]
        for i, delta in enumerate(events):
            body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
            raw = b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"
            chunk(raw[:len(raw) // 2])
            time.sleep(0.02)
            chunk(raw[len(raw) // 2:])
        end = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
               "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        chunk(b"data: " + json.dumps(end).encode() + b"\n\ndata: [DONE]\n\n")
        chunk(b"")


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
    line = eventually(lambda: next((x for x in access_lines(gw, 1, timeout=0.5)
                                    if x["model"] == "phi-mask"), None))
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


def _streamed(helpers, gw, model, pieces):
    """The content the caller gets from a stream of `pieces`, and the raw events."""
    REPLY["pieces"] = pieces
    r = helpers.chat(gw, model=model, stream=True,
                     messages=[{"role": "user", "content": "tell me"}])
    assert r.status_code == 200, r.text
    text, events = "", []
    for line in r.content.decode().split("\n"):
        if line.startswith("data: ") and line != "data: [DONE]":
            ev = json.loads(line[6:])
            events.append(ev)
            if "choices" in ev:
                text += ev["choices"][0]["delta"].get("content") or ""
    return text, events


def test_phi_in_a_stream_across_frames(gateway, helpers, scripted):
    gw = _phi(gateway, helpers, scripted, "phi-stream", {"ssn": "block", "*": "mask"})
    # values split across events: "(415) 55" | "5-0100", a keyword in one and its value
    # in the next, a Chinese ID over three events, the same e-mail twice
    pieces = ["Call Dr. Watson at (415) 55", "5-0100 or write a@b.io. MRN:", " 00451234. ",
              "身份证号 1101051949", "1231", "002X，a@b.io", " thanks"]
    text, events = _streamed(helpers, gw, "phi-stream", pieces)
    assert text == ("Call Dr. [NAME_1] at [PHONE_1] or write [EMAIL_1]. MRN: [MRN_1]. "
                    "身份证号 [CN_ID_1]，[EMAIL_1] thanks"), text
    assert events[-1]["choices"][0]["finish_reason"] == "stop"
    assert _detections(gw, "phi-stream", "email", "answer", "mask") == 2
    # a blocked class ends the stream with the error template, the value never sent
    text, events = _streamed(helpers, gw, "phi-stream", ["your SSN is 078-", "05-1120 ok"])
    assert "078" not in text and "1120" not in json.dumps(events)
    assert events[-1]["error"]["code"] == 451 and "ssn" in events[-1]["error"]["message"]
