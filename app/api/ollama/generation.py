"""`/api/chat` and `/api/generate`: decode, find the model, apply `keep_alive`, build the plan,
answer through `app.pipeline.run.answer` with Ollama's shapers.

One lease per request, `answer`'s: the plan is finished once the model is held (`PlanOnModel`),
which sets the keep-alive while the model is held, checks `num_ctx` against it and gives
`/api/generate` the model it needs for `suffix` and `context`; `answer` times getting the lease
(`load_duration`, through `AnswerHooks`). A request without messages (chat) or prompt (generate)
only loads the model, or with `keep_alive: 0` unloads it, as Ollama does (`done_reason` "load" /
"unload").

`keep_alive` lasts until the model next unloads; a request without it leaves the model's own
keep-alive (`--keep-alive` / the config's) in force, rather than Ollama's default of 5 minutes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from litestar.response import Response, Stream

from app.api.common.decode import decode_body
from app.api.common.streams import NDJSON
from app.api.ollama.models import resolve
from app.api.ollama.options import (
    Options,
    check_num_ctx,
    keep_alive_seconds,
    parse_options,
)
from app.api.ollama.plan import chat_plan, generate_plan
from app.api.ollama.shapers import ChatShaper, GenerateShaper, created_at
from app.api.ollama.wire import (
    OllamaChatRequest,
    OllamaChatResponse,
    OllamaGenerateRequest,
    OllamaGenerateResponse,
    OllamaResponseMessage,
)
from app.pipeline.plan import RequestPlan
from app.pipeline.run import (
    AnswerHooks,
    PlanOnModel,
    RequestContext,
    acquire_model,
    answer,
)
from backends.registry import ModelSpec, ServedModel


def _on_model(context: RequestContext, spec: ModelSpec, keep_alive: float | None, options: Options,
              plan_for: Callable[[ServedModel | None], Awaitable[RequestPlan]]) -> PlanOnModel:
    """The plan, finished once the model is held: its keep-alive set, `num_ctx` checked (for a
    model that runs upstream nothing is held here, and neither applies)."""

    async def build(served: ServedModel | None) -> RequestPlan:
        if served is not None:
            if keep_alive is not None:
                context.registry.keep_alive(spec.id, keep_alive)
            check_num_ctx(options, served.engine.request_limit)
        return await plan_for(served)

    return PlanOnModel(spec.id, build)


async def _load_or_unload(context: RequestContext, spec: ModelSpec, keep_alive: float | None) -> str:
    """What a request with nothing to answer does: "unload" with keep_alive 0, else "load"."""
    if keep_alive == 0:
        await context.registry.unload(spec.id)
        return "unload"
    if spec.upstream is None:  # nothing loads here for a model that runs upstream
        lease = await acquire_model(context.registry, spec.id)
        if keep_alive is not None:
            context.registry.keep_alive(spec.id, keep_alive)
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

    async def planned(served: ServedModel | None) -> RequestPlan:
        return plan

    hooks = AnswerHooks()
    return await answer(context, _on_model(context, spec, keep_alive, options, planned),
                        lambda prepared, clock: ChatShaper(prepared, clock, request.model, hooks.load_seconds),
                        NDJSON, hooks)


async def generate(context: RequestContext, body: bytes) -> Response | Stream:
    request = decode_body(body, OllamaGenerateRequest)
    spec = resolve(context.registry, request.model)
    keep_alive = keep_alive_seconds(request.keep_alive)
    options = parse_options(request.options)
    if not request.prompt and not request.images and request.suffix is None and not request.context:
        reason = await _load_or_unload(context, spec, keep_alive)
        return _one(OllamaGenerateResponse(request.model, created_at(), "", True, done_reason=reason), request.stream)
    hooks = AnswerHooks()
    # Ollama returns no context for raw prompts; an upstream's tokens are not known here
    with_context = not request.raw and spec.upstream is None
    return await answer(context, _on_model(context, spec, keep_alive, options,
                                           lambda served: generate_plan(request, spec.id, options, served)),
                        lambda prepared, clock: GenerateShaper(prepared, clock, request.model, hooks.load_seconds,
                                                               with_context=with_context),
                        NDJSON, hooks)
