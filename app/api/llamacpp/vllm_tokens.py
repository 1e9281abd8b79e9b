"""vLLM's `POST /v1/tokenize` and `/v1/detokenize`, for clients that speak OpenAI: a prompt, or
chat messages with the model's template applied (as a chat answer reads them), to token ids and
back. Errors are OpenAI's `{"error": {...}}`, schema errors a 400 naming the field."""

from __future__ import annotations

import asyncio

from litestar import Request, Router, post

from app.api.common.context import named_or_first_model, request_context
from app.api.common.decode import decode_body
from app.api.common.errors import OpenAIShape, error_handlers
from app.api.common.logprobs import token_texts
from app.api.llamacpp.messages import rendered_prompt, template_turns
from app.api.llamacpp.tokens import detokenized
from app.api.llamacpp.wire import (
    VllmDetokenizeRequest,
    VllmDetokenizeResponse,
    VllmTokenizeRequest,
    VllmTokenizeResponse,
)
from app.pipeline.errors import BadRequest
from app.pipeline.run import leased_model


def _check(body: VllmTokenizeRequest) -> None:
    if (body.prompt is None) == (body.messages is None):
        raise BadRequest("give prompt or messages (one of them)", param="prompt")
    if body.messages is None:
        return
    if not body.add_generation_prompt:
        raise BadRequest("add_generation_prompt cannot be false: Fireside renders chats as it answers them, "
                         "with the generation prompt", param="add_generation_prompt")
    if body.continue_final_message:
        raise BadRequest("continue_final_message is not supported: the prompt ends with the generation prompt",
                         param="continue_final_message")
    if body.add_special_tokens:
        raise BadRequest("add_special_tokens cannot be true with messages: the chat template writes the special "
                         "tokens (as a chat answer reads them)", param="add_special_tokens")


@post("/v1/tokenize", status_code=200)
async def tokenize(request: Request) -> VllmTokenizeResponse:
    body = decode_body(await request.body(), VllmTokenizeRequest)
    _check(body)
    async with leased_model(request_context(request).registry, named_or_first_model(request, body.model),
                            "tokenizing") as served:
        if body.messages is not None:
            tokens = (await rendered_prompt(served, template_turns(body.messages).conversation())).tokens
        else:
            special = body.add_special_tokens is not False
            tokens = await asyncio.to_thread(served.model.tokenize, body.prompt or "", add_special=special,
                                             parse_special=True)
        texts = token_texts(served.model)
        strings = [texts.get(token).text for token in tokens] if body.return_token_strs else None
        return VllmTokenizeResponse(len(tokens), served.engine.ctx_size, tokens, strings)


@post("/v1/detokenize", status_code=200)
async def detokenize(request: Request) -> VllmDetokenizeResponse:
    body = decode_body(await request.body(), VllmDetokenizeRequest)
    async with leased_model(request_context(request).registry, named_or_first_model(request, body.model),
                            "detokenizing") as served:
        return VllmDetokenizeResponse(await detokenized(served.model, body.tokens))


ROUTES = [Router("", route_handlers=[tokenize, detokenize], exception_handlers=error_handlers(OpenAIShape()))]
