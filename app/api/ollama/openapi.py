"""Ollama's part of `/openapi.json`, generated from its wire Structs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.api.ollama.wire import (
    OllamaChatRequest,
    OllamaChatResponse,
    OllamaEmbeddingsRequest,
    OllamaEmbeddingsResponse,
    OllamaEmbedRequest,
    OllamaEmbedResponse,
    OllamaErrorResponse,
    OllamaGenerateRequest,
    OllamaGenerateResponse,
    OllamaListResponse,
    OllamaModelRequest,
    OllamaProcessResponse,
    OllamaProgressResponse,
    OllamaPullRequest,
    OllamaShowResponse,
    OllamaVersionResponse,
)

STRUCTS: list[type] = [
    OllamaChatRequest, OllamaChatResponse, OllamaGenerateRequest, OllamaGenerateResponse, OllamaEmbedRequest,
    OllamaEmbedResponse, OllamaEmbeddingsRequest, OllamaEmbeddingsResponse, OllamaListResponse, OllamaModelRequest,
    OllamaProcessResponse, OllamaShowResponse, OllamaVersionResponse, OllamaPullRequest, OllamaProgressResponse,
    OllamaErrorResponse,
]


def paths(ref: Callable[[type], dict[str, str]]) -> dict[str, Any]:
    def json(struct: type) -> dict[str, Any]:
        return {"application/json": {"schema": ref(struct)}}

    errors = {
        "400": {"description": "A body that breaks the schema, or a field Fireside cannot honour",
                "content": json(OllamaErrorResponse)},
        "404": {"description": "Unknown model", "content": json(OllamaErrorResponse)},
    }

    def post(summary: str, request: type, response: type, streamed: type | None = None) -> dict[str, Any]:
        content = json(response)
        if streamed is not None:
            content["application/x-ndjson"] = {"schema": ref(streamed)}
        return {"post": {"summary": summary, "requestBody": {"required": True, "content": json(request)},
                         "responses": {"200": {"description": "The answer (stream: true, the default: one JSON "
                                                              "object per line)" if streamed else "Successful Response",
                                               "content": content}, **errors}}}

    def get(summary: str, response: type) -> dict[str, Any]:
        return {"get": {"summary": summary, "responses": {"200": {"description": summary, "content": json(response)}}}}

    return {
        "/api/chat": post("Ollama Chat", OllamaChatRequest, OllamaChatResponse, OllamaChatResponse),
        "/api/generate": post("Ollama Generate", OllamaGenerateRequest, OllamaGenerateResponse, OllamaGenerateResponse),
        "/api/embed": post("Ollama Embed", OllamaEmbedRequest, OllamaEmbedResponse),
        "/api/embeddings": post("Ollama Embeddings (legacy)", OllamaEmbeddingsRequest, OllamaEmbeddingsResponse),
        "/api/show": post("Ollama Show Model", OllamaModelRequest, OllamaShowResponse),
        "/api/pull": post("Ollama Pull Model (from the Hugging Face Hub)", OllamaPullRequest, OllamaProgressResponse,
                          OllamaProgressResponse),
        "/api/delete": {"delete": {"summary": "Ollama Delete Model (one that `fireside pull` downloaded)",
                                   "requestBody": {"required": True, "content": json(OllamaModelRequest)},
                                   "responses": {"200": {"description": "Deleted"}, **errors}}},
        "/api/tags": get("Ollama List Models", OllamaListResponse),
        "/api/ps": get("Ollama Loaded Models", OllamaProcessResponse),
        "/api/version": get("Ollama API Version", OllamaVersionResponse),
    }
