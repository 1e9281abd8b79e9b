"""The OpenAPI document of Fireside's own API, generated from the Structs that validate requests.

Generating it from each dialect's wire Structs means the document can never drift from what the
server accepts.
"""

from __future__ import annotations

import functools
from typing import Any

import msgspec

from app.api.anthropic import openapi as anthropic_openapi
from app.api.audio import openapi as audio_openapi
from app.api.common.outputs import LogProbs, NewLogProbs
from app.api.common.paths import API_PREFIXES
from app.api.embeddings.routes import EmbeddingRequest, EmbeddingResponse
from app.api.fireworks.requests import ChatCompletionRequest, CompletionRequest
from app.api.fireworks.responses import (
    ChatCompletionResponse,
    ChatCompletionStreamResponse,
    CompletionResponse,
    CompletionStreamResponse,
    ModelCard,
    ModelList,
)
from app.api.llamacpp import openapi as llamacpp_openapi
from app.api.ollama import openapi as ollama_openapi
from app.api.rerank.routes import RerankRequestBody, RerankResponse
from app.api.responses import openapi as responses_openapi
from app.api.tgi import openapi as tgi_openapi
from app.pipeline.errors import ErrorResponse, HTTPValidationError

_REF = "#/components/schemas/{name}"


def _ref(struct: type) -> dict[str, str]:
    return {"$ref": _REF.format(name=struct.__name__)}


def _json(struct: type) -> dict[str, Any]:
    return {"application/json": {"schema": _ref(struct)}}


def _errors() -> dict[str, Any]:
    return {
        "400": {"description": "The request means something the server refuses", "content": _json(ErrorResponse)},
        "404": {"description": "Unknown model", "content": _json(ErrorResponse)},
        "422": {"description": "Validation Error", "content": _json(HTTPValidationError)},
    }


def _whole(summary: str, request: type, response: type) -> dict[str, Any]:
    return {"post": {"summary": summary, "requestBody": {"required": True, "content": _json(request)},
                     "responses": {"200": {"description": "Successful Response", "content": _json(response)},
                                   **_errors()}}}


def _generation(summary: str, request: type, response: type, chunk: type) -> dict[str, Any]:
    return {
        "post": {
            "summary": summary,
            "requestBody": {"required": True, "content": _json(request)},
            "responses": {
                "200": {
                    "description": "Successful Response",
                    "content": {
                        **_json(response),
                        "text/event-stream": {"schema": _ref(chunk)},
                    },
                },
                **_errors(),
            },
        }
    }


@functools.cache
def openapi_document() -> dict[str, Any]:
    structs = [
        CompletionRequest, ChatCompletionRequest, CompletionResponse, CompletionStreamResponse,
        ChatCompletionResponse, ChatCompletionStreamResponse, ErrorResponse, HTTPValidationError,
        ModelList, ModelCard, LogProbs, NewLogProbs, EmbeddingRequest, EmbeddingResponse, RerankRequestBody,
        RerankResponse, *anthropic_openapi.STRUCTS, *responses_openapi.STRUCTS, *tgi_openapi.STRUCTS,
        *ollama_openapi.STRUCTS, *audio_openapi.STRUCTS, *llamacpp_openapi.STRUCTS,
    ]
    _, components = msgspec.json.schema_components(structs, ref_template=_REF)
    paths: dict[str, Any] = {}
    for prefix in API_PREFIXES:
        paths[f"{prefix}/completions"] = _generation("Create Completion", CompletionRequest, CompletionResponse, CompletionStreamResponse)
        paths[f"{prefix}/chat/completions"] = _generation(
            "Create Chat Completion", ChatCompletionRequest, ChatCompletionResponse, ChatCompletionStreamResponse
        )
        paths[f"{prefix}/embeddings"] = _whole("Create Embeddings", EmbeddingRequest, EmbeddingResponse)
        paths[f"{prefix}/rerank"] = _whole("Rerank", RerankRequestBody, RerankResponse)
        paths[f"{prefix}/models"] = {
            "get": {"summary": "List Models", "responses": {"200": {"description": "The served models", "content": _json(ModelList)}}}
        }
    paths.update(anthropic_openapi.paths(_ref))
    paths.update(responses_openapi.paths(_ref))
    paths.update(ollama_openapi.paths(_ref))
    paths.update(tgi_openapi.paths(_ref))
    paths.update(audio_openapi.paths(_ref))
    paths.update(llamacpp_openapi.paths(_ref))
    paths["/health"] = {"get": {"summary": "Health", "responses": {"200": {"description": "Serving"}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "Fireside", "version": "0.1.0", "description": "Fireworks inference API on local GGUF models"},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"BearerAuth": {
                "type": "http", "scheme": "bearer",
                "description": "Required when the server runs with --api-key (every path but /health)",
            }, "ApiKeyAuth": {
                "type": "apiKey", "in": "header", "name": "x-api-key",
                "description": "The same key as Anthropic's clients send it",
            }},
        },
        "security": [{"BearerAuth": []}, {"ApiKeyAuth": []}, {}],
    }
