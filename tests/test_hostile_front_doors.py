"""Every front door walked with the same hostile cases: a malformed body, wrong types, an unknown
model, an input longer than the model can hold, and a client that leaves mid-answer. Each error
comes back at once in that API's own shape (never a 5xx or a hang); a client that leaves frees
the engine (its slots, its queue and its embedding inputs, read from `/health`) and is logged as
disconnected; the server answers normally afterwards."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.servers import RunningServer


def _openai(body: dict) -> str:
    return body["error"]["message"]


def _spec_or_openai(body: dict) -> str:
    """The Fireworks paths: OpenAI's error body, schema errors in the spec's 422 `detail` list."""
    return body["detail"][0]["msg"] if "detail" in body else _openai(body)


def _anthropic(body: dict) -> str:
    assert body["type"] == "error" and body["error"]["type"]
    return body["error"]["message"]


def _ollama(body: dict) -> str:
    assert isinstance(body["error"], str)
    return body["error"]


def _tgi(body: dict) -> str:
    assert body["error_type"]
    return body["error"]


def _llama(body: dict) -> str:
    assert body["error"]["code"] >= 400 and body["error"]["type"]
    return body["error"]["message"]


LONG = 5000  # " word" tokens: past the default server's pool (4 x 1024) and its embedding context (2048)
BUSY = 120  # a prompt whose prefill takes a moment: the engine works on it when the client leaves



def _words(count: int) -> str:
    return "word " * count


# Two inputs that do not fit one embedding batch (2,048 tokens): a short first batch, and a long
# second one that a client leaving during the first must not wait for.
TWO_BATCHES = [_words(300), _words(1900)]


@dataclass(frozen=True)
class Door:
    path: str
    message: Callable[[dict], str]  # the error body's message, checking its shape on the way
    body: Callable[[str, str, int], dict[str, Any]]  # (model, text, most new tokens) -> a request
    schema_status: int  # the status a body that breaks the schema gets
    busy_body: Callable[[str], dict[str, Any]] | None = None  # a long-running request, when not `body`


def _chat(model: str, text: str, tokens: int) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": tokens, "ignore_eos": True}


DOORS = [
    Door("/v1/chat/completions", _spec_or_openai, _chat, 422),
    Door("/v1/completions", _spec_or_openai,
         lambda model, text, tokens: {"model": model, "prompt": text, "max_tokens": tokens, "ignore_eos": True}, 422),
    Door("/v1/embeddings", _spec_or_openai, lambda model, text, _: {"model": model, "input": text}, 422,
         busy_body=lambda model: {"model": model, "input": TWO_BATCHES}),
    Door("/v1/rerank", _spec_or_openai, lambda model, text, _: {"model": model, "query": "word?", "documents": [text]},
         422, busy_body=lambda model: {"model": model, "query": "word?", "documents": [_words(BUSY)] * 4}),
    Door("/v1/messages", _anthropic,
         lambda model, text, tokens: {"model": model, "max_tokens": tokens,
                                      "messages": [{"role": "user", "content": text}]}, 400),
    Door("/v1/responses", _openai, lambda model, text, tokens: {"model": model, "input": text,
                                                          "max_output_tokens": max(tokens, 16)}, 400),
    Door("/api/chat", _ollama, lambda model, text, tokens: {
        "model": model, "messages": [{"role": "user", "content": text}], "stream": False,
        "options": {"num_predict": tokens}}, 400),
    Door("/api/generate", _ollama, lambda model, text, tokens: {"model": model, "prompt": text, "stream": False,
                                                                "options": {"num_predict": tokens}}, 400),
    Door("/api/embed", _ollama, lambda model, text, _: {"model": model, "input": text, "truncate": False}, 400,
         busy_body=lambda model: {"model": model, "input": TWO_BATCHES, "truncate": False}),
    Door("/generate", _tgi, lambda model, text, tokens: {"model": model, "inputs": text,
                                                         "parameters": {"max_new_tokens": tokens}}, 422),
    Door("/completion", _llama, lambda model, text, tokens: {"model": model, "prompt": text, "n_predict": tokens,
                                                             "ignore_eos": True}, 400),
]
IDS = [door.path for door in DOORS]

DEEP = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
HOSTILE = {
    "truncated JSON": b'{"model": "x", "messages": [',
    "deep nesting": DEEP,
    "invalid UTF-8": b'{"model": "\xff\xfe"}',
    "a lone surrogate": json.dumps({"model": "\ud800", "inputs": "\ud800"}).encode(),
    "a huge number": b'{"model": "x", "max_tokens": 1' + b"0" * 400 + b"}",
    "an array for an object": b"[1, 2, 3]",
}


def _post(server: RunningServer, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.post(f"{server.base_url}{path}", timeout=60, **kwargs)


@pytest.mark.parametrize("kind", list(HOSTILE))
@pytest.mark.parametrize("door", DOORS, ids=IDS)
def test_a_malformed_body_gets_a_4xx_in_the_apis_shape(server, door, kind):
    response = _post(server, door.path, content=HOSTILE[kind], headers={"content-type": "application/json"})
    assert 400 <= response.status_code < 500, (kind, response.status_code, response.text[:300])
    assert door.message(response.json()), response.text[:300]


@pytest.mark.parametrize("door", DOORS, ids=IDS)
def test_wrong_types_get_the_apis_schema_error(server, door):
    body = door.body(server.model, "hello", 2)
    wrong = {**body, "model": 5} if door.path != "/generate" else {**body, "inputs": ["hello"]}
    response = _post(server, door.path, json=wrong)
    assert response.status_code == door.schema_status, response.text[:300]
    assert door.message(response.json()), response.text[:300]


@pytest.mark.parametrize("door", DOORS, ids=IDS)
def test_an_unknown_model_is_a_404_in_the_apis_shape(server, door):
    response = _post(server, door.path, json=door.body("ghost-model", "hello", 2))
    assert response.status_code == 404, response.text[:300]
    assert "ghost-model" in door.message(response.json())


@pytest.mark.parametrize("door", DOORS, ids=IDS)
def test_an_input_longer_than_the_model_holds_is_refused_at_once_with_the_numbers(server, door):
    response = _post(server, door.path, json=door.body(server.model, _words(LONG), 2))
    assert response.status_code == 400, response.text[:300]
    message = door.message(response.json())
    numbers = {int(n) for n in re.findall(r"\d+", message)}
    assert numbers & set(range(LONG, LONG + 200)), message  # the input's own size, in tokens
    assert _idle(server)


async def _leave_once_busy(server: RunningServer, door: Door, request_id: str) -> None:
    """Send a long-running request, and close its connection once the engine works on it."""
    body = door.busy_body(server.model) if door.busy_body is not None else door.body(server.model, _words(BUSY), 100)
    async with httpx.AsyncClient(base_url=server.base_url, timeout=120) as client:
        sent = asyncio.create_task(client.post(door.path, json=body, headers={"X-Request-Id": request_id}))
        while not sent.done():
            model = (await client.get("/health")).json()["models"][0]
            if model["busy_slots"] or model["queued_embeddings"]:
                break
            await asyncio.sleep(0.01)
        assert not sent.done(), f"the request ended before the engine was seen busy: {sent.result().text[:300]}"
        sent.cancel()  # closes the connection
        with pytest.raises(asyncio.CancelledError):
            await sent


def _idle(server: RunningServer, timeout: float = 60) -> bool:
    """Whether the engine comes back to nothing running or waiting (polled, not timed)."""
    health: dict = {}
    for _ in range(int(timeout / 0.05)):
        health = httpx.get(f"{server.base_url}/health", timeout=10).json()["models"][0]
        if not (health["busy_slots"] or health["queued_choices"] or health["queued_requests"]
                or health["queued_embeddings"]):
            return True
        time.sleep(0.05)
    raise AssertionError(f"the engine is still busy: {health}")


@pytest.mark.parametrize("door", DOORS, ids=IDS)
def test_a_client_that_leaves_mid_answer_frees_the_engine(server, door):
    request_id = f"leaves-{door.path.strip('/').replace('/', '-')}"
    mark = server.output.mark()
    asyncio.run(_leave_once_busy(server, door, request_id))
    line = server.output.wait_for(lambda text: f"id={request_id} " in text, since=mark, timeout=60)
    assert line is not None and "disconnected=true" in line, line
    assert _idle(server)
    answered = _post(server, door.path, json=door.body(server.model, "hello", 2))
    assert answered.status_code == 200, answered.text[:300]
