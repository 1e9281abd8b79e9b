"""Structured output beyond the grammar, end to end on the default model: `uniqueItems` kept at
decode time (the OpenAI SDK's `parse` with a pydantic set, instructor, LangChain), and what
`strict` decides: a 400 for a keyword that cannot be enforced, or without it an answer whose
check is reported in `schema_violations`."""

from __future__ import annotations

import copy
import json
from typing import Annotated

import httpx
import instructor
import jsonschema
import openai
import pytest
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field

from tests.grammar_support import longest_sentence

# A prompt that makes the default model repeat a word (its greedy answer without the guard).
REPEATING = ('The same word four times:\n{"colors": ["red", "red", "red", "red"]}\n'
             'The same word four times:\n{"colors": ["blue", "blue", "blue", "blue"]}\n'
             'The same word four times:\n')
COLORS = {"type": "object", "properties": {"colors": {
    "type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 4, "maxItems": 4, "uniqueItems": True}},
    "required": ["colors"], "additionalProperties": False}
# `not` of a test on a string's pattern has no written complement: left to the check (every answer breaks it)
UNSATISFIABLE = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}}, "required": ["name"],
                 "not": {"properties": {"name": {"pattern": "^"}}}}


def _strict(schema: dict, strict: bool = True) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "answer", "strict": strict, "schema": schema}}


# Token budgets that hold the longest answer each grammar allows (`longest_sentence`, checked on the
# grammar served where the answer carries it), so that an answer ends whatever whitespace and strings
# the model picks within the grammar (its choices differ between CPUs). COLORS: at most 480 bytes.
COLORS_BUDGET = 512


def _complete(server, schema: dict, **extra) -> dict:
    body = {"model": server.model, "prompt": REPEATING, "max_tokens": COLORS_BUDGET, "temperature": 0,
            "response_format": _strict(schema), "raw_output": True, **extra}
    response = httpx.post(f"{server.v1}/completions", json=body, timeout=300)
    assert response.status_code == 200, response.text
    for choice in response.json()["choices"]:
        assert longest_sentence(choice["raw_output"]["grammar"]) <= COLORS_BUDGET
    return response.json()


def test_unique_items_are_kept_apart_where_the_model_would_repeat_them(server) -> None:
    repeating = copy.deepcopy(COLORS)
    del repeating["properties"]["colors"]["uniqueItems"]
    free = json.loads(_complete(server, repeating)["choices"][0]["text"])["colors"]
    assert len(set(free)) < len(free)  # without uniqueItems this model repeats the word
    for extra in ({}, {"n": 3, "temperature": 1.0, "seed": 3}, {"logprobs": True, "top_logprobs": 2}):
        for choice in _complete(server, COLORS, **extra)["choices"]:
            assert choice["finish_reason"] == "stop", choice
            jsonschema.validate(json.loads(choice["text"]), COLORS)
            assert "schema_violations" not in choice


def test_unique_items_in_a_stream(server) -> None:
    body = {"model": server.model, "prompt": REPEATING, "max_tokens": COLORS_BUDGET, "temperature": 0, "stream": True,
            "response_format": _strict(COLORS)}
    text = []
    with httpx.stream("POST", f"{server.v1}/completions", json=body, timeout=300) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                text.extend(c["text"] for c in json.loads(line[6:])["choices"])
    jsonschema.validate(json.loads("".join(text)), COLORS)


def test_an_enum_set_is_written_without_a_dead_end(server) -> None:
    schema = {"type": "object", "properties": {"colors": {
        "type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 3, "maxItems": 3,
        "uniqueItems": True}}, "required": ["colors"], "additionalProperties": False}
    choice = _complete(server, schema)["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert sorted(json.loads(choice["text"])["colors"]) == ["blue", "green", "red"]


# Tags bounded in length: with unbounded strings this 135M model, steered off a repeated tag,
# sometimes goes on repeating inside the new one until max_tokens (seen after prompt-cache reuse).
# With these bounds a Pet is at most 578 bytes as JSON, 735 as a tool call (its grammars'
# `longest_sentence`), within PET_BUDGET and the 1024-token slot beside a 240-token tools prompt:
# the answer ends whatever whitespace the model picks.
Tag = Annotated[str, Field(max_length=10)]
PET_BUDGET = 780


class Pet(BaseModel):
    name: str = Field(max_length=16)
    tags: set[Tag] = Field(min_length=2, max_length=4)


def test_openai_sdk_parse_with_a_pydantic_set(server) -> None:
    with openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0) as client:
        result = client.chat.completions.parse(
            model=server.model, temperature=0, max_tokens=PET_BUDGET, response_format=Pet,
            messages=[{"role": "user", "content": "Describe a pet dog with the tag 'dog' twice."}])
    pet = result.choices[0].message.parsed
    assert isinstance(pet, Pet) and 2 <= len(pet.tags) <= 4


@pytest.mark.parametrize("mode", [instructor.Mode.JSON_SCHEMA, instructor.Mode.TOOLS])
def test_instructor(server, mode: instructor.Mode) -> None:
    client = instructor.from_openai(openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0), mode=mode)
    pet = client.chat.completions.create(
        model=server.model, temperature=0, max_tokens=PET_BUDGET, response_model=Pet, max_retries=0,
        messages=[{"role": "user", "content": "Describe a pet cat with two tags."}])
    assert isinstance(pet, Pet) and 2 <= len(pet.tags) <= 4


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_with_structured_output(server, method: str) -> None:
    model = ChatOpenAI(base_url=server.v1, api_key="unused", model=server.model, temperature=0, max_tokens=PET_BUDGET,
                       max_retries=0)
    pet = model.with_structured_output(Pet, method=method).invoke("Describe a pet rabbit with two tags.")
    assert isinstance(pet, Pet) and 2 <= len(pet.tags) <= 4


def test_a_keyword_a_strict_schema_cannot_enforce_is_a_400(server) -> None:
    body = {"model": server.model, "prompt": "A cat:", "max_tokens": 20, "response_format": _strict(UNSATISFIABLE)}
    response = httpx.post(f"{server.v1}/completions", json=body, timeout=60)
    assert response.status_code == 400
    assert "`not`" in response.json()["error"]["message"]


@pytest.mark.parametrize("response_format", [_strict(UNSATISFIABLE, strict=False), {"type": "json_schema",
                                             "json_schema": UNSATISFIABLE}, {"type": "json_object",
                                             "schema": UNSATISFIABLE}], ids=["strict-false", "bare", "schema-field"])
def test_without_strict_a_broken_answer_says_so(server, response_format: dict) -> None:
    body = {"model": server.model, "max_tokens": 160, "temperature": 0, "response_format": response_format,
            "messages": [{"role": "user", "content": "Name a cat, as JSON."}]}
    choice = httpx.post(f"{server.v1}/chat/completions", json={**body, "raw_output": True},
                        timeout=120).json()["choices"][0]
    assert longest_sentence(choice["raw_output"]["grammar"]) <= 160  # the budget holds any answer allowed
    assert choice["finish_reason"] == "stop"
    assert json.loads(choice["message"]["content"])["name"]  # the grammar held everything else
    assert choice["schema_violations"][0]["keyword"] == "not"
    assert choice["schema_violations"][0]["path"] == ""
    streamed = []
    with httpx.stream("POST", f"{server.v1}/chat/completions", json={**body, "stream": True}, timeout=120) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                streamed.extend(c for c in json.loads(line[6:])["choices"] if c.get("finish_reason"))
    assert [v["keyword"] for v in streamed[-1]["schema_violations"]] == ["not"]


def test_an_answer_that_keeps_a_deferred_keyword_carries_no_report(server) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}}, "required": ["name"],
              "not": {"properties": {"name": {"pattern": "^$"}}, "required": ["name"]}}  # not an empty name
    body = {"model": server.model, "max_tokens": 160, "temperature": 0, "response_format": _strict(schema, False),
            "messages": [{"role": "user", "content": "Name a cat, as JSON."}], "raw_output": True}
    choice = httpx.post(f"{server.v1}/chat/completions", json=body, timeout=120).json()["choices"][0]
    assert longest_sentence(choice["raw_output"]["grammar"]) <= 160 and choice["finish_reason"] == "stop"
    assert "schema_violations" not in choice and json.loads(choice["message"]["content"])["name"]


def _tool(strict: bool | None) -> dict:
    function = {"name": "adopt", "parameters": UNSATISFIABLE}
    if strict is not None:
        function["strict"] = strict
    return {"type": "function", "function": function}


def test_tool_arguments_are_checked_unless_the_tool_is_strict(server) -> None:
    body = {"model": server.model, "max_tokens": 320, "temperature": 0, "tool_choice": "required",
            "parallel_tool_calls": False, "messages": [{"role": "user", "content": "Adopt a cat named Tom."}],
            "raw_output": True}
    refused = httpx.post(f"{server.v1}/chat/completions", json={**body, "tools": [_tool(True)]}, timeout=120)
    assert refused.status_code == 400 and "adopt" in refused.json()["error"]["message"]
    choice = httpx.post(f"{server.v1}/chat/completions", json={**body, "tools": [_tool(None)]},
                        timeout=120).json()["choices"][0]
    assert longest_sentence(choice["raw_output"]["grammar"]) <= 320  # the budget holds any call allowed
    assert choice["finish_reason"] == "tool_calls"
    assert choice["schema_violations"] == [{"keyword": "not", "path": "", "tool": "adopt",
                                            "message": choice["schema_violations"][0]["message"]}]


def test_tool_arguments_keep_their_items_apart(server) -> None:
    tags = {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 4, "maxItems": 4,
            "uniqueItems": True}
    tool = {"type": "function", "function": {"name": "tag", "strict": True, "parameters": {
        "type": "object", "properties": {"tags": tags}, "required": ["tags"], "additionalProperties": False}}}
    body = {"model": server.model, "max_tokens": 672, "temperature": 0, "tool_choice": "required",
            "parallel_tool_calls": False, "tools": [tool], "raw_output": True,
            "messages": [{"role": "user", "content": "Tag this photo with the word cat four times."}]}
    choice = httpx.post(f"{server.v1}/chat/completions", json=body, timeout=120).json()["choices"][0]
    assert longest_sentence(choice["raw_output"]["grammar"]) <= 672  # the budget holds any call allowed
    assert choice["finish_reason"] == "tool_calls", choice
    arguments = json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"])
    jsonschema.validate(arguments, tool["function"]["parameters"])
    assert "schema_violations" not in choice
