"""The client: one `Sluice` per gateway and key, and `Model` for one model.

    client = Sluice("http://127.0.0.1:8000", "sk-...")
    client.model("chat-demo").generate("hi")                 # "echo: hi"
    for piece in client.model("chat-demo").generate("hi", stream=True): ...
    client.model("chat-demo").messages([{"role": "user", "content": "hi"}], max_tokens=64)
    client.model("chat-demo").responses("hi")

Retries: 429 and 503 answers and connection failures are tried again, up to
`max_retries` times, after an exponential backoff with jitter — or after the answer's
`Retry-After` when it gives one (a longer wait than `max_retry_wait` is not waited for:
the error is raised at once). A request that reached the gateway and timed out while
waiting for the answer is not sent again (it may have run).
"""
from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from typing import Any, Optional, Union
from urllib.parse import quote

import requests

from sluice_client import errors, streams
from sluice_client.tools import CHAT, MESSAGES, RESPONSES, tools_for

log = logging.getLogger("sluice_client")

RETRY_STATUSES = frozenset({429, 503})
FINAL_STATES = frozenset({"succeeded", "failed", "cancelled"})
ANTHROPIC_VERSION = "2023-06-01"   # sent on messages() calls, as Anthropic's SDK sends it
Timeout = Union[float, "tuple[float, float]"]
Messages = list


