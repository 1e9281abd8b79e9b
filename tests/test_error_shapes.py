"""One error renderer, each door's shape: the failures a test cannot provoke over HTTP on a healthy
server (an unexpected exception, a lost RPC worker, a job the KV pool can never hold, a client that
left) come out of every door's handler table with the status the pipeline gives them, in that
API's own body. (Over HTTP, tests/test_hostile_front_doors.py walks the rest; tests/test_rpc.py
loses a real worker.)"""

from __future__ import annotations

import json
from collections.abc import Callable

import msgspec
import pytest

from app.api.anthropic.errors import AnthropicShape
from app.api.common.errors import (
    CLIENT_CLOSED_REQUEST,
    OpenAIShape,
    SpecShape,
    error_handlers,
)
from app.api.ollama.errors import OllamaShape
from app.api.tgi.routes import TgiShape
from app.pipeline.errors import ApiError
from app.pipeline.run import ClientLeft, _failure
from backends.engine import JobTooLarge
from backends.jobs import JobFailed
from backends.rpc import WorkerLost

SHAPES: dict[str, tuple[object, Callable[[dict], str]]] = {
    "fireworks": (SpecShape(), lambda body: body["error"]["message"]),
    "responses": (OpenAIShape(), lambda body: body["error"]["message"]),
    "anthropic": (AnthropicShape(), lambda body: body["type"] == "error" and body["error"]["message"]),
    "ollama": (OllamaShape(), lambda body: body["error"]),
    "tgi": (TgiShape(), lambda body: body["error_type"] and body["error"]),
}


def _render(shape: object, error: Exception) -> tuple[int, dict | None]:
    handlers = error_handlers(shape)  # type: ignore[arg-type]
    handler = next(handler for kind, handler in handlers.items() if isinstance(error, kind))
    response = handler(None, error)
    content = response.content
    body = None if content == b"" else json.loads(msgspec.json.encode(content))
    return response.status_code, body


@pytest.mark.parametrize("door", list(SHAPES))
def test_an_unexpected_error_is_a_500_in_the_doors_shape(door: str) -> None:
    shape, message = SHAPES[door]
    status, body = _render(shape, RuntimeError("boom"))
    assert status == 500 and body is not None and "RuntimeError" in message(body)


@pytest.mark.parametrize("door", list(SHAPES))
def test_a_lost_worker_is_a_503_in_every_door(door: str) -> None:
    shape, message = SHAPES[door]
    lost = _failure(JobFailed(WorkerLost("the RPC worker at 127.0.0.1:50052 went away")))
    status, body = _render(shape, lost)
    assert status == 503 and body is not None and "went away" in message(body)
    assert isinstance(lost, ApiError)


def test_a_client_that_left_gets_no_body() -> None:
    for shape, _ in SHAPES.values():
        assert _render(shape, ClientLeft()) == (CLIENT_CLOSED_REQUEST, None)


def test_the_engines_refusal_names_both_numbers() -> None:
    refusal = str(JobTooLarge(5100, 5000, 4096))
    assert "4096" in refusal and "5100" in refusal and "5000 in the prompt" in refusal
