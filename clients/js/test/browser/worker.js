// The SDK inside a browser's Web Worker (a module worker, no DOM, no process): each
// named check runs against the gateway the page gives and reports what it saw; the
// Python test asserts on it. Errors are reported by class, not thrown, so one broken
// check does not hide the others.
import { Sluice, toolCalls, textOf } from "../../src/index.js";

const seen = (err) => ({ error: err.constructor.name, code: err.code, type: err.type,
  requestId: err.requestId, message: err.message });

const TOOL = { name: "lookup", input_schema: { type: "object", properties: { query: { type: "string" } } } };

const CHECKS = {
  async scope() {
    return { global: self.constructor.name, window: typeof window, process: typeof process };
  },
  async generate({ client }) {
    return client.model("chat-demo").generate("hi from a worker");
  },
  async stream({ client }) {
    const pieces = [];
    for await (const piece of client.model("chat-demo").generate("one two three", { stream: true })) {
      pieces.push(piece);
    }
    return pieces;
  },
  async tools({ client }) {
    const stream = client.model("tools-demo").chat(
      [{ role: "user", content: "use a tool from the worker" }], { tools: [TOOL], stream: true });
    let chunks = 0;
    for await (const _ of stream) chunks += 1;
    const calls = toolCalls(await stream.final());
    return { chunks, calls: calls.map((c) => ({ id: c.id, name: c.name, arguments: c.arguments })) };
  },
  async notFound({ client }) {
    return client.model("no-such-model").generate("hi").then(() => "no error", seen);
  },
  async retries({ base, key }) {
    const retried = [];
    const client = new Sluice({ baseURL: base, apiKey: key, maxRetries: 2, backoff: 20,
      onRetry: (info) => retried.push(info.error.code) });
    const err = await client.model("empty-demo").generate("hi").then(() => null, seen);
    return { retried, err };
  },
  async messages({ client }) {
    const model = client.model("claude-2");   // an Anthropic-protocol backend
    const answer = await model.messages([{ role: "user", content: "use a tool in a worker" }],
      { max_tokens: 64, tools: [TOOL] });
    const stream = model.messages([{ role: "user", content: "hello worker" }],
      { max_tokens: 64, stream: true });
    const types = [];
    for await (const event of stream) types.push(event.type);
    return { calls: toolCalls(answer).map((c) => [c.name, c.arguments]), types,
      text: textOf(await stream.final()) };
  },
  async responses({ client }) {
    const model = client.model("chat-demo");
    const stream = model.responses("use a tool in a worker", { tools: [TOOL], stream: true });
    const types = [];
    for await (const event of stream) types.push(event.type);
    const whole = await stream.final();
    return { calls: toolCalls(whole).map((c) => [c.name, c.arguments]), types,
      text: textOf(await model.responses("hello worker")) };
  },
};

self.onmessage = async ({ data: { base, key, checks } }) => {
  const client = new Sluice({ baseURL: base, apiKey: key });
  const outcome = {};
  for (const name of checks) {
    try {
      outcome[name] = await CHECKS[name]({ client, base, key });
    } catch (err) {
      outcome[name] = { failed: `${err.constructor.name}: ${err.message}` };
    }
  }
  self.postMessage(outcome);
};
