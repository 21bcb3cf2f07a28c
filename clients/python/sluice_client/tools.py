"""Tool calls in the three caller APIs' shapes, read and answered the same way:

    answer = model.chat(messages, tools=[weather])          # or messages() / responses()
    for call in tool_calls(answer):
        call.name, call.arguments                           # "weather", {"city": "Oslo"}
        call.result("12 °C, rain")                          # the message or item to send back

Tools go in as any of the three shapes (OpenAI chat's {"type": "function", "function":
{...}}, Anthropic's {"name", "input_schema"}, the Responses API's {"type": "function",
"name", "parameters"}); each call sends them in its own API's shape.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

CHAT, MESSAGES, RESPONSES = "chat", "messages", "responses"


@dataclass
class ToolCall:
    """One call the model asked for. `arguments` is the decoded JSON object (the raw
    text when the model sent text that is not JSON); `api` says which shape it came in
    and which shape `result()` answers in."""

    id: str
    name: str
    arguments: Any
    api: str

    def result(self, output: Any) -> dict:
        """The tool's output as the next request carries it: a chat `tool` message,
        an Anthropic `tool_result` user turn, or a Responses `function_call_output`
        item. A non-string output is sent as JSON."""
        text = output if isinstance(output, str) else json.dumps(output)
        if self.api == MESSAGES:
            return {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": self.id, "content": text}]}
        if self.api == RESPONSES:
            return {"type": "function_call_output", "call_id": self.id, "output": text}
        return {"role": "tool", "tool_call_id": self.id, "content": text}


def tool_calls(answer: Any) -> list:
    """The tool calls of an answer of any of the three APIs (a chat completion, an
    Anthropic message, a response), whole or assembled from a stream; [] for none."""
    if not isinstance(answer, dict):
        return []
    if isinstance(answer.get("choices"), list):
        choice = answer["choices"][0] if answer["choices"] else {}
        calls = (choice.get("message") or {}).get("tool_calls") or []
        return [ToolCall(c.get("id", ""), (c.get("function") or {}).get("name", ""),
                         _decoded((c.get("function") or {}).get("arguments")), CHAT)
                for c in calls]
    if answer.get("type") == "message":
        return [ToolCall(b.get("id", ""), b.get("name", ""), b.get("input"), MESSAGES)
                for b in answer.get("content") or () if b.get("type") == "tool_use"]
    return [ToolCall(i.get("call_id") or i.get("id", ""), i.get("name", ""),
                     _decoded(i.get("arguments")), RESPONSES)
            for i in answer.get("output") or () if i.get("type") == "function_call"]


def text_of(answer: Any) -> str:
    """The text of an answer of any of the three APIs (its first choice's, its text
    blocks', its output_text parts'); "" for none."""
    if not isinstance(answer, dict):
        return ""
    if isinstance(answer.get("choices"), list):
        choice = answer["choices"][0] if answer["choices"] else {}
        content = (choice.get("message") or {}).get("content")
        return content if isinstance(content, str) else ""
    if answer.get("type") == "message":
        return "".join(b.get("text", "") for b in answer.get("content") or ()
                       if b.get("type") == "text")
    return "".join(p.get("text", "") for i in answer.get("output") or ()
                   if i.get("type") == "message"
                   for p in i.get("content") or () if p.get("type") == "output_text")


def tools_for(api: str, tools: Optional[list]) -> Optional[list]:
    """`tools` in `api`'s shape; a tool in no known shape goes as it is (the gateway
    says what is wrong with it)."""
    if tools is None:
        return None
    out = []
    for tool in tools:
        name, description, schema = _parts(tool)
        if name is None:
            out.append(tool)
            continue
        schema = schema if schema is not None else {"type": "object", "properties": {}}
        if api == MESSAGES:
            t = {"name": name, "input_schema": schema}
        elif api == RESPONSES:
            t = {"type": "function", "name": name, "parameters": schema}
        else:
            t = {"type": "function", "function": {"name": name, "parameters": schema}}
        if description is not None:
            (t["function"] if api == CHAT else t)["description"] = description
        out.append(t)
    return out


def _parts(tool: Any) -> tuple:
    """(name, description, JSON schema) of a tool in any of the three shapes."""
    if not isinstance(tool, dict):
        return None, None, None
    fn = tool.get("function")
    if tool.get("type") == "function" and isinstance(fn, dict):
        return fn.get("name"), fn.get("description"), fn.get("parameters")
    if "input_schema" in tool or (tool.get("type") in (None, "custom") and "name" in tool):
        return tool.get("name"), tool.get("description"), tool.get("input_schema")
    if tool.get("type") == "function" and "name" in tool:
        return tool.get("name"), tool.get("description"), tool.get("parameters")
    return None, None, None


def _decoded(arguments: Any) -> Any:
    if not isinstance(arguments, str):
        return arguments if arguments is not None else {}
    if not arguments.strip():
        return {}
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments
