"""TGI's part of `/openapi.json`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.api.tgi.wire import (
    GenerateResponse,
    StreamResponse,
    TgiError,
    TgiGenerateRequest,
)

STRUCTS: list[type] = [TgiGenerateRequest, GenerateResponse, StreamResponse, TgiError]


def paths(ref: Callable[[type], dict[str, str]]) -> dict[str, Any]:
    def json(struct: type) -> dict[str, Any]:
        return {"application/json": {"schema": ref(struct)}}

    errors = {status: {"description": what, "content": json(TgiError)} for status, what in (
        ("400", "The request means something the server refuses"), ("404", "Unknown model"),
        ("422", "The body does not fit the schema"), ("429", "The server is busy"))}

    def operation(summary: str, ok: dict[str, Any]) -> dict[str, Any]:
        return {"post": {"summary": summary, "tags": ["TGI"],
                         "requestBody": {"required": True, "content": json(TgiGenerateRequest)},
                         "responses": {"200": {"description": "Generated text", "content": ok}, **errors}}}

    stream = {"text/event-stream": {"schema": ref(StreamResponse)}}
    listed = {"application/json": {"schema": {"type": "array", "items": ref(GenerateResponse)}}}
    return {
        "/generate": operation("Generate (TGI)", json(GenerateResponse)),
        "/generate_stream": operation("Generate a stream of tokens (TGI)", stream),
        "/": operation("Generate, whole or streamed as `stream` says (TGI's compatibility route)", {**listed, **stream}),
    }
