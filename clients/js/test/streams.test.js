// Stream reading and assembling (pure logic), on the event sequences Anthropic's and
// OpenAI's API references document; the same code against the real gateway is in
// gateway.test.js, tools.test.js and the browser Worker test.
import assert from "node:assert/strict";
import { test } from "node:test";

import { BadRequestError, RateLimitError, ServiceUnavailableError, textOf, toolCalls } from "../src/index.js";
import { ChatAssembler, MessageAssembler, ResponseAssembler, Stream, sseEvents } from "../src/streams.js";

const frame = (e) => `${e.type ? `event: ${e.type}\n` : ""}data: ${JSON.stringify(e)}\n\n`;
const answer = (text) => new Response(text, {
  headers: { "content-type": "text/event-stream", "x-request-id": "req-1" } });
const streamOf = (events, Assembler, tail = "") =>
  new Stream(() => sseEvents(answer(events.map(frame).join("") + tail)), new Assembler());

const delta = (index, d) => ({ type: "content_block_delta", index, delta: d });
const ANTHROPIC = [
  { type: "message_start", message: { id: "msg_1", type: "message", role: "assistant",
    content: [], stop_reason: null, usage: { input_tokens: 472, output_tokens: 2 } } },
  { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
  { type: "ping" },
  delta(0, { type: "text_delta", text: "Okay, let's check" }),
  delta(0, { type: "text_delta", text: " the weather." }),
  { type: "content_block_stop", index: 0 },
  { type: "content_block_start", index: 1,
    content_block: { type: "tool_use", id: "toolu_1", name: "get_weather", input: {} } },
  delta(1, { type: "input_json_delta", partial_json: "" }),
  delta(1, { type: "input_json_delta", partial_json: "{\"location\":" }),
  delta(1, { type: "input_json_delta", partial_json: " \"San Francisco, CA\"}" }),
  { type: "content_block_stop", index: 1 },
  { type: "message_delta", delta: { stop_reason: "tool_use" }, usage: { output_tokens: 89 } },
  { type: "message_stop" },
];

test("Anthropic events assemble into the message", async () => {
  const message = await streamOf(ANTHROPIC, MessageAssembler).final();
  assert.equal(textOf(message), "Okay, let's check the weather.");
  assert.equal(message.stop_reason, "tool_use");
  assert.deepEqual(message.usage, { input_tokens: 472, output_tokens: 89 });
  const [call] = toolCalls(message);
  assert.deepEqual([call.id, call.name, call.arguments], ["toolu_1", "get_weather", { location: "San Francisco, CA" }]);
  assert.deepEqual(call.result("18 °C"), { role: "user",
    content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "18 °C" }] });
});

test("Responses events assemble into the response", async () => {
  const at = (i, d) => ({ type: "response.function_call_arguments.delta", output_index: i, delta: d });
  const text = (d) => ({ type: "response.output_text.delta", output_index: 1, content_index: 0, delta: d });
  const events = [
    { type: "response.created", response: { id: "resp_1", object: "response", status: "in_progress", output: [] } },
    { type: "response.output_item.added", output_index: 0,
      item: { type: "function_call", id: "fc_1", call_id: "call_1", name: "get_weather", arguments: "" } },
    at(0, "{\"location\":"), at(0, " \"Paris\"}"),
    { type: "response.output_item.added", output_index: 1, item: { type: "message", role: "assistant", content: [] } },
    text("Checking"), text(" now."),
    { type: "response.completed", response: { id: "resp_1", object: "response", status: "completed",
      output: [], usage: { output_tokens: 7 } } },
  ];
  const response = await streamOf(events, ResponseAssembler).final();
  assert.equal(response.status, "completed");
  assert.equal(textOf(response), "Checking now.");
  const [call] = toolCalls(response);
  assert.deepEqual([call.id, call.arguments], ["call_1", { location: "Paris" }]);
  assert.deepEqual(call.result({ c: 21 }), { type: "function_call_output", call_id: "call_1", output: "{\"c\":21}" });
});

test("chat chunks assemble parallel calls; nothing after [DONE]", async () => {
  const chunk = (d, finish = null) => ({ id: "c1", choices: [{ index: 0, delta: d, finish_reason: finish }] });
  const call = (index, extra) => chunk({ tool_calls: [{ index, ...extra }] });
  const events = [chunk({ role: "assistant", content: null }),
    call(0, { id: "a", function: { name: "f", arguments: "" } }),
    call(1, { id: "b", function: { name: "g", arguments: "{\"y\"" } }),
    call(0, { function: { arguments: "{\"x\": 1}" } }), call(1, { function: { arguments: ": 2}" } }),
    chunk({}, "tool_calls")];
  const whole = await streamOf(events, ChatAssembler, "data: [DONE]\n\n" + frame(chunk({ content: "x" }))).final();
  assert.equal(whole.choices[0].message.content, null);
  assert.deepEqual(toolCalls(whole).map((c) => [c.id, c.name, c.arguments]), [["a", "f", { x: 1 }], ["b", "g", { y: 2 }]]);
});

test("error events throw typed errors where they arrive", async () => {
  const cases = [
    [{ type: "error", error: { type: "overloaded_error", message: "busy" } }, ServiceUnavailableError, 503],
    [{ type: "error", code: "rate_limit_exceeded", message: "slow down" }, RateLimitError, 429],
    [{ type: "response.failed", response: { error: { code: "invalid_prompt", message: "no" } } }, BadRequestError, 400],
  ];
  for (const [event, Cls, code] of cases) {
    const stream = streamOf([ANTHROPIC[0], event], MessageAssembler);
    assert.equal((await stream.next()).value.type, "message_start");
    await assert.rejects(stream.next(), (e) => e instanceof Cls && e.code === code && e.requestId === "req-1");
  }
});
