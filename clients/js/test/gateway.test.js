// sluice-client against a real gateway with the demo backends. Run by
// tests/gateway/test_client_js.py, which starts them and sets:
//   SLUICE_BASE_URL, SLUICE_API_KEY   the gateway and an unlimited key
//   SLUICE_TEST_PLAN_KEY              a key on a plan of one request per 2 s, burst 1
//   SLUICE_TEST_DEAD_URL              a URL where nothing listens
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  APIConnectionError, APITimeoutError, Model, NotFoundError, PermissionDeniedError,
  RateLimitError, ServiceUnavailableError, Sluice, SluiceError,
} from "../src/index.js";

const env = process.env;
for (const name of ["SLUICE_BASE_URL", "SLUICE_API_KEY", "SLUICE_TEST_PLAN_KEY",
  "SLUICE_TEST_DEAD_URL"]) {
  assert.ok(env[name], `${name} must be set (tests/gateway/test_client_js.py sets it)`);
}
const sluice = new Sluice({ baseURL: env.SLUICE_BASE_URL, apiKey: env.SLUICE_API_KEY });

test("generate text, with the client from the environment", async () => {
  assert.equal(await new Model("chat-demo").generate("hi"), "echo: hi");
  assert.equal(await sluice.model("chat-demo").generate("hello", { max_tokens: 20 }),
    "echo: hello");
});

test("chat returns the completion; models lists what the key may use", async () => {
  const answer = await sluice.model("chat-demo").chat(
    [{ role: "system", content: "be brief" }, { role: "user", content: "hello there" }],
    { temperature: 0.5 });
  assert.equal(answer.choices[0].message.content, "echo: hello there");
  assert.equal(answer.usage.completion_tokens, 3);
  const models = await sluice.models();
  assert.ok(models.includes("chat-demo") && models.includes("predict-demo"), models);
});

test("predict: one input, and a list", async () => {
  const one = await sluice.model("predict-demo").predict("a cat");
  assert.equal(one.length, 5);
  const many = await sluice.model("predict-demo").predict(["a cat", [1, 2]]);
  assert.deepEqual(many.map((p) => p.length), [5, 2]);
  assert.deepEqual(many[0], one);
});

test("streaming as an async iterator", async () => {
  const pieces = [];
  for await (const piece of sluice.model("chat-demo").generate("one two three", { stream: true })) {
    pieces.push(piece);
  }
  assert.ok(pieces.length > 1, JSON.stringify(pieces));
  assert.equal(pieces.join(""), "echo: one two three");
  const chunks = [];
  const messages = [{ role: "user", content: "x y" }];
  const options = { stream: true, stream_options: { include_usage: true } };
  for await (const chunk of sluice.model("chat-demo").chat(messages, options)) {
    chunks.push(chunk);
  }
  assert.equal(chunks.at(-1).usage.completion_tokens, 3);
});

test("streaming with a callback", async () => {
  const seen = [];
  const text = await sluice.model("chat-demo").generate("one two three",
    { onChunk: (piece) => seen.push(piece) });
  assert.equal(text, "echo: one two three");
  assert.ok(seen.length > 1);
  assert.equal(seen.join(""), text);
});

test("errors are typed and carry the request id", async () => {
  const client = new Sluice({ baseURL: env.SLUICE_BASE_URL, apiKey: env.SLUICE_API_KEY,
    headers: { "X-Request-Id": "js-sdk-test-1" } });
  const err = await client.model("no-such-model").generate("hi").then(
    () => assert.fail("no error"), (e) => e);
  assert.ok(err instanceof NotFoundError && err instanceof SluiceError, String(err));
  assert.equal(err.code, 404);
  assert.equal(err.type, "not_found");
  assert.equal(err.requestId, "js-sdk-test-1");
  assert.match(err.message, /no-such-model/);
  const bad = new Sluice({ baseURL: env.SLUICE_BASE_URL, apiKey: "sk-wrong-key-0123456789" });
  await assert.rejects(bad.model("chat-demo").generate("hi"),
    (e) => e instanceof PermissionDeniedError && e.code === 403 && !!e.requestId);
  // a refused stream throws on the first iteration, before any piece
  await assert.rejects(async () => {
    for await (const _ of client.model("no-such-model").generate("hi", { stream: true })) {
      assert.fail("a piece came");
    }
  }, NotFoundError);
});

test("429 is retried after Retry-After, once the bucket refills", async () => {
  const impatient = new Sluice({ baseURL: env.SLUICE_BASE_URL, apiKey: env.SLUICE_TEST_PLAN_KEY,
    maxRetries: 0 });
  assert.equal(await impatient.model("chat-demo").generate("first"), "echo: first");
  const err = await impatient.model("chat-demo").generate("second").then(
    () => assert.fail("no 429"), (e) => e);
  assert.ok(err instanceof RateLimitError, String(err));
  assert.equal(err.code, 429);
  assert.equal(err.type, "rate_limited");
  assert.ok(err.retryAfter >= 1 && err.retryAfter <= 2, String(err.retryAfter));
  assert.ok(err.requestId);

  const retries = [];
  const patient = new Sluice({ baseURL: env.SLUICE_BASE_URL, apiKey: env.SLUICE_TEST_PLAN_KEY,
    onRetry: (info) => retries.push(info) });
  const started = Date.now();
  assert.equal(await patient.model("chat-demo").generate("third"), "echo: third");
  assert.ok(Date.now() - started >= 1000, "it waited for the bucket");
  assert.ok(retries.length >= 1 && retries.length <= 2, JSON.stringify(retries));
  assert.ok(retries.every((r) => r.error instanceof RateLimitError && r.delay >= 1000));
});

test("503 is retried with backoff, then raised", async () => {
  const retries = [];
  const client = new Sluice({ baseURL: env.SLUICE_BASE_URL, apiKey: env.SLUICE_API_KEY,
    maxRetries: 2, backoff: 20, onRetry: (info) => retries.push(info) });
  await assert.rejects(client.model("empty-demo").generate("hi"),
    (e) => e instanceof ServiceUnavailableError && e.code === 503 && !!e.requestId);
  assert.equal(retries.length, 2);
});

test("connection errors are retried, then raised", async () => {
  const retries = [];
  const client = new Sluice({ baseURL: env.SLUICE_TEST_DEAD_URL, apiKey: "sk-any",
    maxRetries: 2, backoff: 20, onRetry: (info) => retries.push(info) });
  await assert.rejects(client.model("chat-demo").generate("hi"),
    (e) => e instanceof APIConnectionError && e.code === null);
  assert.equal(retries.length, 2);
});

test("a timeout raises without sending the request again", async () => {
  const retries = [];
  const client = new Sluice({ baseURL: env.SLUICE_BASE_URL, apiKey: env.SLUICE_API_KEY,
    timeout: 300, headers: { "X-Demo-Latency-Ms": "1500" },
    onRetry: (info) => retries.push(info) });
  const started = Date.now();
  await assert.rejects(client.model("chat-demo").generate("slow"), APITimeoutError);
  assert.ok(Date.now() - started < 1400);
  assert.equal(retries.length, 0);
});

test("configuration mistakes are reported at once", () => {
  assert.throws(() => new Sluice({ baseURL: "", apiKey: "x" }), TypeError);
  assert.throws(() => new Sluice({ baseURL: "http://x", apiKey: "x", maxRetries: -1 }), TypeError);
  assert.throws(() => new Model(""), TypeError);
});
