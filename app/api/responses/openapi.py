"""The Responses API's part of `/openapi.json`, generated from its wire Structs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.api.responses.objects import (
    ArgumentsDeltaEvent,
    ArgumentsDoneEvent,
    ContentPartEvent,
    DeletedResponse,
    InputItemList,
    OutputItemEvent,
    Response,
    ResponseEvent,
    TextDeltaEvent,
    TextDoneEvent,
)
from app.api.responses.requests import ResponsesRequest
from app.pipeline.errors import ErrorResponse

EVENTS = [ResponseEvent, OutputItemEvent, ContentPartEvent, TextDeltaEvent, TextDoneEvent, ArgumentsDeltaEvent,
          ArgumentsDoneEvent]
STRUCTS: list[type] = [ResponsesRequest, Response, DeletedResponse, InputItemList, *EVENTS]


def paths(ref: Callable[[type], dict[str, str]]) -> dict[str, Any]:
    def json(struct: type) -> dict[str, Any]:
        return {"application/json": {"schema": ref(struct)}}

    missing = {"404": {"description": "No such stored response", "content": json(ErrorResponse)}}
    one = {"in": "path", "name": "response_id", "required": True, "schema": {"type": "string"}}
    return {
        "/v1/responses": {"post": {
            "summary": "Create Response",
            "requestBody": {"required": True, "content": json(ResponsesRequest)},
            "responses": {
                "200": {"description": "The response, or (stream: true) its events",
                        "content": {**json(Response),
                                    "text/event-stream": {"schema": {"anyOf": [ref(event) for event in EVENTS]}}}},
                "400": {"description": "The body breaks the schema (as OpenAI answers it, naming the parameter), or "
                               "means something the server refuses", "content": json(ErrorResponse)},
                "404": {"description": "Unknown model or previous_response_id", "content": json(ErrorResponse)},
            },
        }},
        "/v1/responses/{response_id}": {
            "get": {"summary": "Get Response", "parameters": [one],
                    "responses": {"200": {"description": "The stored response", "content": json(Response)}, **missing}},
            "delete": {"summary": "Delete Response", "parameters": [one],
                       "responses": {"200": {"description": "Deleted", "content": json(DeletedResponse)}, **missing}},
        },
        "/v1/responses/{response_id}/input_items": {"get": {
            "summary": "List Input Items",
            "parameters": [one,
                           {"in": "query", "name": "limit", "schema": {"type": "integer", "minimum": 1, "maximum": 100}},
                           {"in": "query", "name": "order", "schema": {"enum": ["asc", "desc"]}},
                           {"in": "query", "name": "after", "schema": {"type": "string"}}],
            "responses": {"200": {"description": "The response's input items", "content": json(InputItemList)},
                          **missing},
        }},
    }
