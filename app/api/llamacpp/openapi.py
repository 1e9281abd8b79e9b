"""llama-server's native routes in `/openapi.json`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.api.llamacpp.wire import (
    ApplyTemplateRequest,
    ApplyTemplateResponse,
    EmbeddingContent,
    EmbeddingContentRequest,
    InfillRequest,
    LlamaCompletionChunk,
    LlamaCompletionRequest,
    LlamaCompletionResponse,
    LlamaDetokenizeRequest,
    LlamaDetokenizeResponse,
    LlamaError,
    LlamaProps,
    LlamaTokenizeRequest,
    LlamaTokenizeResponse,
    RerankingRequest,
    RerankingResponse,
    SlotState,
    VllmDetokenizeRequest,
    VllmDetokenizeResponse,
    VllmTokenizeRequest,
    VllmTokenizeResponse,
)
from app.pipeline.errors import ErrorResponse

STRUCTS: list[type] = [LlamaCompletionRequest, InfillRequest, LlamaCompletionResponse, LlamaCompletionChunk, LlamaTokenizeRequest,
                       LlamaTokenizeResponse, LlamaDetokenizeRequest, LlamaDetokenizeResponse, ApplyTemplateRequest,
                       ApplyTemplateResponse, LlamaProps, LlamaError, VllmTokenizeRequest, VllmTokenizeResponse,
                       VllmDetokenizeRequest, VllmDetokenizeResponse, EmbeddingContentRequest, EmbeddingContent,
                       SlotState, RerankingRequest, RerankingResponse]


def paths(ref: Callable[[type], dict[str, str]]) -> dict[str, Any]:
    def json(struct: type) -> dict[str, Any]:
        return {"application/json": {"schema": ref(struct)}}

    errors = {status: {"description": what, "content": json(LlamaError)} for status, what in (
        ("400", "The body does not fit the schema, or means something the server refuses"),
        ("404", "Unknown model"), ("429", "The server is busy"))}

    openai_errors = {status: {**answer, "content": json(ErrorResponse)} for status, answer in errors.items()}

    def post(summary: str, request: type, ok: dict[str, Any], failed: dict[str, Any] = errors) -> dict[str, Any]:
        return {"post": {"summary": summary, "tags": ["llama.cpp"],
                         "requestBody": {"required": True, "content": json(request)},
                         "responses": {"200": {"description": "Answered", "content": ok}, **failed}}}

    whole = ref(LlamaCompletionResponse)
    answers = {"anyOf": [whole, {"type": "array", "items": whole},  # several prompts or n_cmpl: a list
                         {"type": "object", "description": "the fields `response_fields` picks"},
                         {"type": "array", "items": {"type": "object"}}]}
    completion = {"application/json": {"schema": answers},
                  "text/event-stream": {"schema": {"anyOf": [ref(LlamaCompletionChunk), whole]}}}
    return {
        "/completion": post("Complete a prompt (llama-server)", LlamaCompletionRequest, completion),
        "/infill": post("Fill in the middle between a prefix and a suffix (llama-server)", InfillRequest, completion),
        "/tokenize": post("Tokenize text (llama-server)", LlamaTokenizeRequest, json(LlamaTokenizeResponse)),
        "/detokenize": post("Token ids to text (llama-server)", LlamaDetokenizeRequest, json(LlamaDetokenizeResponse)),
        "/apply-template": post("Render messages with the chat template (llama-server)", ApplyTemplateRequest,
                                json(ApplyTemplateResponse)),
        "/v1/tokenize": post("Tokenize a prompt or chat messages (vLLM's shape)", VllmTokenizeRequest,
                             json(VllmTokenizeResponse), openai_errors),
        "/v1/detokenize": post("Token ids to text (vLLM's shape)", VllmDetokenizeRequest,
                               json(VllmDetokenizeResponse), openai_errors),
        "/embedding": post("Pooled embeddings of each input (llama-server)", EmbeddingContentRequest,
                           {"application/json": {"schema": {"type": "array", "items": ref(EmbeddingContent)}}}),
        **{path: post("Rank documents by their relevance to a query (llama-server, Jina's shape)", RerankingRequest,
                      json(RerankingResponse)) for path in ("/reranking", "/rerank", "/v1/reranking")},
        "/slots": {"get": {"summary": "Each slot busy or idle (llama-server, read-only)", "tags": ["llama.cpp"],
                           "parameters": [{"name": "model", "in": "query", "required": False,
                                           "schema": {"type": "string"}}],
                           "responses": {"200": {"description": "The slots", "content": {"application/json": {
                               "schema": {"type": "array", "items": ref(SlotState)}}}}, **errors}}},
        "/props": {"get": {"summary": "The server's properties (llama-server)", "tags": ["llama.cpp"],
                           "parameters": [{"name": "model", "in": "query", "required": False,
                                           "schema": {"type": "string"}}],
                           "responses": {"200": {"description": "Properties", "content": json(LlamaProps)},
                                         **errors}}},
    }