class Sluice:
    """A connection to one gateway with one API key.

    base_url and api_key default to $SLUICE_BASE_URL and $SLUICE_API_KEY.
    timeout: seconds, or (connect, read); max_retries: tries after the first;
    backoff: the first retry's delay, doubled each time up to max_backoff, with jitter.
    """

    def __init__(self, base_url: Optional[str] = None, api_key: Optional[str] = None, *,
                 timeout: Timeout = (10.0, 120.0), max_retries: int = 3,
                 backoff: float = 0.5, max_backoff: float = 20.0,
                 max_retry_wait: float = 60.0, headers: Optional[dict] = None,
                 session: Optional[requests.Session] = None):
        base_url = base_url or os.environ.get("SLUICE_BASE_URL")
        api_key = api_key or os.environ.get("SLUICE_API_KEY")
        if not base_url:
            raise ValueError("base_url is required (or set SLUICE_BASE_URL)")
        if not api_key:
            raise ValueError("api_key is required (or set SLUICE_API_KEY)")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_retry_wait = max_retry_wait
        self.headers = dict(headers or {})
        self.session = session or requests.Session()

    def __repr__(self) -> str:
        return f"Sluice({self.base_url!r})"

    def close(self) -> None:
        """Close the pooled connections."""
        self.session.close()

    def __enter__(self) -> "Sluice":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def model(self, name: str) -> "Model":
        return Model(name, client=self)

    # ---- the endpoints -----------------------------------------------------------------

    def chat(self, model: str, messages: Messages, *, stream: bool = False,
             callback: Optional[Callable[[dict], Any]] = None, **params: Any) -> Any:
        """POST /v1/chat/completions. Returns the completion (a dict); with stream=True
        a `Stream` of chunks (dicts; `final()`: the completion, tool calls assembled);
        with a callback, calls it with each chunk and returns the list of chunks."""
        body = {"model": model, "messages": list(messages), **params}
        if body.get("tools") is not None:
            body["tools"] = tools_for(CHAT, body["tools"])
        if not stream and callback is None:
            return self.request("POST", "/v1/chat/completions", body)
        body["stream"] = True
        chunks = self._stream("/v1/chat/completions", body, streams.ChatAssembler)
        if callback is None:
            return chunks
        seen = []
        for chunk in chunks:
            seen.append(chunk)
            callback(chunk)
        return seen

    def generate(self, model: str, input: Union[str, Messages, None] = None,
                 stream: bool = False, callback: Optional[Callable[[str], Any]] = None,
                 *, prompt: Optional[str] = None, **params: Any) -> Any:
        """Text in, text out, through the chat endpoint. `input` (or `prompt=`) is the
        user's message, or a list of messages. Returns the answer's text; with
        stream=True an iterator of text pieces; with a callback, calls it with each
        piece as it arrives and returns the whole text."""
        if prompt is not None:
            if input is not None:
                raise TypeError("give input or prompt, not both")
            input = prompt
        if input is None:
            raise TypeError("generate() needs the input (or prompt=)")
        messages = [{"role": "user", "content": input}] if isinstance(input, str) \
            else list(input)
        if not stream and callback is None:
            answer = self.chat(model, messages, **params)
            try:
                return answer["choices"][0]["message"]["content"]
            except (KeyError, IndexError, TypeError):
                raise errors.SluiceError("the answer has no choices[0].message.content",
                                         body=answer) from None
        pieces = streams.chat_texts(self.chat(model, messages, stream=True, **params))
        if callback is None:
            return pieces
        out = []
        for piece in pieces:
            out.append(piece)
            callback(piece)
        return "".join(out)

    def messages(self, model: str, messages: Messages, *, max_tokens: int,
                 system: Any = None, tools: Optional[list] = None, stream: bool = False,
                 callback: Optional[Callable[[dict], Any]] = None, **params: Any) -> Any:
        """POST /v1/messages, Anthropic's Messages API. Returns the message (a dict);
        with stream=True a `Stream` of its events (`final()`: the message, tool_use
        inputs assembled); with a callback, calls it with each event and returns the
        assembled message. `tools` in any shape (see `tool_calls`)."""
        body = {"model": model, "messages": list(messages), "max_tokens": max_tokens,
                **params}
        if system is not None:
            body["system"] = system
        if tools is not None:
            body["tools"] = tools_for(MESSAGES, tools)
        # as Anthropic's own SDK does; a version in the client's `headers` wins
        own = any(k.lower() == "anthropic-version" for k in self.headers)
        return self._call("/v1/messages", body, stream, callback,
                          streams.MessageAssembler,
                          headers=None if own else {"anthropic-version": ANTHROPIC_VERSION})

    def responses(self, model: str, input: Union[str, list], *,
                  instructions: Optional[str] = None, tools: Optional[list] = None,
                  stream: bool = False, callback: Optional[Callable[[dict], Any]] = None,
                  **params: Any) -> Any:
        """POST /v1/responses, OpenAI's Responses API. `input` is a string or a list of
        items. Returns the response (a dict); with stream=True a `Stream` of its events
        (`final()`: the response, function call arguments assembled); with a callback,
        calls it with each event and returns the assembled response."""
        body = {"model": model, "input": input if isinstance(input, str) else list(input),
                **params}
        if instructions is not None:
            body["instructions"] = instructions
        if tools is not None:
            body["tools"] = tools_for(RESPONSES, tools)
        return self._call("/v1/responses", body, stream, callback,
                          streams.ResponseAssembler)

    def _call(self, path: str, body: dict, stream: bool, callback: Any,
              assembler: Any, headers: Optional[dict] = None) -> Any:
        if not stream and callback is None:
            return self.request("POST", path, body, headers=headers)
        body["stream"] = True
        events = self._stream(path, body, assembler, headers=headers)
        if callback is None:
            return events
        for event in events:
            callback(event)
        return events.final()

    def predict(self, model: str, input: Any, **params: Any) -> Any:
        """POST /api/v1/model/{model}/infer: any model, one input or a list of them.
        Returns the output (a list when `input` was one)."""
        body: dict = {"input": input}
        if params:
            body["params"] = params
        answer = self.request("POST", f"/api/v1/model/{quote(model, safe='')}/infer", body)
        return answer.get("output") if isinstance(answer, dict) else answer

    # ---- async jobs ----------------------------------------------------------------------

    def submit(self, model: str, messages: Optional[Messages] = None, *,
               endpoint: str = "/v1/chat/completions", body: Optional[dict] = None,
               callback_url: Optional[str] = None, **params: Any) -> dict:
        """Ask for an async answer (Prefer: respond-async): returns the job (a dict with
        its "id" and "status" "queued") at once; `wait()` for the answer, or have it
        POSTed to `callback_url`, signed (see `verify_signature`). `body` is the whole
        request for `endpoint`; by default a chat request of `messages` and `params`."""
        if body is None:
            if messages is None:
                raise ValueError("give messages (a chat request) or body")
            body = {"model": model, "messages": list(messages), **params}
        headers = {"Prefer": "respond-async"}
        if callback_url:
            headers["X-Sluice-Callback-Url"] = callback_url
        resp = self._send("POST", endpoint, body, stream=False, headers=headers)
        return resp.json()

    def job(self, job_id: str) -> dict:
        """GET /v1/jobs/{id}: the job as it is now."""
        return self.request("GET", f"/v1/jobs/{quote(job_id, safe='')}")

    def cancel(self, job_id: str) -> dict:
        """DELETE /v1/jobs/{id}: cancel a job that is still queued (409 otherwise)."""
        return self.request("DELETE", f"/v1/jobs/{quote(job_id, safe='')}")

    def wait(self, job: Union[str, dict], timeout: float = 600.0, poll: float = 0.25,
             max_poll: float = 5.0) -> dict:
        """Poll a job until it ends (succeeded, failed or cancelled) and return it; its
        answer, as a synchronous call would have given it, is job["result"]["body"].
        Polls start every `poll` seconds, growing to `max_poll`; APITimeoutError after
        `timeout` seconds."""
        job_id = job if isinstance(job, str) else job["id"]
        deadline = time.monotonic() + timeout
        delay = poll
        while True:
            current = self.job(job_id)
            if current.get("status") in FINAL_STATES:
                return current
            left = deadline - time.monotonic()
            if left <= 0:
                raise errors.APITimeoutError(
                    f"job {job_id} is still {current.get('status')} after {timeout:g} s")
            time.sleep(min(delay, left))
            delay = min(max_poll, delay * 1.5)

    def models(self) -> list:
        """The names of the models (and routes) this key may use."""
        answer = self.request("GET", "/v1/models")
        return [m["id"] for m in answer.get("data", [])]

    # ---- transport -----------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None,
                headers: Optional[dict] = None) -> Any:
        """One call with retries; returns the decoded JSON answer or raises."""
        resp = self._send(method, path, body, stream=False, headers=headers)
        try:
            return resp.json()
        except ValueError:
            raise errors.SluiceError("the answer is not JSON", code=resp.status_code,
                                     request_id=resp.headers.get("X-Request-Id"),
                                     body=resp.text) from None

    def _stream(self, path: str, body: dict, assembler: Any,
                headers: Optional[dict] = None) -> streams.Stream:
        resp = self._send("POST", path, body, stream=True,   # errors raise here, eagerly
                          headers=headers)
        return streams.Stream(streams.events(resp), assembler())

    def _send(self, method: str, path: str, body: Any, *, stream: bool,
              headers: Optional[dict] = None) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.api_key}", "Accept": "application/json",
                   **self.headers, **(headers or {})}
        if stream:
            headers["Accept"] = "text/event-stream"
        url = self.base_url + path
        attempt = 0
        while True:
            try:
                resp = self.session.request(method, url, json=body, headers=headers,
                                            timeout=self.timeout, stream=stream)
            except requests.ConnectionError as exc:   # refused, reset, connect timeout
                error: errors.SluiceError = errors.APIConnectionError(
                    f"cannot reach {url}: {exc.__class__.__name__}")
                error.__cause__ = exc
            except requests.exceptions.ReadTimeout as exc:
                raise errors.APITimeoutError(f"no answer from {url} in time") from exc
            else:
                if resp.status_code < 400:
                    return resp
                error = _error(resp)
                if resp.status_code not in RETRY_STATUSES:
                    raise error
            delay = self._delay(attempt, error.retry_after)
            if attempt >= self.max_retries or delay is None:
                raise error
            attempt += 1
            log.warning("sluice: %s; retry %d of %d in %.2f s", error, attempt,
                        self.max_retries, delay)
            time.sleep(delay)

    def _delay(self, attempt: int, retry_after: Optional[float]) -> Optional[float]:
        """Seconds before the next try: the server's Retry-After when it gave one (None:
        longer than we are willing to wait), else exponential backoff with full jitter."""
        if retry_after is not None:
            if retry_after > self.max_retry_wait:
                return None
            # a little jitter on top, so callers told the same second do not stampede
            return retry_after + random.uniform(0, min(self.backoff, 1.0))
        ceiling = min(self.max_backoff, self.backoff * (2 ** attempt))
        return random.uniform(ceiling / 2, ceiling)


