"""The model-type map (brief 000's `model_type` -> a model or route) and the model's
output limit, through the admin API into the snapshot."""
from __future__ import annotations


def test_model_type_map_into_the_snapshot(api, make):
    model = make("model", name="sentiment-demo")
    r = api("post", "/model-types", json={"model_type": "nlp/sentiment",
                                          "target": "sentiment-demo"})
    assert r.status_code == 201, r.get_json()
    created = r.get_json()
    assert created["model_type"] == "nlp/sentiment" and created["target"] == "sentiment-demo"
    assert api("get", "/snapshot").get_json()["model_types"] == {
        "nlp/sentiment": "sentiment-demo"}
    assert [t["model_type"] for t in api("get", "/model-types").get_json()["items"]] == [
        "nlp/sentiment"]

    # a type maps to one target; a target must exist (a model or a route)
    r = api("post", "/model-types", json={"model_type": "nlp/sentiment", "target": "x"})
    assert r.status_code in (409, 422)
    r = api("post", "/model-types", json={"model_type": "cv/detection", "target": "nope"})
    assert r.status_code == 422 and "target" in r.get_json()["error"]["fields"]
    r = api("post", "/model-types", json={"model_type": "cv/detection"})
    assert r.status_code == 422 and "target" in r.get_json()["error"]["fields"]

    # a disabled model takes its types out of the snapshot
    api("patch", f"/models/{model['id']}", json={"enabled": False})
    assert api("get", "/snapshot").get_json()["model_types"] == {}
    api("patch", f"/models/{model['id']}", json={"enabled": True})
    r = api("delete", f"/model-types/{created['id']}")
    assert r.status_code == 204
    assert api("get", "/snapshot").get_json()["model_types"] == {}


def test_max_output_tokens_through_the_api_into_the_snapshot(api, make):
    model = make("model")
    assert model["max_output_tokens"] is None
    r = api("patch", f"/models/{model['id']}", json={"max_output_tokens": 4096})
    assert r.status_code == 200 and r.get_json()["max_output_tokens"] == 4096
    snap = api("get", "/snapshot").get_json()
    assert snap["models"][model["name"]]["max_output_tokens"] == 4096
    for bad in (0, -5, "many", 10**18):
        r = api("patch", f"/models/{model['id']}", json={"max_output_tokens": bad})
        assert r.status_code == 422 and "max_output_tokens" in r.get_json()["error"]["fields"]
    r = api("patch", f"/models/{model['id']}", json={"max_output_tokens": None})
    assert r.status_code == 200 and r.get_json()["max_output_tokens"] is None
