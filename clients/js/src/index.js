// sluice-client: the JavaScript client of the Sluice inference gateway.
// No dependencies: the platform's fetch (Node 18+, browsers, Deno, Bun).
//
//   const sluice = new Sluice({ baseURL: "http://127.0.0.1:8000", apiKey: "sk-..." });
//   await sluice.model("chat-demo").generate("hi");                     // "echo: hi"
//   for await (const piece of sluice.model("chat-demo").generate("hi", { stream: true })) {}
//   await sluice.model("chat-demo").messages([{ role: "user", content: "hi" }], { max_tokens: 64 });
//   await sluice.model("chat-demo").responses("hi", { tools: [...] });   // toolCalls(answer)
//
// Retries: 429 and 503 answers and network failures are tried again, up to maxRetries
// times, after the answer's Retry-After when it has one (one longer than maxRetryWait
// is raised at once), else after an exponential backoff with jitter. A request that
// timed out waiting for its answer is not sent again: it may have run.

import {
  APIConnectionError, APITimeoutError, SluiceError, errorFrom, parseRetryAfter,
} from "./errors.js";
import {
  ChatAssembler, MessageAssembler, ResponseAssembler, Stream, chatTexts, sseEvents,
} from "./streams.js";
import { CHAT, MESSAGES, RESPONSES, toolsFor } from "./tools.js";

export {
  APIConnectionError, APIStatusError, APITimeoutError, AuthenticationError, BackendError,
  BadRequestError, ContentPolicyError, GatewayTimeoutError, InternalServerError,
  NotFoundError, PayloadTooLargeError, PermissionDeniedError, RateLimitError,
  ServiceUnavailableError, SluiceError,
} from "./errors.js";
export { Stream } from "./streams.js";
export { ToolCall, textOf, toolCalls } from "./tools.js";
export { verifySignature } from "./webhooks.js";

const RETRY_STATUSES = new Set([429, 503]);
const FINAL_STATES = new Set(["succeeded", "failed", "cancelled"]);
const ANTHROPIC_VERSION = "2023-06-01";   // sent on messages() calls, as Anthropic's SDK sends it

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// ---- the client -------------------------------------------------------------------------

export class Sluice {
  constructor({
    baseURL = globalThis.process?.env?.SLUICE_BASE_URL,
    apiKey = globalThis.process?.env?.SLUICE_API_KEY,
    timeout = 120_000, maxRetries = 3, backoff = 500, maxBackoff = 20_000,
    maxRetryWait = 60_000, headers = {}, fetch = globalThis.fetch, onRetry = null,
  } = {}) {
    if (!baseURL) throw new TypeError("baseURL is required (or set SLUICE_BASE_URL)");
    if (!apiKey) throw new TypeError("apiKey is required (or set SLUICE_API_KEY)");
    if (!Number.isInteger(maxRetries) || maxRetries < 0) {
      throw new TypeError("maxRetries must be an integer >= 0");
    }
    if (typeof fetch !== "function") throw new TypeError("no fetch: pass one as `fetch`");
    this.baseURL = String(baseURL).replace(/\/+$/, "");
    this.apiKey = apiKey;
    this.timeout = timeout;           // ms until the answer's headers
    this.maxRetries = maxRetries;
    this.backoff = backoff;           // ms, first retry; doubles up to maxBackoff
    this.maxBackoff = maxBackoff;
    this.maxRetryWait = maxRetryWait; // ms: a longer Retry-After is raised at once
    this.headers = { ...headers };
    this.onRetry = onRetry;           // ({ attempt, delay, error }) => void
    this._fetch = fetch;
  }

  model(name) {
    return new Model(name, this);
  }

  // POST /v1/chat/completions. The completion; with { stream: true } a Stream of
  // chunks (async iterable; final() resolves to the completion, tool calls assembled);
  // with onChunk, calls it with each chunk and resolves to the list of them.
  chat(model, messages, options = {}) {
    const { stream = false, onChunk = null, signal, ...params } = options;
    const body = { model, messages: [...messages], ...params };
    if (body.tools) body.tools = toolsFor(CHAT, body.tools);
    if (!stream && !onChunk) return this.request("POST", "/v1/chat/completions", body, { signal });
    body.stream = true;
    const chunks = this._stream("/v1/chat/completions", body, signal, ChatAssembler);
    if (!onChunk) return chunks;
    return (async () => {
      const seen = [];
      for await (const chunk of chunks) {
        seen.push(chunk);
        await onChunk(chunk);
      }
      return seen;
    })();
  }

