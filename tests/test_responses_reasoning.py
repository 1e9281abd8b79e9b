"""The Responses API on reasoning templates, and stored conversations across a server restart.

The default model is served with DeepSeek-R1's template (its generation prompt opens `<think>`,
which the tiny model never closes: all it writes is reasoning) and with Qwen3's (which renders
an assistant message's reasoning in the current turn: what a sent-back reasoning item becomes).
One server of its own for the module, on a data folder of its own: the last test restarts it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from tests.conftest import QWEN3, R1, RunningServer, start_server, stop_server
from tests.test_responses_e2e import WEATHER

ASK = "Why is the sky blue?"
CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
RESULT = {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"}


@dataclass
class Served:
    server: RunningServer
    data_dir: Path
    args: tuple[str, ...]

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.server.v1, api_key="unused", max_retries=0)

    def start(self) -> None:
        self.server = start_server(*self.args, env={"FIRESIDE_DATA_DIR": str(self.data_dir)})

    def restart(self) -> None:
        stop_server(self.server)
        self.start()


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory, model_path) -> Iterator[Served]:
    served = Served(None, tmp_path_factory.mktemp("responses-data"),  # type: ignore[arg-type]
                    ("--model", str(model_path), "--alias", "r1", "--chat-template", str(R1),
                     "--model", str(model_path), "--alias", "qwen3", "--chat-template", str(QWEN3),
                     "--ctx-size", "1024", "--parallel", "1"))
    served.start()
    yield served
    stop_server(served.server)


def create(client: openai.OpenAI, **fields):
    return client.responses.create(**{"model": "qwen3", "temperature": 0, **fields})


def test_reasoning_comes_back_as_a_reasoning_item(qwen3) -> None:
    client = qwen3.client()
    response = create(client, model="r1", input=ASK, reasoning={"effort": "medium", "summary": "auto"},
                      max_output_tokens=10,
                      include=["reasoning.encrypted_content"])
    assert response.status == "incomplete" and [item.type for item in response.output] == ["reasoning"]
    item = response.output[0]
    assert item.id.startswith("rs_") and item.summary == [] and item.status == "incomplete"
    [part] = item.content
    assert part.type == "reasoning_text" and part.text and item.encrypted_content
    assert 0 < response.usage.output_tokens_details.reasoning_tokens <= response.usage.output_tokens == 10
    assert (response.reasoning.effort, response.reasoning.summary) == ("medium", "auto")
    assert response.output_text == ""
    # streamed: the reasoning text events, ending in the same item
    body = {"model": "r1", "input": ASK, "temperature": 0, "max_output_tokens": 10, "stream": True,
            "reasoning": {"effort": "medium"}}
    with httpx.stream("POST", f"{qwen3.server.v1}/responses", json=body, timeout=120) as streamed:
        events = [json.loads(line[6:]) for line in streamed.iter_lines() if line.startswith("data: ")]
    names = [event["type"] for event in events]
    deltas = names.count("response.reasoning_text.delta")
    assert deltas >= 1 and names == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        *["response.reasoning_text.delta"] * deltas, "response.reasoning_text.done", "response.content_part.done",
        "response.output_item.done", "response.incomplete"]
    assert events[3]["part"] == {"type": "reasoning_text", "text": ""}
    assert "".join(event.get("delta", "") for event in events) == events[-4]["text"] == part.text
    assert events[-1]["response"]["output"][0]["content"] == [{"type": "reasoning_text", "text": part.text}]
    # effort none switches thinking off in the prompt: a message alone
    off = create(client, input=ASK, reasoning={"effort": "none"}, max_output_tokens=6)
    assert [item.type for item in off.output] == ["message"] and off.output_text
    assert off.usage.output_tokens_details.reasoning_tokens == 0


def test_a_reasoning_item_sent_back_is_rendered_as_reasoning(qwen3) -> None:
    client = qwen3.client()
    first = create(client, model="r1", input=ASK, reasoning={"effort": "medium"}, max_output_tokens=6,
                   include=["reasoning.encrypted_content"])
    reasoning = first.output[0].model_dump(exclude_none=True)
    asked = {"role": "user", "content": ASK}

    def prompt_tokens(*items: dict) -> int:
        return create(client, input=[asked, *items, CALL, RESULT], tools=[WEATHER], max_output_tokens=1,
                      reasoning={"effort": "medium"}).usage.input_tokens

    without = prompt_tokens()
    with_content = prompt_tokens({k: v for k, v in reasoning.items() if k != "encrypted_content"})
    sealed_only = prompt_tokens({k: v for k, v in reasoning.items() if k != "content"})
    assert with_content == sealed_only > without


def test_a_conversation_continues_across_a_restart(qwen3) -> None:
    first = create(qwen3.client(), input="My name is Ada.", reasoning={"effort": "none"}, max_output_tokens=4)
    qwen3.restart()
    client = qwen3.client()
    assert client.responses.retrieve(first.id).model_dump() == first.model_dump()
    follow = create(client, input="What is my name?", previous_response_id=first.id, reasoning={"effort": "none"},
                    max_output_tokens=4)
    by_hand = create(client, reasoning={"effort": "none"}, max_output_tokens=4,
                     input=[{"role": "user", "content": "My name is Ada."}, first.output[0].model_dump(),
                            {"role": "user", "content": "What is my name?"}])
    assert follow.previous_response_id == first.id
    assert (follow.usage.input_tokens, follow.output_text) == (by_hand.usage.input_tokens, by_hand.output_text)
    assert (qwen3.data_dir / "responses.sqlite3").is_file()
