// sluice-client on the gateway's /v1/messages (Anthropic Messages) and /v1/responses
// (OpenAI Responses), converted to the demo OpenAI backend, which calls the first
// offered tool on "use a tool <rest>" with {query: rest} and answers a tool result
// "tool said: <content>". Run by tests/gateway/test_client_sdk_new_apis.py, which sets
// SLUICE_BASE_URL and SLUICE_API_KEY and serves chat-demo, empty-demo and claude-2 (the
// demo Anthropic-protocol backend, with the same tool rule).
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  BadRequestError, NotFoundError, ServiceUnavailableError, Sluice, Stream, textOf, toolCalls,
} from "../src/index.js";

const env = process.env;
const sluice = new Sluice({ baseURL: env.SLUICE_BASE_URL, apiKey: env.SLUICE_API_KEY });
const model = sluice.model("chat-demo");
const LOOKUP = { type: "function", function: { name: "lookup",
  parameters: { type: "object", properties: { query: { type: "string" } } } } };
const USE = [{ role: "user", content: "use a tool the weather in Oslo" }];
const ASKED = { query: "the weather in Oslo" };

async function collect(stream) {
  const events = [];
  for await (const event of stream) events.push(event);
  return events;
}

test("messages: text, whole and streamed", async () => {
  const answer = await model.messages([{ role: "user", content: "hello there" }],
    { max_tokens: 64, system: "be brief" });
  assert.equal(answer.type, "message");
  assert.equal(textOf(answer), "echo: hello there");
  assert.equal(answer.stop_reason, "end_turn");
  const stream = model.messages([{ role: "user", content: "one two three" }],
    { max_tokens: 64, stream: true });
  assert.ok(stream instanceof Stream);
  const types = (await collect(stream)).map((e) => e.type).filter((t) => t !== "ping");
  assert.equal(types[0], "message_start");
  assert.deepEqual(types.slice(-2), ["message_delta", "message_stop"]);
  assert.equal(textOf(await stream.final()), "echo: one two three");
  const seen = [];
  const whole = await model.messages([{ role: "user", content: "one two three" }],
    { max_tokens: 64, onEvent: (e) => seen.push(e) });
  assert.equal(textOf(whole), "echo: one two three");
  assert.ok(seen.length > 4);
});

test("messages: a tool round trip, streamed input assembled", async () => {
  const answer = await model.messages(USE, { max_tokens: 64, tools: [LOOKUP] });
  assert.equal(answer.stop_reason, "tool_use");
  const [call] = toolCalls(answer);
  assert.deepEqual([call.name, call.arguments, call.api], ["lookup", ASKED, "messages"]);
  const turn = [...USE, { role: "assistant", content: answer.content }, call.result("rain")];
  assert.equal(textOf(await model.messages(turn, { max_tokens: 64, tools: [LOOKUP] })),
    "tool said: rain");
  const stream = model.messages(USE, { max_tokens: 64, tools: [LOOKUP], stream: true });
  const deltas = (await collect(stream)).filter((e) => e.type === "content_block_delta");
  assert.ok(deltas.some((e) => e.delta.type === "input_json_delta"));
  assert.deepEqual(toolCalls(await stream.final()).map((c) => [c.name, c.arguments]),
    [["lookup", ASKED]]);
});

