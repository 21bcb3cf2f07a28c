"""An agent loop with the `openai-agents` package (the OpenAI Agents SDK), unchanged,
through Sluice's /v1/responses to a chat backend: a function tool, two turns (the
model calls the tool, then answers from its result)."""
from __future__ import annotations

import asyncio

import pytest
from agents import (Agent, OpenAIResponsesModel, RunConfig, Runner, function_tool,
                    set_tracing_disabled)
from openai import AsyncOpenAI


@pytest.fixture
def gw(gateway, helpers, backends):
    r = gateway.push(helpers.make_snapshot(1, {
        "chat-demo": (5000, [backends["openai-a"].entry(1)])}))
    assert r.status_code == 200, r.text
    return gateway


def test_an_agent_calls_a_function_tool_and_answers_from_it(gw, helpers):
    set_tracing_disabled(True)   # no tracing exporter: nothing outside this machine
    seen = []

    @function_tool
    def lookup(query: str) -> str:
        """Look a city's weather up."""
        seen.append(query)
        return f"sunny in {query}"

    client = AsyncOpenAI(base_url=gw.url + "/v1", api_key=helpers.KEY, max_retries=0)
    agent = Agent(name="helper", instructions="Use the tool.", tools=[lookup],
                  model=OpenAIResponsesModel(model="chat-demo", openai_client=client))
    result = Runner.run_sync(agent, "use a tool paris", run_config=RunConfig(
        tracing_disabled=True))
    assert seen == ["paris"]
    assert result.final_output == "tool said: sunny in paris"
    # two model turns: the call, then the answer
    assert len(result.raw_responses) == 2
    assert result.raw_responses[0].output[0].type == "function_call"


def test_an_agent_streams_through_the_gateway(gw, helpers):
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=gw.url + "/v1", api_key=helpers.KEY, max_retries=0)
    agent = Agent(name="plain", model=OpenAIResponsesModel(model="chat-demo",
                                                           openai_client=client))

    async def run() -> tuple[str, list[str]]:
        streamed = Runner.run_streamed(agent, "one two", run_config=RunConfig(
            tracing_disabled=True))
        kinds = [e.type async for e in streamed.stream_events()]
        return streamed.final_output, kinds

    final, kinds = asyncio.run(run())
    assert final == "echo: one two"
    assert "raw_response_event" in kinds
