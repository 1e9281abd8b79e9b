"""llama-server's native routes: `POST /completion`, `/infill`, `/tokenize`, `/detokenize`,
`/apply-template`, `/embedding`, `/reranking`, `GET /slots` and `GET /props`. The body (or `?model=`) may name
a model; without one, the first model this server serves answers (llama-server serves one). Errors, schema errors included, are
llama-server's `{"error": {"code", "message", "type"}}`."""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Request, Response, Router, get, post
from litestar.params import FromQuery
from litestar.response import Stream

from app.api.common.context import named_or_first_model, request_context, settings
from app.api.common.decode import decode_body
from app.api.common.errors import error_handlers, validation_message
from app.api.common.logprobs import token_texts
from app.api.common.streams import TGI_SSE
from app.api.llamacpp.embedding import embedding
from app.api.llamacpp.infill import infill_plan
from app.api.llamacpp.messages import rendered_prompt, template_turns
from app.api.llamacpp.plan import SEED_MASK, completion_plan, generation_settings
from app.api.llamacpp.reranking import reranking
from app.api.llamacpp.shaper import CompletionShaper, error_body
from app.api.llamacpp.tokens import detokenized, mixed_tokens, pieces
from app.api.llamacpp.vllm_tokens import ROUTES as VLLM_ROUTES
from app.api.llamacpp.wire import (
    ApplyTemplateRequest,
    ApplyTemplateResponse,
    EmbeddingContent,
    EmbeddingContentRequest,
    InfillRequest,
    LlamaCompletionRequest,
    LlamaDetokenizeRequest,
    LlamaDetokenizeResponse,
    LlamaError,
    LlamaProps,
    LlamaTokenizeRequest,
    LlamaTokenizeResponse,
    RerankingRequest,
    RerankingResponse,
    SlotNextToken,
    SlotState,
)
from app.pipeline.chat_formats import chat_format
from app.pipeline.errors import ApiError, BadRequest, RequestValidationError
from app.pipeline.run import answer, leased_model

NATIVE_SSE = TGI_SSE  # `data: {json}` events and no end marker, as llama-server's native stream


@post("/completion", status_code=200)
async def completion(request: Request) -> Response | Stream:
    body = decode_body(await request.body(), LlamaCompletionRequest)
    model = named_or_first_model(request, body.model)
    plan, shape = completion_plan(body, model, settings(request).max_logprobs)
    context = request_context(request)
    spec = context.registry.knows(model)
    if spec is not None and spec.upstream is not None:
        raise BadRequest("/completion answers with this server's tokens and timings; the model runs upstream: use "
                         "/v1/completions", param="model")
    return await answer(context, plan, lambda prepared, clock: CompletionShaper(prepared, clock, shape, model),
                        NATIVE_SSE)


@post("/infill", status_code=200)
async def infill(request: Request) -> Response | Stream:
    body = decode_body(await request.body(), InfillRequest)
    model = named_or_first_model(request, body.model)
    plan, shape = infill_plan(body, model, settings(request).max_logprobs)
    return await answer(request_context(request), plan,
                        lambda prepared, clock: CompletionShaper(prepared, clock, shape, model), NATIVE_SSE)


@post("/tokenize", status_code=200)
async def tokenize(request: Request) -> LlamaTokenizeResponse:
    body = decode_body(await request.body(), LlamaTokenizeRequest)
    async with leased_model(request_context(request).registry, named_or_first_model(request, body.model),
                            "tokenizing") as served:
        model = served.model
        tokens = await asyncio.to_thread(mixed_tokens, model, body.content, add_special=body.add_special,
                                         parse_special=body.parse_special, param="content")
        return LlamaTokenizeResponse(pieces(token_texts(model), tokens) if body.with_pieces else tokens)


@post("/detokenize", status_code=200)
async def detokenize(request: Request) -> LlamaDetokenizeResponse:
    body = decode_body(await request.body(), LlamaDetokenizeRequest)
    async with leased_model(request_context(request).registry, named_or_first_model(request, body.model),
                            "detokenizing") as served:
        return LlamaDetokenizeResponse(await detokenized(served.model, body.tokens))


@post("/apply-template", status_code=200)
async def apply_template(request: Request) -> ApplyTemplateResponse:
    body = decode_body(await request.body(), ApplyTemplateRequest)
    conversation = template_turns(body.messages).conversation()
    async with leased_model(request_context(request).registry, named_or_first_model(request, body.model),
                            "applying the chat template") as served:
        return ApplyTemplateResponse((await rendered_prompt(served, conversation)).text)


@post("/embedding", status_code=200)
async def embedding_route(request: Request) -> list[EmbeddingContent]:
    body = decode_body(await request.body(), EmbeddingContentRequest)
    return await embedding(request_context(request), body, named_or_first_model(request, body.model))


@post(["/reranking", "/rerank", "/v1/reranking"], status_code=200)
async def reranking_route(request: Request) -> RerankingResponse:
    body = decode_body(await request.body(), RerankingRequest)
    return await reranking(request_context(request), body, named_or_first_model(request, body.model))


@get("/slots", status_code=200)
async def slots(request: Request, model: FromQuery[str | None] = None) -> list[SlotState]:
    """llama-server's read-only `GET /slots`: each slot busy or idle, and how much it caches."""
    async with leased_model(request_context(request).registry, named_or_first_model(request, model),
                            "reading its slots") as served:
        engine = served.engine
        params = generation_settings(LlamaCompletionRequest(prompt=""), SEED_MASK, None)
        return [SlotState(slot, -1, engine.ctx_size, engine.draft_model is not None, busy, cached, params, "",
                          [SlotNextToken(busy, False, -1, 0, "")]) for slot, busy, cached in engine.slot_states()]


@get("/props", status_code=200)
async def props(request: Request, model: FromQuery[str | None] = None) -> LlamaProps:
    """The server's properties for the model (`?model=`, else the first one), llama-server's
    read-only `GET /props`."""
    async with leased_model(request_context(request).registry, named_or_first_model(request, model),
                            "reading its properties") as served:
        texts = token_texts(served.model)
        bos, eos = served.model.bos_token_id, served.model.eos_token_id
        defaults = generation_settings(LlamaCompletionRequest(prompt=""), SEED_MASK, None) | {"n_ctx": served.engine.ctx_size}
        return LlamaProps(
            default_generation_settings={"id": 0, "id_task": -1, "n_ctx": served.engine.ctx_size,
                                         "speculative": served.engine.draft_model is not None,
                                         "is_processing": False, "params": defaults, "prompt": ""},
            total_slots=served.engine.options.parallel, model_path=str(served.path),
            chat_template=chat_format(served).template.source, chat_template_caps={},
            modalities={"vision": served.projector is not None and served.projector.vision,
                        "audio": served.projector is not None and served.projector.audio},
            build_info="fireside", is_sleeping=False,
            bos_token=texts.get(bos).text if bos >= 0 else "", eos_token=texts.get(eos).text if eos >= 0 else "")


class LlamaShape:
    """llama-server's `{"error": {"code", "message", "type"}}`; a body that breaks the schema is its
    400 `invalid_request_error`."""

    @staticmethod
    def body(status: int, message: str, _: ApiError | None) -> LlamaError:
        return error_body(status, message)

    def invalid(self, error: RequestValidationError) -> tuple[int, Any]:
        return 400, error_body(400, validation_message(error))


ROUTES = [Router("", route_handlers=[completion, infill, tokenize, detokenize, apply_template, embedding_route, reranking_route, slots, props],
                 exception_handlers=error_handlers(LlamaShape())), *VLLM_ROUTES]
