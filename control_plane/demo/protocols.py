"""The demo backends' other protocols, each with its own request, answer and error shape.

- ``kserve_v2`` (KServe / Triton Open Inference Protocol v2):
  ``POST /v2/models/{m}/infer`` with tensors ``{"name", "shape", "datatype", "data"}``;
  BYTES inputs answer two tensors, ``label`` (BYTES) and ``score`` (FP64), one row per
  input; numeric inputs answer ``sum`` (FP64, the sum of each row).
  ``POST /v2/models/{m}/generate`` ``{"text_input": t}`` answers
  ``{"model_name": m, "text_output": "v2: " + t}``; ``/generate_stream`` sends the same
  words as SSE events ``data: {"model_name": m, "text_output": <word>}`` (no [DONE],
  as Triton). Errors: ``{"error": "..."}``.
- ``tfserving`` (TensorFlow Serving REST): ``POST /v1/models/{m}:predict``
  ``{"instances": [...]}`` answers ``{"predictions": [...]}``. Errors: ``{"error": "..."}``.
- ``vendor-a``: ``POST /generate`` ``{"text": t}`` answers
  ``{"result": {"text": "A: " + t}, "tokens": n}``. Errors: ``{"err": {"msg": "..."}}``.
- ``vendor-b``: ``POST /api/infer`` ``{"content": t, "lang": "cn"}`` (any other
  ``lang`` is a 400) answers ``{"code": 0, "msg": "ok", "data": {"answer": "B[cn]: " + t}}``.
  Errors: ``{"code": 1001, "msg": "..."}`` with an HTTP error status.

The OpenAI protocol's ``/v1/completions`` and ``/v1/embeddings`` live here too.
"""
from __future__ import annotations

import json
import re
import time
import uuid
import zlib

EXTRA_PROTOCOLS = ("kserve_v2", "tfserving", "vendor-a", "vendor-b")
V2_PATH = re.compile(r"^/v2/models/([^/]+)/(infer|generate|generate_stream)$")
TF_PATH = re.compile(r"^/v1/models/([^/:]+):predict$")
WORD = re.compile(r"\S+\s*")
EMBEDDING_DIM = 8
LABELS = ("negative", "neutral", "positive")


class BadRequest(Exception):
    """The request body is not what the endpoint accepts (answered 400)."""


def error_body(protocol: str, status: int, message: str):
    """An error in `protocol`'s own shape, or None for the protocols backends.py owns."""
    if protocol in ("kserve_v2", "tfserving"):
        return {"error": message}
    if protocol == "vendor-a":
        return {"err": {"msg": message, "status": status}}
    if protocol == "vendor-b":
        return {"code": 1000 + status, "msg": message}
    return None


def route(protocol: str, path: str):
    """The handler for POST `path` on a `protocol` backend, as (function, match) or None."""
    if protocol == "kserve_v2":
        m = V2_PATH.match(path)
        if m:
            return {"infer": v2_infer, "generate": v2_generate,
                    "generate_stream": v2_generate_stream}[m.group(2)], m
    elif protocol == "tfserving":
        m = TF_PATH.match(path)
        if m:
            return tf_predict, m
    elif protocol == "vendor-a" and path == "/generate":
        return vendor_a, None
    elif protocol == "vendor-b" and path == "/api/infer":
        return vendor_b, None
    elif protocol == "openai" and path == "/v1/completions":
        return completions, None
    elif protocol == "openai" and path == "/v1/embeddings":
        return embeddings, None
    return None


def _object(body) -> dict:
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    return body


def _string(body: dict, field: str) -> str:
    value = body.get(field)
    if not isinstance(value, str):
        raise BadRequest(f"'{field}' must be a string")
    return value


def prediction(item) -> dict:
    """A deterministic fake prediction for one input.

    ``length`` is the length of a string or list (else of its JSON text); ``label``
    and ``score`` come from a CRC32 of the input's canonical JSON.
    """
    canonical = json.dumps(item, sort_keys=True, ensure_ascii=False)
    digest = zlib.crc32(canonical.encode("utf-8"))
    length = len(item) if isinstance(item, (str, list, dict)) else len(canonical)
    return {"length": length, "label": LABELS[digest % len(LABELS)],
            "score": round((digest % 1000) / 1000, 3)}


# ---- kserve_v2 ------------------------------------------------------------------------

def _rows(tensor) -> list:
    if not isinstance(tensor, dict) or not isinstance(tensor.get("data"), list) or \
            not isinstance(tensor.get("shape"), list) or not tensor["shape"]:
        raise BadRequest("a tensor needs 'name', 'shape', 'datatype' and 'data'")
    data, shape = tensor["data"], tensor["shape"]
    n = shape[0]
    if not isinstance(n, int) or n < 1:
        raise BadRequest("shape[0] must be a positive integer")
    if len(shape) == 1:
        if len(data) != n:
            raise BadRequest("data does not fit the shape")
        return data
    size = len(data) // n
    if size * n != len(data):
        raise BadRequest("data does not fit the shape")
    return [data[i * size:(i + 1) * size] for i in range(n)]


