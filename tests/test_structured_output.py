"""`response_format` end to end on the default model: every answer parses and validates."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import jsonschema
import openai
import pytest

from tests.grammar_support import longest_sentence
from tests.schema_corpus.check_corpus import format_checker
from tests.structured_schemas import SCHEMAS

SYSTEM = "You answer with JSON only."


# jsonschema's format checks, with stdlib ones where its optional packages are absent
FORMATS = format_checker(jsonschema.Draft202012Validator)


def _ask(server, name: str, topic: str, schema: dict) -> tuple[str, dict, dict]:
    body = {
        "model": server.model, "temperature": 0, "max_tokens": 300,
        "messages": [{"role": "system", "content": SYSTEM},
                     {"role": "user", "content": f"Give {topic} as JSON."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}},
    }
    response = httpx.post(f"{server.v1}/chat/completions", json=body, timeout=300)
    assert response.status_code == 200, response.text
    return name, schema, response.json()


def test_every_answer_validates_against_its_schema(server) -> None:
    assert len(SCHEMAS) >= 30
    with ThreadPoolExecutor(4) as pool:  # the server batches them: --parallel 4
        answers = list(pool.map(lambda s: _ask(server, *s), SCHEMAS))
    failures = []
    for name, schema, answer in answers:
        choice = answer["choices"][0]
        text = choice["message"]["content"]
        try:
            assert choice["finish_reason"] == "stop", f"finish_reason {choice['finish_reason']}"
            jsonschema.validate(json.loads(text), schema, format_checker=FORMATS)
        except (AssertionError, ValueError, jsonschema.ValidationError) as error:
            failures.append(f"{name}: {text!r}: {str(error).splitlines()[0]}")
    assert not failures, "\n".join(failures)


# Token budgets large enough for any answer a bounded schema's grammar admits, whatever whitespace the
# model picks (which differs between CPUs): at most 21 whitespace characters at each place between
# tokens of JSON, up to 6 characters per string character (`\u00XX`), one token at least per byte.
# SIMPLE: 3 places, 10 characters, 9 fixed: at most 134 bytes.
def _completion(server, response_format: dict, **extra) -> httpx.Response:
    body = {"model": server.model, "prompt": "A JSON object describing a cat:", "max_tokens": 160,
            "temperature": 0, "response_format": response_format, **extra}
    return httpx.post(f"{server.v1}/completions", json=body, timeout=120)


SIMPLE = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}}, "required": ["name"],
          "additionalProperties": False}


@pytest.mark.parametrize("response_format", [
    {"type": "json_schema", "json_schema": SIMPLE},
    {"type": "json_schema", "json_schema": json.dumps(SIMPLE)},
    {"type": "json_schema", "json_schema": {"name": "cat", "schema": SIMPLE}},
    {"type": "json_schema", "json_schema": json.dumps({"name": "cat", "schema": SIMPLE, "strict": True})},
    {"type": "json_schema", "schema": SIMPLE},
    {"type": "json_object", "schema": SIMPLE},
], ids=["bare", "string", "wrapper", "wrapper-string", "schema-field", "json-object-with-schema"])
def test_every_way_to_send_a_schema(server, response_format: dict) -> None:
    response = _completion(server, response_format, raw_output=True)
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert longest_sentence(choice["raw_output"]["grammar"]) <= 160  # the budget holds any answer allowed
    assert choice["finish_reason"] == "stop"
    jsonschema.validate(json.loads(choice["text"]), SIMPLE)


def test_json_object_mode_returns_an_object(server) -> None:
    body = {"model": server.model, "temperature": 0, "max_tokens": 100, "response_format": {"type": "json_object"},
            "messages": [{"role": "system", "content": SYSTEM},
                         {"role": "user", "content": "Give the capital of France as a JSON object with one key."}]}
    choice = httpx.post(f"{server.v1}/chat/completions", json=body, timeout=120).json()["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    assert isinstance(json.loads(choice["message"]["content"]), dict)


def test_user_grammar_constrains_the_output(server) -> None:
    grammar = 'root ::= ("yes" | "no") "." '
    response = _completion(server, {"type": "grammar", "grammar": grammar}, prompt="Is water wet? Answer:")
    choice = response.json()["choices"][0]
    assert choice["text"] in ("yes.", "no."), choice
    assert choice["finish_reason"] == "stop"


def test_streamed_output_follows_the_schema_too(server) -> None:
    body = {"model": server.model, "prompt": "A JSON object describing a cat:", "max_tokens": 160, "temperature": 0,
            "stream": True, "response_format": {"type": "json_schema", "json_schema": SIMPLE}}
    text = ""
    with httpx.stream("POST", f"{server.v1}/completions", json=body, timeout=120) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                text += "".join(c["text"] for c in chunk["choices"])
    jsonschema.validate(json.loads(text), SIMPLE)


def test_sampled_choices_follow_the_schema(server) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 5}, "w": SCHEMAS[0][2]},
              "required": ["n", "w"], "additionalProperties": False}
    # 10 places, a name of 30 characters, 3 digits and 25 fixed: at most 423 bytes
    response = _completion(server, {"type": "json_schema", "json_schema": schema}, temperature=1.0, top_p=0.9,
                           n=3, seed=7, max_tokens=450, raw_output=True)
    assert response.status_code == 200, response.text
    for choice in response.json()["choices"]:
        assert longest_sentence(choice["raw_output"]["grammar"]) <= 450
        assert choice["finish_reason"] == "stop", choice
        jsonschema.validate(json.loads(choice["text"]), schema)


def test_openai_sdk_structured_output(server) -> None:
    with openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0) as client:
        result = client.chat.completions.create(
            model=server.model, temperature=0, max_tokens=320,  # 5 places, 30 characters, 19 more: <= 306 bytes
            messages=[{"role": "user", "content": "Name a person and their age, as JSON."}],
            response_format={"type": "json_schema", "json_schema": {"name": "person", "strict": True,
                                                                    "schema": SCHEMAS[0][2]}},
            extra_body={"raw_output": True})
    assert longest_sentence(result.choices[0].model_extra["raw_output"]["grammar"]) <= 320
    jsonschema.validate(json.loads(result.choices[0].message.content), SCHEMAS[0][2])


@pytest.mark.parametrize("response_format, words", [
    ({"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": {
        "type": "object", "properties": {"a": {"not": {"type": "string", "pattern": "^x"}}}}}}, ["not", "/properties/a"]),
    ({"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": {
        "type": "array", "contains": {"const": 1}, "minContains": 2}}}, ["minContains", "/"]),
    ({"type": "json_schema", "json_schema": {"$ref": "https://example.com/schema.json"}}, ["$ref", "remote"]),
    ({"type": "json_schema", "json_schema": "{not json"}, ["not valid JSON"]),
    ({"type": "json_schema"}, ["needs a schema"]),
    ({"type": "json_schema", "json_schema": {"name": "x"}}, ["no `schema`"]),
    ({"type": "grammar", "grammar": "root ::= foo"}, ["does not parse", "foo"]),
    ({"type": "grammar", "grammar": 'root ::= "a" [b-'}, ["does not parse"]),
    ({"type": "grammar"}, ["grammar"]),
    ({"type": "text", "grammar": 'root ::= "a"'}, ["text"]),
    ({"type": "json_object", "grammar": 'root ::= "a"'}, ["grammar"]),
])
def test_what_cannot_be_enforced_is_a_400(server, response_format: dict, words: list[str]) -> None:
    response = _completion(server, response_format)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "response_format"
    for word in words:
        assert word in error["message"], error["message"]


def test_constrained_and_free_requests_share_batches(server) -> None:
    free = {"model": server.model, "prompt": "The lighthouse keeper", "max_tokens": 40, "temperature": 0}
    alone = httpx.post(f"{server.v1}/completions", json=free, timeout=120).json()["choices"][0]["text"]
    with ThreadPoolExecutor(3) as pool:
        constrained = [pool.submit(_completion, server, {"type": "json_schema", "json_schema": SIMPLE})
                       for _ in range(2)]
        together = pool.submit(lambda: httpx.post(f"{server.v1}/completions", json=free, timeout=120).json())
        assert together.result()["choices"][0]["text"] == alone
        for future in constrained:
            jsonschema.validate(json.loads(future.result().json()["choices"][0]["text"]), SIMPLE)
