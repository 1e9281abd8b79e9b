"""Helpers for the end-to-end tests of the Fireworks extras (logprobs, echo, token ids, raw output,
perf metrics, stream options, truncation, safe tokenization, speculation): requests over real HTTP
and the spec's own JSON schemas for what comes back."""

from __future__ import annotations

import copy
import functools
import json
import uuid
from typing import Any

import httpx
import jsonschema
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from tests.conftest import SPEC_DIR

SPEC = SPEC_DIR / "fireworks-openapi.yaml"

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"

# SmolLM2's chat markup tokens (checked against the vocabulary in test_logprobs_e2e)
IM_START, IM_END = 1, 2
VOCAB_SIZE = 49152

# A prompt whose greedy continuation is " Paris." and more
FRANCE = "The capital of France is"


@functools.cache
def _registry() -> Registry:
    spec = yaml.safe_load(SPEC.read_text())
    return Registry().with_resource("urn:spec", Resource.from_contents(spec, default_specification=DRAFT202012))


@functools.cache
def validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({"$ref": f"urn:spec#/components/schemas/{name}"}, registry=_registry())


def validate(name: str, body: Any) -> None:
    """`body` is a valid `name` of the spec (additional properties included)."""
    validator(name).validate(body)


def response_schema(path: str, streamed: bool) -> str:
    if path == CHAT:
        return "ChatCompletionStreamResponse" if streamed else "ChatCompletionResponse"
    return "CompletionStreamResponse" if streamed else "CompletionResponse"


def send(http: httpx.Client, path: str, model: str, **body: Any) -> httpx.Response:
    return http.post(path, json={"model": model, **body})


def fresh(body: dict[str, Any], reuse: bool) -> dict[str, Any]:
    """`body` in a cache partition of its own unless `reuse`: the prompt is prefilled whole, as for
    any other such request, so greedy answers compare bit for bit across requests (a reused
    prefix changes the shapes of the batches that compute the logits, and with them near ties of
    the 135M model's logits)."""
    if reuse or "prompt_cache_isolation_key" in body:
        return body
    return {**body, "prompt_cache_isolation_key": uuid.uuid4().hex}


def whole(http: httpx.Client, path: str, model: str, *, check_schema: bool = True, reuse: bool = False,
          **body: Any) -> dict:
    """A non-streamed answer (200), validated against the spec's response schema."""
    response = send(http, path, model, **fresh(body, reuse))
    assert response.status_code == 200, response.text
    answer = response.json()
    if check_schema:
        validate(response_schema(path, streamed=False), answer)
    return answer


def stream(http: httpx.Client, path: str, model: str, *, check_schema: bool = True, reuse: bool = False,
           **body: Any) -> list[dict]:
    """The chunks of a streamed answer (200; `[DONE]` checked and dropped), each validated
    against the spec's chunk schema."""
    events = []
    with http.stream("POST", path, json={"model": model, "stream": True, **fresh(body, reuse)}) as response:
        assert response.status_code == 200, response.read().decode()
        for line in response.iter_lines():
            if not line:
                continue
            assert line.startswith("data: "), line
            events.append(line[len("data: "):])
    assert events and events[-1] == "[DONE]", events[-3:]
    chunks = [json.loads(event) for event in events[:-1]]
    if check_schema:
        for chunk in chunks:
            validate(response_schema(path, streamed=True), chunk)
    return chunks


def refused(http: httpx.Client, path: str, model: str, status: int = 400, **body: Any) -> dict:
    """An error answer with `status`, in OpenAI's error shape; its `error` object."""
    response = send(http, path, model, **body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def choice_chunks(chunks: list[dict], index: int = 0) -> list[dict]:
    """The choice objects of `index` across the stream's chunks, in order."""
    return [choice for chunk in chunks for choice in chunk["choices"] if choice["index"] == index]


def stream_text(chunks: list[dict], index: int = 0) -> str:
    parts = []
    for choice in choice_chunks(chunks, index):
        if "delta" in choice:
            parts.append(choice["delta"].get("content") or "")
        else:
            parts.append(choice["text"])
    return "".join(parts)


def stream_logprob_content(chunks: list[dict], index: int = 0) -> list[dict]:
    """The new-shape logprob entries of a choice across the stream, in order."""
    return [entry for choice in choice_chunks(chunks, index) if choice.get("logprobs")
            for entry in choice["logprobs"]["content"]]


def stream_legacy_logprobs(chunks: list[dict], index: int = 0) -> dict[str, list]:
    """The legacy logprob lists of a choice across the stream, concatenated."""
    merged: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": [],
                               "token_ids": []}
    for choice in choice_chunks(chunks, index):
        if choice.get("logprobs"):
            for key, values in merged.items():
                values.extend(choice["logprobs"][key])
    return merged


def stream_token_ids(chunks: list[dict], index: int = 0) -> list[int]:
    return [token for choice in choice_chunks(chunks, index) for token in choice.get("token_ids") or []]


def finish_chunks(chunks: list[dict]) -> list[dict]:
    """The chunks that finish a choice."""
    return [chunk for chunk in chunks if any(c.get("finish_reason") for c in chunk["choices"])]


def without_echo_nulls(logprobs: dict) -> dict:
    """A copy of a choice's logprobs with the echoed prompt's first position (whose null
    log-probability the spec's schemas do not foresee) taken out, for schema validation."""
    trimmed = copy.deepcopy(logprobs)
    if "content" in trimmed:
        trimmed["content"] = trimmed["content"][1:]
    else:
        for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset", "token_ids"):
            if trimmed.get(key) is not None:
                trimmed[key] = trimmed[key][1:]
    return trimmed
