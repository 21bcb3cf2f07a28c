"""A local imitation of Google's Gemini API (generativelanguage.googleapis.com), from
ai.google.dev/api/generate-content: POST /v1beta/models/{model}:generateContent and
:streamGenerateContent?alt=sse, the key in x-goog-api-key, a body of `contents`
(role user/model, `parts`), `systemInstruction`, `generationConfig`, `tools`
(functionDeclarations) and functionCall / functionResponse parts; answers with
`candidates`, `finishReason` and `usageMetadata`; errors as
{"error": {"code", "message", "status"}}; streams as `data: <json>` frames separated
by CRLF CRLF, each frame a GenerateContentResponse with the text so far's delta.

The answer: "gemini says: <last user text>" (a system instruction, when given, is
echoed in front: "[<instruction>] "); a last user text beginning "use a tool" calls
the first declared function with {"query": <the rest>}; a functionResponse is
answered "tool said: <its response's output, or the response as JSON>"; a last user
text "please fail" gets a 400. maxOutputTokens cuts the answer to that many words
(finishReason MAX_TOKENS)."""
from __future__ import annotations

import json
import re
from urllib.parse import parse_qs, urlsplit

from backend_http import Backend

KEY = "AIza-gemini-test-key"
MODEL = "gemini-2.0-flash"
FAIL = "please fail"
PATH = re.compile(r"^/v1beta/models/([^/:]+):(generateContent|streamGenerateContent)$")
ROLES = ("user", "model")


def error(code: int, status: str, message: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": message, "status": status}}).encode()


class GeminiImitation(Backend):
    seen: list[dict] = []

    def refuse(self, code: int, status: str, message: str) -> None:
        self.answer(code, error(code, status, message))

    def do_POST(self):
        parts = urlsplit(self.path)
        raw = self.read_body()
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        self.seen.append({"path": parts.path, "query": query,
                          "headers": {k.lower(): v for k, v in self.headers.items()},
                          "body": body})
        m = PATH.match(parts.path)
        if not m:
            return self.refuse(404, "NOT_FOUND", f"no route {parts.path}")
        if m.group(1) != MODEL:
            return self.refuse(404, "NOT_FOUND", f"models/{m.group(1)} is not found for API "
                                                 "version v1beta")
        if self.headers.get("x-goog-api-key") != KEY:
            # Gemini answers a bad key with 400 INVALID_ARGUMENT (reason API_KEY_INVALID)
            return self.refuse(400, "INVALID_ARGUMENT",
                               "API key not valid. Please pass a valid API key.")
        if self.headers.get("Authorization"):
            return self.refuse(401, "UNAUTHENTICATED", "unexpected Authorization header")
        stream = m.group(2) == "streamGenerateContent"
        if stream and query.get("alt") != "sse":
            return self.refuse(400, "INVALID_ARGUMENT", "this imitation streams only alt=sse")
        problem = self.shape_problem(body)
        if problem:
            return self.refuse(400, "INVALID_ARGUMENT", problem)
        last = body["contents"][-1]["parts"]
        text = "".join(p.get("text", "") for p in last)
        if text == FAIL:
            return self.refuse(400, "INVALID_ARGUMENT", "gemini refused: bad input")
        reply_parts, finish = self.reply(body, last, text)
        prompt = sum(len(p.get("text", "").split()) for c in body["contents"]
                     for p in c["parts"])
        out = sum(len(p.get("text", "").split()) for p in reply_parts)
        usage = {"promptTokenCount": prompt, "candidatesTokenCount": out,
                 "totalTokenCount": prompt + out}
        if stream:
            return self.stream(reply_parts, finish, usage)
        self.answer(200, json.dumps({
            "candidates": [{"content": {"role": "model", "parts": reply_parts},
                            "finishReason": finish, "index": 0}],
            "usageMetadata": usage, "modelVersion": MODEL}).encode())

    @staticmethod
    def shape_problem(body) -> str | None:
        """What the real API would refuse in this body (None: nothing)."""
        if not isinstance(body, dict):
            return "Invalid JSON payload received."
        unknown = set(body) - {"contents", "systemInstruction", "generationConfig", "tools",
                               "toolConfig", "safetySettings"}
        if unknown:
            return f"Invalid JSON payload received. Unknown name {sorted(unknown)[0]!r}"
        contents = body.get("contents")
        if not isinstance(contents, list) or not contents:
            return "* GenerateContentRequest.contents: contents is not specified"
        for c in contents:
            if c.get("role") not in ROLES or not isinstance(c.get("parts"), list) \
                    or not c["parts"]:
                return "* GenerateContentRequest.contents: role must be user or model, " \
                       "with parts"
        config = body.get("generationConfig", {})
        known = {"maxOutputTokens", "temperature", "topP", "topK", "stopSequences", "seed",
                 "presencePenalty", "frequencyPenalty", "responseMimeType",
                 "responseJsonSchema", "candidateCount"}
        if set(config) - known:
            return f"Unknown name {sorted(set(config) - known)[0]!r} at 'generation_config'"
        system = body.get("systemInstruction")
        if system is not None and not isinstance(system.get("parts"), list):
            return "systemInstruction needs parts"
        return None

    @staticmethod
    def reply(body: dict, last: list, text: str) -> tuple[list, str]:
        responses = [p["functionResponse"] for p in last if "functionResponse" in p]
        if responses:
            r = responses[0]["response"]
            said = r["output"] if "output" in r else json.dumps(r, sort_keys=True)
            return [{"text": f"tool said: {said}"}], "STOP"
        decls = [d for t in body.get("tools", []) for d in t.get("functionDeclarations", [])]
        if text.startswith("use a tool") and decls:
            query = text[len("use a tool"):].strip()
            return [{"functionCall": {"name": decls[0]["name"],
                                      "args": {"query": query}}}], "STOP"
        system = body.get("systemInstruction")
        prefix = ""
        if system:
            prefix = "[" + " ".join(p["text"] for p in system["parts"]) + "] "
        words = (prefix + "gemini says: " + text).split(" ")
        limit = body.get("generationConfig", {}).get("maxOutputTokens")
        if isinstance(limit, int) and limit < len(words):
            return [{"text": " ".join(words[:limit])}], "MAX_TOKENS"
        return [{"text": " ".join(words)}], "STOP"

    def stream(self, reply_parts: list, finish: str, usage: dict) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        frames = []
        for p in reply_parts:
            if "text" in p:
                words = p["text"].split(" ")
                frames += [{"text": w + (" " if i < len(words) - 1 else "")}
                           for i, w in enumerate(words)]
            else:
                frames.append(p)
        partial = {"promptTokenCount": usage["promptTokenCount"]}
        for i, part in enumerate(frames):
            doc = {"candidates": [{"content": {"role": "model", "parts": [part]},
                                   "index": 0}],
                   "usageMetadata": partial, "modelVersion": MODEL}
            if i == len(frames) - 1:
                doc["candidates"][0]["finishReason"] = finish
                doc["usageMetadata"] = usage
            data = b"data: " + json.dumps(doc).encode() + b"\r\n\r\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.write(b"0\r\n\r\n")