  // Text in, text out through the chat endpoint: the answer's text; with
  // { stream: true } an async iterable of text pieces; with onChunk, calls it with
  // each piece as it arrives and resolves to the whole text. `input` is the user's
  // message, a list of messages, or { prompt, ...options }.
  generate(model, input, options = {}) {
    if (input && typeof input === "object" && !Array.isArray(input)) {
      ({ prompt: input, ...options } = { ...input, ...options });
      if (input === undefined) throw new TypeError("generate() needs the input (or prompt)");
    }
    const { stream = false, onChunk = null, ...rest } = options;
    const messages = typeof input === "string" ? [{ role: "user", content: input }] : input;
    if (!stream && !onChunk) {
      return this.chat(model, messages, rest).then((answer) => {
        const text = answer?.choices?.[0]?.message?.content;
        if (typeof text !== "string") {
          throw new SluiceError("the answer has no choices[0].message.content", { body: answer });
        }
        return text;
      });
    }
    const pieces = chatTexts(this.chat(model, messages, { ...rest, stream: true }));
    if (!onChunk) return pieces;
    return (async () => {
      let all = "";
      for await (const piece of pieces) {
        all += piece;
        await onChunk(piece);
      }
      return all;
    })();
  }

  // POST /v1/messages, Anthropic's Messages API (max_tokens required, as Anthropic
  // requires it). The message; with { stream: true } a Stream of its events (final():
  // the message, tool_use inputs assembled); with onEvent, calls it with each event
  // and resolves to the assembled message. `tools` in any shape (see toolCalls).
  messages(model, messages, options = {}) {
    const { stream = false, onEvent = null, signal, ...params } = options;
    const body = { model, messages: [...messages], ...params };
    if (body.tools) body.tools = toolsFor(MESSAGES, body.tools);
    // as Anthropic's own SDK does; a version in the client's `headers` wins
    const own = Object.keys(this.headers).some((k) => k.toLowerCase() === "anthropic-version");
    const headers = own ? {} : { "anthropic-version": ANTHROPIC_VERSION };
    return this._call("/v1/messages", body, { stream, onEvent, signal, headers },
                      MessageAssembler);
  }

  // POST /v1/responses, OpenAI's Responses API; `input` a string or a list of items.
  // The response; with { stream: true } a Stream of its events (final(): the
  // response, function call arguments assembled); with onEvent, calls it with each
  // event and resolves to the assembled response.
  responses(model, input, options = {}) {
    const { stream = false, onEvent = null, signal, ...params } = options;
    const body = { model, input: typeof input === "string" ? input : [...input], ...params };
    if (body.tools) body.tools = toolsFor(RESPONSES, body.tools);
    return this._call("/v1/responses", body, { stream, onEvent, signal }, ResponseAssembler);
  }

  _call(path, body, { stream, onEvent, signal, headers = {} }, Assembler) {
    if (!stream && !onEvent) return this.request("POST", path, body, { signal, headers });
    body.stream = true;
    const events = this._stream(path, body, signal, Assembler, headers);
    if (!onEvent) return events;
    return (async () => {
      for await (const event of events) await onEvent(event);
      return events.final();
    })();
  }

  // POST /api/v1/model/{model}/infer: any model, one input or a list of them.
  async predict(model, input, params = undefined, { signal } = {}) {
    const body = { input };
    if (params && Object.keys(params).length) body.params = params;
    const answer = await this.request(
      "POST", `/api/v1/model/${encodeURIComponent(model)}/infer`, body, { signal });
    return answer && typeof answer === "object" ? answer.output : answer;
  }

  // ---- async jobs ----------------------------------------------------------------------

  // Ask for an async answer (Prefer: respond-async): the job ({ id, status: "queued", ... })
  // at once; wait() for the answer, or have it POSTed to callbackUrl, signed (see
  // verifySignature). `body` is the whole request for `endpoint`; by default a chat
  // request of `messages` and the other options.
  async submit(model, messages, { endpoint = "/v1/chat/completions", body, callbackUrl,
    signal, ...params } = {}) {
    if (body === undefined) {
      if (!messages) throw new TypeError("give messages (a chat request) or body");
      body = { model, messages: [...messages], ...params };
    }
    const headers = { Prefer: "respond-async" };
    if (callbackUrl) headers["X-Sluice-Callback-Url"] = callbackUrl;
    const resp = await this._send("POST", endpoint, body, { signal, headers });
    return resp.json();
  }

  // GET /v1/jobs/{id}: the job as it is now.
  async job(id, { signal } = {}) {
    return this.request("GET", `/v1/jobs/${encodeURIComponent(id)}`, undefined, { signal });
  }

  // DELETE /v1/jobs/{id}: cancel a job that is still queued (409 otherwise).
  async cancel(id, { signal } = {}) {
    return this.request("DELETE", `/v1/jobs/${encodeURIComponent(id)}`, undefined, { signal });
  }

