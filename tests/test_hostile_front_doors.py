"""Hostile bodies on every front door added beside the Fireworks API: each gets a 4xx in that
API's own error shape (never a 5xx or a hang), and the server answers normally afterwards."""

from __future__ import annotations

import json

import httpx
import pytest

DEEP = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
DOORS = {  # path -> how that API's error body looks
    "/v1/messages": lambda body: body["type"] == "error" and body["error"]["message"],
    # OpenAI's shape, with schema errors as the spec's 422 `detail` list, as on /v1/chat/completions
    "/v1/responses": lambda body: body["error"]["message"] if "error" in body else body["detail"][0]["msg"],
    "/api/chat": lambda body: isinstance(body["error"], str) and body["error"],
    "/api/generate": lambda body: isinstance(body["error"], str) and body["error"],
    "/generate": lambda body: body["error"] and body["error_type"],
}
HOSTILE = {
    "truncated JSON": b'{"model": "x", "messages": [',
    "deep nesting": DEEP,
    "invalid UTF-8": b'{"model": "\xff\xfe"}',
    "a lone surrogate": json.dumps({"model": "\ud800", "inputs": "\ud800"}).encode(),
    "a huge number": b'{"model": "x", "max_tokens": 1' + b"0" * 400 + b"}",
    "an array for an object": b"[1, 2, 3]",
}


@pytest.mark.parametrize("kind", list(HOSTILE))
@pytest.mark.parametrize("path", list(DOORS))
def test_hostile_bodies_get_a_4xx_in_the_apis_shape(server, path, kind):
    response = httpx.post(f"{server.base_url}{path}", content=HOSTILE[kind], timeout=30,
                          headers={"content-type": "application/json"})
    assert 400 <= response.status_code < 500, (path, kind, response.status_code, response.text[:300])
    assert DOORS[path](response.json()), response.text[:300]


def test_the_server_answers_normally_afterwards(server):
    response = httpx.post(f"{server.base_url}/generate", timeout=120,
                          json={"inputs": "The capital of France is", "parameters": {"max_new_tokens": 2}})
    assert response.status_code == 200 and response.json()["generated_text"]