test("responses: text, and a tool round trip", async () => {
  const answer = await model.responses("hello there", { instructions: "be brief" });
  assert.equal(answer.object, "response");
  assert.equal(textOf(answer), "echo: hello there");
  const stream = model.responses("one two three", { stream: true });
  const types = (await collect(stream)).map((e) => e.type);
  assert.equal(types[0], "response.created");
  assert.equal(types.at(-1), "response.completed");
  assert.equal(textOf(await stream.final()), "echo: one two three");

  const asked = await model.responses(USE, { tools: [LOOKUP] });
  const [call] = toolCalls(asked);
  assert.deepEqual([call.name, call.arguments, call.api], ["lookup", ASKED, "responses"]);
  const turn = [...USE, ...asked.output, call.result({ sky: "grey" })];
  assert.equal(textOf(await model.responses(turn, { tools: [LOOKUP] })),
    'tool said: {"sky":"grey"}');
  const streamed = model.responses(USE, { tools: [LOOKUP], stream: true });
  const kinds = (await collect(streamed)).map((e) => e.type);
  assert.ok(kinds.includes("response.function_call_arguments.delta"), kinds.join());
  assert.deepEqual(toolCalls(await streamed.final()).map((c) => [c.name, c.arguments]),
    [["lookup", ASKED]]);
});

test("Anthropic-shaped errors are typed; the new APIs retry like the others", async () => {
  const err = await sluice.model("no-such-model").messages(USE, { max_tokens: 64 })
    .then(() => assert.fail("no error"), (e) => e);
  assert.ok(err instanceof NotFoundError, String(err));
  assert.equal(err.body.type, "error");
  assert.equal(err.type, err.body.error.type);
  assert.ok(err.requestId);
  await assert.rejects(sluice.request("POST", "/v1/messages", { model: "chat-demo", messages: USE }),
    (e) => e instanceof BadRequestError && /max_tokens/.test(e.message));
  const retries = [];
  const impatient = new Sluice({ baseURL: env.SLUICE_BASE_URL, apiKey: env.SLUICE_API_KEY,
    maxRetries: 2, backoff: 20, onRetry: (info) => retries.push(info) });
  await assert.rejects(impatient.model("empty-demo").messages(USE, { max_tokens: 8 }),
    ServiceUnavailableError);
  await assert.rejects(collect(impatient.model("empty-demo").responses("hi", { stream: true })),
    ServiceUnavailableError);
  assert.equal(retries.length, 4);
});

test("brief 001's call, and streamed tool input, to a Claude backend", async () => {
  const claude = sluice.model("claude-2");
  const pieces = [];
  const text = await claude.generate({ prompt: "解释量子计算 in two words", stream: true,
    onChunk: (piece) => pieces.push(piece) });
  assert.equal(text, "echo: 解释量子计算 in two words");
  assert.ok(pieces.length > 1);
  const stream = claude.messages(USE, { max_tokens: 64, tools: [LOOKUP], stream: true });
  const json = (await collect(stream)).filter((e) => e.delta?.type === "input_json_delta");
  assert.ok(json.length >= 2, JSON.stringify(json));
  const answer = await stream.final();
  const [call] = toolCalls(answer);
  assert.deepEqual([call.name, call.arguments], ["lookup", ASKED]);
  const turn = [...USE, { role: "assistant", content: answer.content }, call.result("dry")];
  assert.equal(textOf(await claude.messages(turn, { max_tokens: 64, tools: [LOOKUP] })), "tool said: dry");
});

test("messages send anthropic-version, as Anthropic's SDK does; the client's own wins", async () => {
  const sent = [];
  const watching = (headers = {}) => new Sluice({
    baseURL: env.SLUICE_BASE_URL, apiKey: env.SLUICE_API_KEY, headers,
    fetch: (url, init) => { sent.push(init.headers); return globalThis.fetch(url, init); },
  }).model("chat-demo");
  await watching().messages([{ role: "user", content: "hi" }], { max_tokens: 16 });
  await collect(watching().messages([{ role: "user", content: "hi" }],
    { max_tokens: 16, stream: true }));
  await watching({ "Anthropic-Version": "2024-01-01" }).messages(
    [{ role: "user", content: "hi" }], { max_tokens: 16 });
  await watching().chat([{ role: "user", content: "hi" }]);
  assert.deepEqual(sent.map((h) => h["anthropic-version"] ?? h["Anthropic-Version"]),
    ["2023-06-01", "2023-06-01", "2024-01-01", undefined]);
});
