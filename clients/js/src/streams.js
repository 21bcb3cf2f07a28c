// Server-sent-event streams of the three caller APIs, and their events put back
// together into the answer a call without `stream` would have given:
//
//   const stream = sluice.chat("chat-demo", messages, { stream: true });
//   for await (const chunk of stream) {}   // each event as it arrives
//   await stream.final();                  // the whole completion, tool calls assembled
//
// Chat chunks carry choices[i].delta (text, and tool calls whose arguments come in
// pieces by index); Anthropic's Messages events content_block_start /
// content_block_delta (text_delta, input_json_delta) / message_delta; the Responses
// API's response.output_item.added, response.output_text.delta,
// response.function_call_arguments.delta and response.completed.

import { APIConnectionError, SluiceError, errorFromEvent } from "./errors.js";

function decoded(data, requestId) {
  let event;
  try {
    event = JSON.parse(data);
  } catch {
    throw new SluiceError("a stream event is not JSON", { requestId, body: data });
  }
  if (event && typeof event === "object") {
    const error = errorFromEvent(event, requestId);
    if (error) throw error;
  }
  return event;
}

// The events of an answer's server-sent-event stream, decoded, until [DONE] or its
// end; an error event throws its typed error where it arrives.
export async function* sseEvents(resp) {
  const requestId = resp.headers.get("x-request-id");
  if (!(resp.headers.get("content-type") || "").startsWith("text/event-stream")) {
    yield await resp.json();   // a backend that does not stream answers whole
    return;
  }
  const decoder = new TextDecoder();
  const reader = resp.body.getReader();
  let buffer = "";
  let data = [];
  try {
    for (;;) {
      let chunk;
      try {
        chunk = await reader.read();
      } catch (exc) {
        throw new APIConnectionError("the stream broke", { requestId, cause: exc });
      }
      if (chunk.done) break;
      buffer += decoder.decode(chunk.value, { stream: true });
      let newline;
      while ((newline = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, newline).replace(/\r$/, "");
        buffer = buffer.slice(newline + 1);
        if (line.startsWith("data:")) {
          data.push(line.slice(5).trim());
          continue;
        }
        if (line || !data.length) continue;   // event:, id:, comments; an empty event
        const payload = data.join("\n");
        data = [];
        if (payload === "[DONE]") return;
        yield decoded(payload, requestId);
      }
    }
    if (data.length && data.join("\n") !== "[DONE]") yield decoded(data.join("\n"), requestId);
  } finally {
    reader.cancel().catch(() => {});
  }
}

// An async iterator of a stream's events that also puts them together: final() reads
// what is left and resolves to the whole answer (after a break, to what came). The
// request starts on the first next(); a refused one throws there.
export class Stream {
  constructor(open, assembler) {
    this._open = open;            // () => an async iterator of events
    this._events = null;
    this.assembler = assembler;
  }

  [Symbol.asyncIterator]() { return this; }

  async next() {
    if (!this._events) this._events = this._open();
    const step = await this._events.next();
    if (!step.done) this.assembler.add(step.value);
    return step;
  }

  async return(value) {
    if (!this._events) this._events = (async function* () {})();
    await this._events.return?.();
    return { done: true, value };
  }

  async final() {
    while (!(await this.next()).done) { /* the assembler keeps each event */ }
    return this.assembler.result();
  }
}

export class ChatAssembler {
  constructor() { this.head = null; this.choices = new Map(); this.usage = null; }

  add(chunk) {
    if (!this.head) this.head = { id: chunk.id, created: chunk.created, model: chunk.model };
    if (chunk.usage) this.usage = chunk.usage;
    for (const choice of chunk.choices || []) {
      const index = choice.index ?? 0;
      if (!this.choices.has(index)) {
        this.choices.set(index, { role: "assistant", text: "", hasText: false,
          calls: new Map(), finish: null });
      }
      const into = this.choices.get(index);
      const delta = choice.delta || choice.message || {};
      if (delta.role) into.role = delta.role;
      if (delta.content) { into.text += delta.content; into.hasText = true; }
      for (const call of delta.tool_calls || []) {
        const at = call.index ?? into.calls.size;
        if (!into.calls.has(at)) {
          into.calls.set(at, { id: null, type: "function", function: { name: "", arguments: "" } });
        }
        const whole = into.calls.get(at);
        whole.id = call.id || whole.id;
        whole.function.name += call.function?.name || "";
        whole.function.arguments += call.function?.arguments || "";
      }
      if (choice.finish_reason) into.finish = choice.finish_reason;
    }
  }