def v2_infer(handler, match, body) -> None:
    body = _object(body)
    inputs = body.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise BadRequest("'inputs' must be a non-empty list of tensors")
    tensor = inputs[0]
    rows = _rows(tensor)
    if tensor.get("datatype") == "BYTES":
        preds = [prediction(x) for x in rows]
        outputs = [{"name": "label", "datatype": "BYTES", "shape": [len(rows)],
                    "data": [p["label"] for p in preds]},
                   {"name": "score", "datatype": "FP64", "shape": [len(rows)],
                    "data": [p["score"] for p in preds]}]
    else:
        sums = [sum(r) if isinstance(r, list) else r for r in rows]
        if not all(isinstance(x, (int, float)) for x in sums):
            raise BadRequest("numeric tensors must hold numbers")
        outputs = [{"name": "sum", "datatype": "FP64", "shape": [len(rows)], "data": sums}]
    handler._send_json(200, {"model_name": match.group(1), "id": body.get("id", ""),
                             "outputs": outputs})


def v2_generate(handler, match, body) -> None:
    text = _string(_object(body), "text_input")
    handler._send_json(200, {"model_name": match.group(1), "text_output": "v2: " + text})


def v2_generate_stream(handler, match, body) -> None:
    text = _string(_object(body), "text_input")
    events = [{"model_name": match.group(1), "text_output": w}
              for w in WORD.findall("v2: " + text)]
    _stream(handler, events, done=False)


def _stream(handler, events, done: bool) -> None:
    delay = handler._header_number("X-Demo-Chunk-Delay-Ms", handler.server.chunk_delay_ms)
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream; charset=utf-8")
    handler.send_header("Transfer-Encoding", "chunked")
    handler._demo_headers()
    handler.end_headers()
    for i, event in enumerate(events):
        if i and delay:
            time.sleep(delay / 1000.0)
        handler._write_chunk(b"data: " + json.dumps(event, ensure_ascii=False)
                             .encode("utf-8") + b"\n\n")
    if done:
        handler._write_chunk(b"data: [DONE]\n\n")
    handler.wfile.write(b"0\r\n\r\n")
    handler.wfile.flush()


# ---- tfserving -------------------------------------------------------------------------

def tf_predict(handler, match, body) -> None:
    instances = _object(body).get("instances")
    if not isinstance(instances, list) or not instances:
        raise BadRequest("'instances' must be a non-empty list")
    handler._send_json(200, {"predictions": [prediction(x) for x in instances]})


# ---- vendors ---------------------------------------------------------------------------

def vendor_a(handler, match, body) -> None:
    text = _string(_object(body), "text")
    answer = "A: " + text
    handler._send_json(200, {"result": {"text": answer}, "tokens": len(answer.split())})


def vendor_b(handler, match, body) -> None:
    body = _object(body)
    content = _string(body, "content")
    if body.get("lang") != "cn":
        raise BadRequest("unsupported lang: only 'cn'")
    handler._send_json(200, {"code": 0, "msg": "ok",
                             "data": {"answer": "B[cn]: " + content}})


# ---- openai extras ---------------------------------------------------------------------

def _texts(value, field: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(x, str) for x in value):
        return value
    raise BadRequest(f"'{field}' must be a string or a non-empty list of strings")


def completions(handler, match, body) -> None:
    body = _object(body)
    prompts = _texts(body.get("prompt"), "prompt")
    answers = ["echo: " + p for p in prompts]
    prompt_tokens = sum(len(p.split()) for p in prompts)
    completion_tokens = sum(len(a.split()) for a in answers)
    handler._send_json(200, {
        "id": "cmpl-" + uuid.uuid4().hex[:24], "object": "text_completion",
        "created": int(time.time()), "model": body.get("model", handler.server.name),
        "choices": [{"index": i, "text": a, "logprobs": None, "finish_reason": "stop"}
                    for i, a in enumerate(answers)],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens}})


def embedding(text: str) -> list[float]:
    """A deterministic unit-free vector for `text` (EMBEDDING_DIM numbers in [0, 1))."""
    return [(zlib.crc32(f"{i}:{text}".encode("utf-8")) % 10000) / 10000
            for i in range(EMBEDDING_DIM)]


def embeddings(handler, match, body) -> None:
    body = _object(body)
    texts = _texts(body.get("input"), "input")
    tokens = sum(len(t.split()) for t in texts)
    handler._send_json(200, {
        "object": "list", "model": body.get("model", handler.server.name),
        "data": [{"object": "embedding", "index": i, "embedding": embedding(t)}
                 for i, t in enumerate(texts)],
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})
