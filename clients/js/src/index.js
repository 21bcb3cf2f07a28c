// sluice-client: the JavaScript client of the Sluice inference gateway.
// No dependencies: the platform's fetch (Node 18+, browsers, Deno, Bun).
//
//   const sluice = new Sluice({ baseURL: "http://127.0.0.1:8000", apiKey: "sk-..." });
//   await sluice.model("chat-demo").generate("hi");                     // "echo: hi"
//   for await (const piece of sluice.model("chat-demo").generate("hi", { stream: true })) {}
//
// Retries: 429 and 503 answers and network failures are tried again, up to maxRetries
// times, after the answer's Retry-After when it has one (one longer than maxRetryWait
// is raised at once), else after an exponential backoff with jitter. A request that
// timed out waiting for its answer is not sent again: it may have run.

const RETRY_STATUSES = new Set([429, 503]);
const FINAL_STATES = new Set(["succeeded", "failed", "cancelled"]);

// ---- errors ------------------------------------------------------------------------------

export class SluiceError extends Error {
  constructor(message, { code = null, type = null, requestId = null, retryAfter = null,
    body = null, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    this.code = code;              // the HTTP status; null when no answer came
    this.type = type;              // the template's error type, e.g. "rate_limited"
    this.requestId = requestId;
    this.retryAfter = retryAfter;  // seconds, or null
    this.body = body;
  }
}
export class APIConnectionError extends SluiceError {}
export class APITimeoutError extends APIConnectionError {}
export class APIStatusError extends SluiceError {}
export class BadRequestError extends APIStatusError {}
export class AuthenticationError extends APIStatusError {}
export class PermissionDeniedError extends APIStatusError {}
export class NotFoundError extends APIStatusError {}
export class PayloadTooLargeError extends APIStatusError {}
export class RateLimitError extends APIStatusError {}
export class ContentPolicyError extends APIStatusError {}
export class InternalServerError extends APIStatusError {}
export class BackendError extends APIStatusError {}
export class ServiceUnavailableError extends APIStatusError {}
export class GatewayTimeoutError extends APIStatusError {}

const BY_STATUS = {
  400: BadRequestError, 401: AuthenticationError, 403: PermissionDeniedError,
  404: NotFoundError, 413: PayloadTooLargeError, 429: RateLimitError,
  451: ContentPolicyError, 500: InternalServerError, 502: BackendError,
  503: ServiceUnavailableError, 504: GatewayTimeoutError,
};

function errorFrom(status, body, requestIdHeader, retryAfter) {
  const err = body && typeof body === "object" ? body.error : undefined;
  let message = `HTTP ${status}`;
  let type = null;
  let requestId = requestIdHeader || null;
  if (err && typeof err === "object") {
    message = err.message || message;
    type = err.type || null;
    requestId = err.request_id || requestId;
    if (retryAfter === null && typeof err.retry_after === "number") retryAfter = err.retry_after;
  } else if (typeof err === "string") {
    message = err;
  } else if (typeof body === "string" && body) {
    message = body.slice(0, 500);
  }
  const Cls = BY_STATUS[status] || APIStatusError;
  return new Cls(String(message), { code: status, type, requestId, retryAfter, body });
}

function parseRetryAfter(raw) {
  if (raw === null || raw === undefined) return null;
  const seconds = Number(raw);
  if (raw.trim() !== "" && Number.isFinite(seconds)) return Math.max(0, seconds);
  const date = Date.parse(raw);
  return Number.isNaN(date) ? null : Math.max(0, (date - Date.now()) / 1000);
}

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

