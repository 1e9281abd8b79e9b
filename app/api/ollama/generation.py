"""`/api/chat` and `/api/generate`: decode, find the model, apply `keep_alive`, build the plan,
answer through `app.run.answer` with Ollama's shapers.

The handler takes its own lease on the model before answering: that times the load
(`load_duration`), gives `/api/generate` the model it needs for `suffix` and `context`, and sets
the keep-alive while the model is held. A request without messages (chat) or prompt (generate)
only loads the model, or with `keep_alive: 0` unloads it, as Ollama does (`done_reason` "load" /
"unload").

`keep_alive` lasts until the model next unloads; a request without it leaves the model's own
keep-alive (`--keep-alive` / the config's) in force, rather than Ollama's default of 5 minutes.
"""

from __future__ import annotations

import time
from typing import Any

from litestar.response import Response, Stream

from app.api.common.decode import decode_body
from app.api.ollama.models import resolve
from app.api.ollama.options import check_num_ctx, keep_alive_seconds, parse_options
from app.api.ollama.plan import chat_plan, generate_plan
from app.api.ollama.shapers import NDJSON, ChatShaper, GenerateShaper, created_at
from app.api.ollama.wire import (
    OllamaChatRequest,
    OllamaChatResponse,
    OllamaGenerateRequest,
    OllamaGenerateResponse,
    OllamaResponseMessage,
)
from app.pipeline.run import RequestContext, acquire_model, answer
from backends.registry import Lease, ModelSpec


async def _lease(context: RequestContext, spec: ModelSpec, keep_alive: float | None) -> tuple[Lease | None, float]:
    """A lease on the model and how long getting it took; none for a model that runs upstream
    (nothing loads here)."""
    if spec.upstream is not None:
        return None, 0.0
    started = time.perf_counter()
    lease = await acquire_model(context.registry, spec.id)
    if keep_alive is not None:
        context.registry.keep_alive(spec.id, keep_alive)
    return lease, time.perf_counter() - started


async def _load_or_unload(context: RequestContext, spec: ModelSpec, keep_alive: float | None) -> str:
    """What a request with nothing to answer does: "unload" with keep_alive 0, else "load"."""
    if keep_alive == 0:
        await context.registry.unload(spec.id)
        return "unload"
    lease, _ = await _lease(context, spec, keep_alive)
    if lease is not None:
        lease.release()
    return "load"


def _one(body: Any, stream: bool) -> Response | Stream:
    """A single object, as a stream of one line when the client asked for a stream."""
    if not stream:
        return Response(body)
    return Stream([NDJSON.frame(body)], media_type=NDJSON.media_type)


async def chat(context: RequestContext, body: bytes) -> Response | Stream:
    request = decode_body(body, OllamaChatRequest)
    spec = resolve(context.registry, request.model)
    keep_alive = keep_alive_seconds(request.keep_alive)
    options = parse_options(request.options)
    if not request.messages:
        reason = await _load_or_unload(context, spec, keep_alive)
        return _one(OllamaChatResponse(request.model, created_at(), OllamaResponseMessage("assistant", ""), True,
                                 done_reason=reason), request.stream)
    plan = chat_plan(request, spec.id, options)
    lease, load = await _lease(context, spec, keep_alive)
    try:
        if lease is not None:
            check_num_ctx(options, lease.served.engine.request_limit)
        return await answer(context, plan, lambda prepared, clock: ChatShaper(prepared, clock, request.model, load),
                            NDJSON)
    finally:
        if lease is not None:
            lease.release()


async def generate(context: RequestContext, body: bytes) -> Response | Stream:
    request = decode_body(body, OllamaGenerateRequest)
    spec = resolve(context.registry, request.model)
    keep_alive = keep_alive_seconds(request.keep_alive)
    options = parse_options(request.options)
    if not request.prompt and not request.images and request.suffix is None and not request.context:
        reason = await _load_or_unload(context, spec, keep_alive)
        return _one(OllamaGenerateResponse(request.model, created_at(), "", True, done_reason=reason), request.stream)
    lease, load = await _lease(context, spec, keep_alive)
    try:
        if lease is not None:
            check_num_ctx(options, lease.served.engine.request_limit)
        plan = await generate_plan(request, spec.id, options, lease.served if lease is not None else None)
        # Ollama returns no context for raw prompts; an upstream's tokens are not known here
        with_context = not request.raw and lease is not None
        return await answer(context, plan, lambda prepared, clock: GenerateShaper(
            prepared, clock, request.model, load, with_context=with_context), NDJSON)
    finally:
        if lease is not None:
            lease.release()
