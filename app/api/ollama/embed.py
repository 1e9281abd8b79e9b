"""`POST /api/embed` and the older `POST /api/embeddings`, on the embedding path `/v1/embeddings`
takes too (`app.pipeline.embed`). As Ollama does, `/api/embed` returns unit-length vectors and cuts an
input longer than the model embeds at once unless `truncate` is false; `/api/embeddings`
returns the vector as the model gives it."""

from __future__ import annotations

import time

from app.api.common.decode import decode_body
from app.api.ollama.models import resolve
from app.api.ollama.options import check_num_ctx, keep_alive_seconds, parse_options
from app.api.ollama.shapers import nanoseconds
from app.api.ollama.wire import (
    KeepAlive,
    OllamaEmbeddingsRequest,
    OllamaEmbeddingsResponse,
    OllamaEmbedRequest,
    OllamaEmbedResponse,
)
from app.pipeline.embed import EmbeddingPlan, embed_on
from app.pipeline.embedding_inputs import parse_inputs
from app.pipeline.errors import BadRequest
from app.pipeline.record import track
from app.pipeline.run import RequestContext, acquire_model
from app.pipeline.usage import UsageCounter


async def _embed(context: RequestContext, plan: EmbeddingPlan, options: dict | None,
                 keep_alive: KeepAlive | None) -> tuple[list[list[float]], int, float]:
    """The vectors, the prompt tokens they took, and the seconds the model took to load."""
    checked = parse_options(options, generation=False)
    seconds = keep_alive_seconds(keep_alive)
    started = time.perf_counter()
    lease = await acquire_model(context.registry, plan.model, "embedding")
    load = time.perf_counter() - started
    try:
        check_num_ctx(checked, lease.served.engine.ctx_size)
        if seconds is not None:
            context.registry.keep_alive(plan.model, seconds)
        vectors, prompt_tokens = await embed_on(lease, plan, context.receive)
    finally:
        lease.release()
    context.clock.finish()
    track(UsageCounter(1, prompt_tokens=prompt_tokens), context.clock)
    return [vector.tolist() for vector in vectors], prompt_tokens, load


def _plan(model: str, inputs: str | list[str], *, normalize: bool, truncate: bool,
          dimensions: int | None) -> EmbeddingPlan:
    if dimensions is not None and dimensions < 1:
        raise BadRequest(f"dimensions must be 1 or more, got {dimensions}", param="dimensions")
    if isinstance(inputs, list) and not inputs:
        raise BadRequest("input must hold at least one text", param="input")
    return EmbeddingPlan(model, parse_inputs(inputs, None), normalize=normalize, dimensions=dimensions,
                         truncate=truncate)


async def embed(context: RequestContext, body: bytes) -> OllamaEmbedResponse:
    request = decode_body(body, OllamaEmbedRequest)
    spec = resolve(context.registry, request.model)
    plan = _plan(spec.id, request.input, normalize=True, truncate=request.truncate, dimensions=request.dimensions)
    vectors, prompt_tokens, load = await _embed(context, plan, request.options, request.keep_alive)
    clock = context.clock
    return OllamaEmbedResponse(request.model, vectors, nanoseconds((clock.finished or clock.started) - clock.started), nanoseconds(load),
                         prompt_tokens)


async def embeddings(context: RequestContext, body: bytes) -> OllamaEmbeddingsResponse:
    request = decode_body(body, OllamaEmbeddingsRequest)
    spec = resolve(context.registry, request.model)
    if not request.prompt:
        return OllamaEmbeddingsResponse([])  # Ollama answers an empty prompt with an empty vector
    plan = _plan(spec.id, request.prompt, normalize=False, truncate=False, dimensions=None)
    vectors, _, _ = await _embed(context, plan, request.options, request.keep_alive)
    return OllamaEmbeddingsResponse(vectors[0])