  // POST /v1/chat/completions. The completion; with { stream: true } an async iterable
  // of chunks; with onChunk, calls it with each chunk and resolves to the list of them.
  chat(model, messages, options = {}) {
    const { stream = false, onChunk = null, signal, ...params } = options;
    const body = { model, messages: [...messages], ...params };
    if (!stream && !onChunk) return this.request("POST", "/v1/chat/completions", body, { signal });
    body.stream = true;
    const chunks = this._events("/v1/chat/completions", body, signal);
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
  // each piece as it arrives and resolves to the whole text.
  generate(model, input, options = {}) {
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
    const pieces = texts(this.chat(model, messages, { ...rest, stream: true }));
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
  async request(method, path, body = undefined, { signal } = {}) {
    const resp = await this._send(method, path, body, { signal });
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
        const resp = await this._fetch(url, {
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

  // The `data:` events of a server-sent-event stream, decoded, until [DONE]. The
  // request starts on the first iteration; a refused request throws there.
  _events(path, body, signal) {
    const client = this;
    return {
      async *[Symbol.asyncIterator]() {
        const resp = await client._send("POST", path, body, { stream: true, signal });
        const requestId = resp.headers.get("x-request-id");
        if (!(resp.headers.get("content-type") || "").startsWith("text/event-stream")) {
          yield await resp.json();   // a backend that does not stream answers whole
          return;
        }
        const decoder = new TextDecoder();
        let buffer = "";
        const reader = resp.body.getReader();
        try {
          for (;;) {
            let chunk;
            try {
              chunk = await reader.read();
            } catch (exc) {
              throw new APIConnectionError("the stream broke", { requestId, cause: exc });
            }
            if (chunk.done) return;
            buffer += decoder.decode(chunk.value, { stream: true });
            let newline;
            while ((newline = buffer.indexOf("\n")) >= 0) {
              const line = buffer.slice(0, newline).replace(/\r$/, "");
              buffer = buffer.slice(newline + 1);
              if (!line.startsWith("data:")) continue;
              const data = line.slice(5).trim();
              if (data === "[DONE]") return;
              const event = JSON.parse(data);
              if (event && typeof event.error === "object" && event.error) {
                throw errorFrom(Number(event.error.code) || 500, event, requestId, null);
              }
              yield event;
            }
          }
        } finally {
          reader.cancel().catch(() => {});
        }
      },
    };
  }
}

async function* texts(chunks) {
  for await (const chunk of chunks) {
    for (const choice of chunk.choices || []) {
      const piece = (choice.delta || choice.message || {}).content;
      if (piece) yield piece;
    }
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
  predict(input, params, options) { return this.client.predict(this.name, input, params, options); }
}

// ---- webhooks ----------------------------------------------------------------------------

const hex = (buf) => Array.from(new Uint8Array(buf), (b) => b.toString(16).padStart(2, "0")).join("");

function sameText(a, b) {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

// Check a Sluice webhook's X-Sluice-Signature ("t=<unix>,v1=<hex HMAC-SHA256 of
// "<t>.<body>">") against the raw body (a string or bytes) with the consumer's webhook
// secret; a time further than `tolerance` seconds from now is refused (replays).
// Resolves to true or false, never throws on a malformed header. WebCrypto: Node 18+,
// browsers, Deno, Bun. A delivery may come twice: deduplicate by the job's id.
export async function verifySignature(secret, header, body, tolerance = 300, now = undefined) {
  if (!secret || !header) return false;
  let t = null;
  const sigs = [];
  for (const part of String(header).split(",")) {
    const i = part.indexOf("=");
    if (i < 0) return false;
    const key = part.slice(0, i).trim();
    const value = part.slice(i + 1).trim();
    if (key === "t") {
      if (!/^[0-9]+$/.test(value)) return false;
      t = Number(value);
    } else if (key === "v1") {
      sigs.push(value);
    }
  }
  if (t === null || !sigs.length) return false;
  const current = now ?? Date.now() / 1000;
  if (Math.abs(current - t) > tolerance) return false;
  const enc = new TextEncoder();
  const bytes = typeof body === "string" ? enc.encode(body) : new Uint8Array(body);
  const prefix = enc.encode(`${t}.`);
  const message = new Uint8Array(prefix.length + bytes.length);
  message.set(prefix);
  message.set(bytes, prefix.length);
  const key = await globalThis.crypto.subtle.importKey(
    "raw", enc.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const expected = hex(await globalThis.crypto.subtle.sign("HMAC", key, message));
  return sigs.some((sig) => sameText(expected, sig));
}

export default Sluice;
