"""`POST /v1/embeddings`: the spec's `EmbeddingRequest` as an embedding plan (app/pipeline/embed.py
embeds it), the vectors as OpenAI's embedding list.

Inputs are strings, token ids or objects formatted by `prompt_template`
(app/pipeline/embedding_inputs.py), one or many. Each is embedded whole (an input longer than the
model's embedding context is a 400 with the numbers). `normalize`, `dimensions` and
`return_logits` shape the vectors as app/pipeline/embed.py says; `encoding_format: base64` sends
the float32 bytes. Nothing is cached between embedding batches, so `prompt_cache_isolation_key`
holds by construction and `prompt_cache_key` has no cache to steer; both are taken.
"""

from __future__ import annotations

import base64
from typing import Any, Literal

import msgspec
from litestar import Request, post
from litestar.response import Response
from msgspec import UNSET, UnsetType

from app.api.common.context import request_context
from app.api.common.decode import decode_body
from app.api.common.paths import API_PREFIXES
from app.api.common.perf_metrics import perf_headers
from app.pipeline.embed import EmbeddingPlan, embed_on
from app.pipeline.embedding_inputs import parse_inputs
from app.pipeline.errors import BadRequest
from app.pipeline.record import note_caller, track
from app.pipeline.run import acquire_model
from app.pipeline.usage import RequestClock, UsageCounter


class EmbeddingRequest(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """The spec's `EmbeddingRequest`, field by field."""

    model: str
    input: str | list[Any] | dict[str, Any]
    user: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_isolation_key: str | None = None
    raw_output: bool | None = False
    perf_metrics_in_response: bool | None = False
    prompt_template: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    return_logits: list[int] | None = None
    normalize: bool | None = False
    fanout_size: int | None = None


class EmbeddingData(msgspec.Struct):
    index: int
    embedding: list[float] | str
    object: str = "embedding"


class EmbeddingUsage(msgspec.Struct):
    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(msgspec.Struct, omit_defaults=True):
    data: list[EmbeddingData]
    model: str
    usage: EmbeddingUsage
    object: str = "list"
    perf_metrics: dict[str, Any] | UnsetType = UNSET


def embedding_plan(request: EmbeddingRequest) -> EmbeddingPlan:
    for name, why in (("fanout_size", "Fireworks documents no meaning for it on /v1/embeddings"),
                      ("raw_output", "Fireworks documents no raw output for embeddings")):
        if getattr(request, name) not in (None, False):
            raise BadRequest(f"{name} is not supported by this server's /v1/embeddings: {why}", param=name)
    if request.dimensions is not None and request.dimensions < 1:
        raise BadRequest(f"dimensions must be 1 or more, got {request.dimensions}", param="dimensions")
    if request.return_logits is not None and request.dimensions is not None:
        raise BadRequest("dimensions cuts an embedding vector; with return_logits there is none to cut",
                         param="dimensions")
    if request.return_logits is not None and any(i < 0 for i in request.return_logits):
        raise BadRequest("return_logits holds a negative id", param="return_logits")
    return EmbeddingPlan(request.model, parse_inputs(request.input, request.prompt_template), request.prompt_template,
                         bool(request.normalize), request.dimensions,
                         None if request.return_logits is None else tuple(request.return_logits))


async def create_embeddings(request: Request) -> Response:
    context = request_context(request)
    wire = decode_body(await request.body(), EmbeddingRequest)
    plan = embedding_plan(wire)
    clock = RequestClock()
    lease = await acquire_model(context.registry, plan.model, "embedding")
    try:
        note_caller(wire.user, None)
        vectors, prompt_tokens = await embed_on(lease, plan, context.receive)
    finally:
        lease.release()
    clock.finish()
    track(UsageCounter(1, prompt_tokens=prompt_tokens), clock)  # the request log line's token counts
    data = []
    for index, vector in enumerate(vectors):
        encoded: list[float] | str = (base64.b64encode(vector.tobytes()).decode() if wire.encoding_format == "base64"
                                      else vector.tolist())
        data.append(EmbeddingData(index, encoded))
    metrics: dict[str, object] = {"prompt-tokens": prompt_tokens, "cached-prompt-tokens": 0,
                                  "server-processing-time": round((clock.finished or clock.started) - clock.started, 6)}
    body = EmbeddingResponse(data, wire.model, EmbeddingUsage(prompt_tokens, prompt_tokens),
                             perf_metrics=metrics if wire.perf_metrics_in_response else UNSET)
    return Response(msgspec.json.encode(body), media_type="application/json", headers=perf_headers(metrics))


@post([prefix + "/embeddings" for prefix in API_PREFIXES], status_code=200)
async def embeddings(request: Request) -> Response:
    return await create_embeddings(request)


ROUTES = [embeddings]
