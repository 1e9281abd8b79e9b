"""The Messages API's part of `/openapi.json`, generated from its wire Structs. `tools` entries
are decoded one by one (a server tool is refused by name), so the client tool's schema is listed
on its own as `CustomTool`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.api.anthropic.responses import (
    CountTokensResponse,
    ErrorEvent,
    MessageResponse,
    StreamEvent,
)
from app.api.anthropic.wire import CountTokensRequest, CustomTool, MessagesRequest

STRUCTS: list[type] = [MessagesRequest, CountTokensRequest, CustomTool, MessageResponse, CountTokensResponse,
                       ErrorEvent, *StreamEvent.__args__]


def paths(ref: Callable[[type], dict[str, str]]) -> dict[str, Any]:
    def json(struct: type) -> dict[str, Any]:
        return {"application/json": {"schema": ref(struct)}}

    errors = {str(status): {"description": description, "content": json(ErrorEvent)} for status, description in (
        (400, "A body that breaks the schema, or means something the server refuses"),
        (401, "A missing or wrong API key (x-api-key or Authorization: Bearer)"),
        (404, "Unknown model"), (429, "The wait queue is full"))}

    def post(summary: str, request: type, response: dict[str, Any]) -> dict[str, Any]:
        return {"post": {"summary": summary, "requestBody": {"required": True, "content": json(request)},
                         "responses": {"200": {"description": "Successful Response", "content": response}, **errors}}}

    stream = {**json(MessageResponse), "text/event-stream": {"schema": {"oneOf": [ref(e) for e in StreamEvent.__args__]}}}
    return {
        "/v1/messages": post("Create Message (Anthropic)", MessagesRequest, stream),
        "/v1/messages/count_tokens": post("Count Message Tokens (Anthropic)", CountTokensRequest,
                                          json(CountTokensResponse)),
    }
