// Tool calls through the gateway's chat endpoint to a backend whose model calls tools
// (tests/gateway/tool_backend.py: "use a tool <rest>" calls the first tool with
// {query: rest}, "use tools <rest>" every tool at once, a tool message is answered
// "tool said: <content>"). Run by tests/gateway/test_client_js.py, which serves it as
// the model "tools-demo".
import assert from "node:assert/strict";
import { test } from "node:test";

import { BadRequestError, Sluice, Stream, ToolCall, textOf, toolCalls } from "../src/index.js";

const env = process.env;
const model = new Sluice({ baseURL: env.SLUICE_BASE_URL, apiKey: env.SLUICE_API_KEY })
  .model("tools-demo");
const LOOKUP = { type: "function", function: { name: "lookup", description: "look a thing up",
  parameters: { type: "object", properties: { query: { type: "string" } } } } };
// the same kind of tool in Anthropic's shape: the SDK sends it in chat's
const CLOCK = { name: "clock", input_schema: { type: "object", properties: { query: { type: "string" } } } };

test("a tool call and its result", async () => {
  const question = [{ role: "user", content: "use a tool the weather in Oslo" }];
  const answer = await model.chat(question, { tools: [LOOKUP] });
  assert.equal(answer.choices[0].finish_reason, "tool_calls");
  const calls = toolCalls(answer);
  assert.deepEqual(calls, [new ToolCall("call_0", "lookup", { query: "the weather in Oslo" }, "chat")]);
  const turn = [...question, answer.choices[0].message, calls[0].result("rain, 12 °C")];
  const follow = await model.chat(turn, { tools: [LOOKUP] });
  assert.equal(textOf(follow), "tool said: rain, 12 °C");
  assert.deepEqual(toolCalls(follow), []);
});

test("streamed parallel calls are assembled", async () => {
  const stream = model.chat([{ role: "user", content: "use tools Oslo and Bergen" }],
    { tools: [LOOKUP, CLOCK], stream: true });
  assert.ok(stream instanceof Stream);
  const pieces = [];
  for await (const chunk of stream) {
    for (const call of chunk.choices[0].delta.tool_calls || []) {
      if (call.function.arguments) pieces.push(call.function.arguments);
    }
  }
  assert.ok(pieces.length > 6 && pieces.every((p) => p.length <= 4), JSON.stringify(pieces));
  const whole = await stream.final();
  assert.equal(whole.choices[0].finish_reason, "tool_calls");
  const calls = toolCalls(whole);
  assert.deepEqual(calls.map((c) => [c.id, c.name, c.arguments]), [
    ["call_0", "lookup", { query: "Oslo and Bergen", n: 0 }],
    ["call_1", "clock", { query: "Oslo and Bergen", n: 1 }]]);
  const turn = [{ role: "user", content: "use tools Oslo and Bergen" }, whole.choices[0].message,
    calls[0].result("wet"), calls[1].result({ hour: 9 })];
  const again = await model.chat(turn, { tools: [LOOKUP, CLOCK], stream: true }).final();
  assert.equal(textOf(again), 'tool said: wet; {"hour":9}');
});

test("generate({ prompt, stream, onChunk }) as the brief writes it", async () => {
  const pieces = [];
  const text = await model.generate({ prompt: "more plain words", stream: true,
    onChunk: (piece) => pieces.push(piece) });
  assert.equal(text, "echo: more plain words");
  assert.ok(pieces.length > 1);
});

test("a bad tool is refused naming its param", async () => {
  const bad = { type: "function", function: { name: "no spaces allowed", parameters: {} } };
  const err = await model.chat([{ role: "user", content: "use a tool x" }], { tools: [bad] })
    .then(() => assert.fail("no error"), (e) => e);
  assert.ok(err instanceof BadRequestError, String(err));
  assert.match(JSON.stringify(err.body), /tools\[0\]\.function\.name/);
});
