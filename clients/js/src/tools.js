// Tool calls in the three caller APIs' shapes, read and answered the same way:
//
//   const answer = await model.chat(messages, { tools: [weather] });  // or messages() / responses()
//   for (const call of toolCalls(answer)) {
//     call.name, call.arguments;        // "weather", { city: "Oslo" }
//     call.result("12 °C, rain");       // the message or item to send back
//   }
//
// Tools go in as any of the three shapes (OpenAI chat's {type: "function", function:
// {...}}, Anthropic's {name, input_schema}, the Responses API's {type: "function", name,
// parameters}); each call sends them in its own API's shape.

import { jsonObject } from "./streams.js";

export const CHAT = "chat";
export const MESSAGES = "messages";
export const RESPONSES = "responses";

// One call the model asked for: `arguments` is the decoded JSON object (the raw text
// when the model sent text that is not JSON); `api` says which shape it came in and
// which shape result() answers in.
export class ToolCall {
  constructor(id, name, args, api) {
    this.id = id;
    this.name = name;
    this.arguments = args;
    this.api = api;
  }

  // The tool's output as the next request carries it: a chat `tool` message, an
  // Anthropic `tool_result` user turn, or a Responses `function_call_output` item. A
  // non-string output is sent as JSON.
  result(output) {
    const text = typeof output === "string" ? output : JSON.stringify(output);
    if (this.api === MESSAGES) {
      return { role: "user", content: [{ type: "tool_result", tool_use_id: this.id, content: text }] };
    }
    if (this.api === RESPONSES) return { type: "function_call_output", call_id: this.id, output: text };
    return { role: "tool", tool_call_id: this.id, content: text };
  }
}

// The tool calls of an answer of any of the three APIs (a chat completion, an
// Anthropic message, a response), whole or assembled from a stream; [] for none.
export function toolCalls(answer) {
  if (!answer || typeof answer !== "object") return [];
  if (Array.isArray(answer.choices)) {
    return (answer.choices[0]?.message?.tool_calls || []).map((c) =>
      new ToolCall(c.id ?? "", c.function?.name ?? "", jsonObject(c.function?.arguments), CHAT));
  }
  if (answer.type === "message") {
    return (answer.content || []).filter((b) => b.type === "tool_use")
      .map((b) => new ToolCall(b.id ?? "", b.name ?? "", b.input, MESSAGES));
  }
  return (answer.output || []).filter((i) => i.type === "function_call")
    .map((i) => new ToolCall(i.call_id || i.id || "", i.name ?? "", jsonObject(i.arguments), RESPONSES));
}

// The text of an answer of any of the three APIs; "" for none.
export function textOf(answer) {
  if (!answer || typeof answer !== "object") return "";
  if (Array.isArray(answer.choices)) {
    const content = answer.choices[0]?.message?.content;
    return typeof content === "string" ? content : "";
  }
  if (answer.type === "message") {
    return (answer.content || []).filter((b) => b.type === "text").map((b) => b.text || "").join("");
  }
  return (answer.output || []).filter((i) => i.type === "message")
    .flatMap((i) => i.content || []).filter((p) => p.type === "output_text")
    .map((p) => p.text || "").join("");
}

// (name, description, JSON schema) of a tool in any of the three shapes, or null.
function parts(tool) {
  if (!tool || typeof tool !== "object") return null;
  const fn = tool.function;
  if (tool.type === "function" && fn && typeof fn === "object") {
    return [fn.name, fn.description, fn.parameters];
  }
  if ("input_schema" in tool || ((tool.type === undefined || tool.type === "custom") && "name" in tool)) {
    return [tool.name, tool.description, tool.input_schema];
  }
  if (tool.type === "function" && "name" in tool) return [tool.name, tool.description, tool.parameters];
  return null;
}

// `tools` in `api`'s shape; a tool in no known shape goes as it is (the gateway says
// what is wrong with it).
export function toolsFor(api, tools) {
  if (tools === undefined || tools === null) return tools;
  return tools.map((tool) => {
    const p = parts(tool);
    if (!p) return tool;
    const [name, description, given] = p;
    const schema = given ?? { type: "object", properties: {} };
    let out;
    if (api === MESSAGES) out = { name, input_schema: schema };
    else if (api === RESPONSES) out = { type: "function", name, parameters: schema };
    else out = { type: "function", function: { name, parameters: schema } };
    if (description !== undefined && description !== null) {
      (api === CHAT ? out.function : out).description = description;
    }
    return out;
  });
}