  // Poll a job until it ends (succeeded, failed, cancelled) and return it; its answer,
  // as a synchronous call would have given it, is job.result.body. Polls every `poll`
  // ms, growing to maxPoll; APITimeoutError after `timeout` ms.
  async wait(job, { timeout = 600_000, poll = 250, maxPoll = 5_000, signal } = {}) {
    const id = typeof job === "string" ? job : job.id;
    const deadline = Date.now() + timeout;
    for (let delay = poll; ; delay = Math.min(maxPoll, delay * 1.5)) {
      const current = await this.job(id, { signal });
      if (FINAL_STATES.has(current.status)) return current;
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new APITimeoutError(`job ${id} is still ${current.status} after ${timeout} ms`);
      }
      await sleep(Math.min(delay, left));
    }
  }

  // The names of the models (and routes) this key may use.
  async models() {
    const answer = await this.request("GET", "/v1/models");
    return (answer.data || []).map((m) => m.id);
  }

  // One call with retries: the decoded JSON answer, or a typed error.
  async request(method, path, body = undefined, { signal, headers = {} } = {}) {
    const resp = await this._send(method, path, body, { signal, headers });
    const text = await resp.text();
    try {
      return JSON.parse(text);
    } catch {
      throw new SluiceError("the answer is not JSON", {
        code: resp.status, requestId: resp.headers.get("x-request-id"), body: text });
    }
  }

  async _send(method, path, body, { stream = false, signal, headers: extra = {} } = {}) {
    const headers = {
      Authorization: `Bearer ${this.apiKey}`,
      Accept: stream ? "text/event-stream" : "application/json",
      ...this.headers,
      ...extra,
    };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const url = this.baseURL + path;
    for (let attempt = 0; ; attempt++) {
      const controller = new AbortController();
      let timedOut = false;
      const timer = setTimeout(() => { timedOut = true; controller.abort(); }, this.timeout);
      const onAbort = () => controller.abort();
      signal?.addEventListener("abort", onAbort, { once: true });
      let error;
      try {
        // fetch called as a method of the client is an "Illegal invocation" in browsers
        const resp = await this._fetch.call(globalThis, url, {
          method, headers, signal: controller.signal,
          body: body === undefined ? undefined : JSON.stringify(body),
        });
        if (resp.status < 400) return resp;
        let parsed = await resp.text();
        try { parsed = JSON.parse(parsed); } catch { /* keep the text */ }
        error = errorFrom(resp.status, parsed, resp.headers.get("x-request-id"),
          parseRetryAfter(resp.headers.get("retry-after")));
        if (!RETRY_STATUSES.has(resp.status)) throw error;
      } catch (exc) {
        if (exc instanceof SluiceError) throw exc;
        if (signal?.aborted) throw exc;       // the caller gave up: not ours to retry
        if (timedOut) {
          throw new APITimeoutError(`no answer from ${url} within ${this.timeout} ms`,
            { cause: exc });
        }
        error = new APIConnectionError(`cannot reach ${url}: ${exc.cause?.code || exc.message}`,
          { cause: exc });
      } finally {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
      }
      const delay = this._delay(attempt, error.retryAfter);
      if (attempt >= this.maxRetries || delay === null) throw error;
      this.onRetry?.({ attempt: attempt + 1, delay, error });
      await sleep(delay);
    }
  }

  // ms before the next try: Retry-After (null: longer than we wait), else backoff.
  _delay(attempt, retryAfter) {
    if (retryAfter !== null && retryAfter !== undefined) {
      const ms = retryAfter * 1000;
      if (ms > this.maxRetryWait) return null;
      return ms + Math.random() * Math.min(this.backoff, 1000);
    }
    const ceiling = Math.min(this.maxBackoff, this.backoff * 2 ** attempt);
    return ceiling / 2 + Math.random() * (ceiling / 2);
  }

  // A Stream of the events of `path`'s answer. The request starts on the first
  // iteration; a refused request throws there.
  _stream(path, body, signal, Assembler, headers = {}) {
    const open = async function* (client) {
      const resp = await client._send("POST", path, body, { stream: true, signal, headers });
      yield* sseEvents(resp);
    };
    return new Stream(() => open(this), new Assembler());
  }
}

export class Model {
  constructor(name, client = null) {
    if (typeof name !== "string" || !name) throw new TypeError("model name must be a string");
    this.name = name;
    this._client = client;
  }

  // Without a client, one from SLUICE_BASE_URL and SLUICE_API_KEY, made on first use.
  get client() {
    if (!this._client) this._client = new Sluice();
    return this._client;
  }

  generate(input, options = {}) { return this.client.generate(this.name, input, options); }
  chat(messages, options = {}) { return this.client.chat(this.name, messages, options); }
  messages(messages, options = {}) { return this.client.messages(this.name, messages, options); }
  responses(input, options = {}) { return this.client.responses(this.name, input, options); }
  predict(input, params, options) { return this.client.predict(this.name, input, params, options); }
}

export default Sluice;