class Model:
    """One model of a gateway. Without a client, one is made from $SLUICE_BASE_URL and
    $SLUICE_API_KEY when first needed."""

    def __init__(self, name: str, client: Optional[Sluice] = None):
        if not isinstance(name, str) or not name:
            raise ValueError("model name must be a non-empty string")
        self.name = name
        self._client = client

    def __repr__(self) -> str:
        return f"Model({self.name!r})"

    @property
    def client(self) -> Sluice:
        if self._client is None:
            self._client = Sluice()
        return self._client

    def generate(self, input: Union[str, Messages, None] = None, stream: bool = False,
                 callback: Optional[Callable[[str], Any]] = None, *,
                 prompt: Optional[str] = None, **params: Any) -> Any:
        return self.client.generate(self.name, input, stream=stream, callback=callback,
                                    prompt=prompt, **params)

    def chat(self, messages: Messages, *, stream: bool = False,
             callback: Optional[Callable[[dict], Any]] = None, **params: Any) -> Any:
        return self.client.chat(self.name, messages, stream=stream, callback=callback,
                                **params)

    def messages(self, messages: Messages, *, max_tokens: int, **options: Any) -> Any:
        return self.client.messages(self.name, messages, max_tokens=max_tokens, **options)

    def responses(self, input: Union[str, list], **options: Any) -> Any:
        return self.client.responses(self.name, input, **options)

    def predict(self, input: Any, **params: Any) -> Any:
        return self.client.predict(self.name, input, **params)

    generate.__doc__ = Sluice.generate.__doc__
    chat.__doc__ = Sluice.chat.__doc__
    messages.__doc__ = Sluice.messages.__doc__
    responses.__doc__ = Sluice.responses.__doc__
    predict.__doc__ = Sluice.predict.__doc__


# ---- helpers ---------------------------------------------------------------------------

def _retry_after(resp: requests.Response) -> Optional[float]:
    raw = resp.headers.get("Retry-After")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:   # an HTTP date
        return max(0.0, parsedate_to_datetime(raw).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _error(resp: requests.Response) -> errors.APIStatusError:
    try:
        body: Any = resp.json()
    except ValueError:
        body = resp.text
    return errors.from_response(resp.status_code, body, resp.headers, _retry_after(resp))
