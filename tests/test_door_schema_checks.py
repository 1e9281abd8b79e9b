"""`schema_violations` in every door that takes a schema: an answer checked against what its grammar
did not enforce says how it breaks the schema, whole and streamed, in each API's answer (Anthropic's
message and its `message_delta`, the Responses object, Ollama's last object, TGI's answer and its
last event), and says nothing when it keeps it.

The schema's `not` keyword cannot be enforced by a grammar, and this one is broken by every name
(`{"pattern": "^"}` matches any string), so any answer the grammar allows breaks it on any CPU; the
budget holds the longest answer the grammar allows (see test_structured_strictness.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import pytest

from tests.test_structured_strictness import UNSATISFIABLE

BUDGET = 160
KEPT = {**UNSATISFIABLE, "not": {"properties": {"name": {"pattern": "^$"}}, "required": ["name"]}}  # not an empty name
ASK = "Name a cat, as JSON."


def _anthropic(model: str, schema: dict, stream: bool) -> dict:
    return {"model": model, "max_tokens": BUDGET, "temperature": 0, "stream": stream,
            "output_config": {"format": {"type": "json_schema", "schema": schema}},
            "messages": [{"role": "user", "content": ASK}]}


def _responses(model: str, schema: dict, stream: bool) -> dict:
    return {"model": model, "max_output_tokens": BUDGET, "temperature": 0, "stream": stream, "input": ASK,
            "text": {"format": {"type": "json_schema", "name": "cat", "schema": schema, "strict": False}}}


def _ollama(model: str, schema: dict, stream: bool) -> dict:
    return {"model": model, "stream": stream, "format": schema, "options": {"num_predict": BUDGET, "temperature": 0},
            "messages": [{"role": "user", "content": ASK}]}


def _tgi(model: str, schema: dict, stream: bool) -> dict:
    return {"model": model, "inputs": f"{ASK}\n", "stream": stream,
            "parameters": {"max_new_tokens": BUDGET, "grammar": {"type": "json", "value": schema}}}


def _sse_last(lines: list[str], wanted: Callable[[dict], bool]) -> dict:
    events = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
    return [event for event in events if wanted(event)][-1]


# door -> (path, body, the answer's text and its violations from a whole answer, the same from a stream's lines)
DOORS: dict[str, tuple[str, Callable[[str, dict, bool], dict], Callable[[Any], tuple[str, Any]],
                       Callable[[list[str]], Any]]] = {
    "anthropic": ("/v1/messages", _anthropic,
                  lambda body: (body["content"][-1]["text"], body.get("schema_violations")),
                  lambda lines: _sse_last(lines, lambda e: e["type"] == "message_delta").get("schema_violations")),
    "responses": ("/v1/responses", _responses,
                  lambda body: (body["output"][-1]["content"][0]["text"], body.get("schema_violations")),
                  lambda lines: _sse_last(lines, lambda e: e["type"] == "response.completed")["response"]
                  .get("schema_violations")),
    "ollama": ("/api/chat", _ollama,
               lambda body: (body["message"]["content"], body.get("schema_violations")),
               lambda lines: [json.loads(line) for line in lines if line.strip()][-1].get("schema_violations")),
    "tgi": ("/", _tgi,
            lambda body: (body[0]["generated_text"], body[0].get("schema_violations")),
            lambda lines: _sse_last(lines, lambda e: e.get("generated_text") is not None).get("schema_violations")),
}


@pytest.mark.parametrize("door", list(DOORS))
def test_a_broken_answer_says_so_in_every_door(server, door: str) -> None:
    path, body, whole, streamed = DOORS[door]
    response = httpx.post(f"{server.base_url}{path}", json=body(server.model, UNSATISFIABLE, False), timeout=120)
    assert response.status_code == 200, response.text
    text, violations = whole(response.json())
    assert json.loads(text)["name"]  # the grammar held everything else
    assert [v["keyword"] for v in violations] == ["not"] and violations[0]["path"] == "", violations
    with httpx.stream("POST", f"{server.base_url}{path}", json=body(server.model, UNSATISFIABLE, True),
                      timeout=120) as answer:
        lines = list(answer.iter_lines())
    assert [v["keyword"] for v in streamed(lines)] == ["not"], lines[-3:]


@pytest.mark.parametrize("door", list(DOORS))
def test_an_answer_that_keeps_its_schema_carries_no_report(server, door: str) -> None:
    path, body, whole, _ = DOORS[door]
    response = httpx.post(f"{server.base_url}{path}", json=body(server.model, KEPT, False), timeout=120)
    assert response.status_code == 200, response.text
    text, violations = whole(response.json())
    assert json.loads(text)["name"] and violations is None


def test_the_anthropic_sdk_reads_the_report(server) -> None:
    body = _anthropic(server.model, UNSATISFIABLE, False)
    with anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0) as client:
        message = client.messages.create(model=server.model, max_tokens=BUDGET, messages=body["messages"],
                                         extra_body={"output_config": body["output_config"], "temperature": 0})
    assert message.stop_reason == "end_turn"
    assert [v["keyword"] for v in (message.model_extra or {})["schema_violations"]] == ["not"]