  result() {
    const choices = [...this.choices.keys()].sort((a, b) => a - b).map((index) => {
      const c = this.choices.get(index);
      const message = { role: c.role, content: c.hasText ? c.text : null };
      if (c.calls.size) {
        message.tool_calls = [...c.calls.keys()].sort((a, b) => a - b).map((i) => c.calls.get(i));
      }
      return { index, message, finish_reason: c.finish };
    });
    const answer = { ...this.head, object: "chat.completion", choices };
    if (this.usage) answer.usage = this.usage;
    return answer;
  }
}

export class MessageAssembler {
  constructor() { this.message = { type: "message", role: "assistant", content: [] }; this.json = new Map(); }

  add(event) {
    const content = this.message.content;
    switch (event.type) {
      case "message":                   // a backend that answered whole
        Object.assign(this.message, event);
        break;
      case "message_start":
        Object.assign(this.message, event.message, { content: [...(event.message?.content || [])] });
        break;
      case "content_block_start":
        this.message.content[event.index ?? content.length] = { ...event.content_block };
        break;
      case "content_block_delta": {
        const block = content[event.index ?? 0];
        const delta = event.delta || {};
        if (!block) break;
        if (delta.type === "text_delta") block.text = (block.text || "") + (delta.text || "");
        if (delta.type === "input_json_delta") {
          this.json.set(event.index ?? 0, (this.json.get(event.index ?? 0) || "") + (delta.partial_json || ""));
        }
        break;
      }
      case "content_block_stop": {
        const index = event.index ?? 0;
        if (this.json.has(index) && content[index]) {
          content[index].input = jsonObject(this.json.get(index));
          this.json.delete(index);
        }
        break;
      }
      case "message_delta":
        Object.assign(this.message, event.delta || {});
        this.message.usage = { ...(this.message.usage || {}), ...(event.usage || {}) };
        break;
      default:
    }
  }

  result() { return { ...this.message, content: this.message.content.filter(Boolean) }; }
}

export class ResponseAssembler {
  constructor() { this.response = { object: "response", output: [] }; this.items = new Map(); }

  add(event) {
    const item = this.items.get(event.output_index ?? 0);
    const part = () => {
      const parts = (item.content ||= []);
      const at = event.content_index ?? 0;
      while (parts.length <= at) parts.push({ type: "output_text", text: "" });
      return parts[at];
    };
    if (event.object === "response") {   // a backend that answered whole
      Object.assign(this.response, event);
      return;
    }
    switch (event.type) {
      case "response.created": case "response.in_progress":
      case "response.completed": case "response.incomplete":
        for (const [k, v] of Object.entries(event.response || {})) {
          if (k !== "output" || (Array.isArray(v) && v.length)) this.response[k] = v;
        }
        break;
      case "response.output_item.added": {
        const added = { ...event.item };
        if (added.type === "message") added.content = [...(added.content || [])];
        this.items.set(event.output_index ?? this.items.size, added);
        break;
      }
      case "response.output_item.done":
        if (event.item) this.items.set(event.output_index ?? 0, event.item);
        break;
      case "response.content_part.added":
        if (item) Object.assign(part(), event.part || {});
        break;
      case "response.output_text.delta":
        if (item) { const p = part(); p.text = (p.text || "") + (event.delta || ""); }
        break;
      case "response.function_call_arguments.delta":
        if (item) item.arguments = (item.arguments || "") + (event.delta || "");
        break;
      default:
    }
  }

  result() {
    const answer = { ...this.response };
    if (!answer.output?.length) {
      answer.output = [...this.items.keys()].sort((a, b) => a - b).map((i) => this.items.get(i));
    }
    return answer;
  }
}

// A tool_use block's input from its pieces: {} for none; the text itself when it is
// not JSON (the caller sees what the model sent).
export function jsonObject(text) {
  if (typeof text !== "string") return text ?? {};
  if (!text.trim()) return {};
  try { return JSON.parse(text); } catch { return text; }
}

export async function* chatTexts(chunks) {
  for await (const chunk of chunks) {
    for (const choice of chunk.choices || []) {
      const piece = (choice.delta || choice.message || {}).content;
      if (piece) yield piece;
    }
  }
}
