"""`POST /v1/embeddings`: the spec's `EmbeddingRequest` as an embedding plan, the engine's pooled
vectors as OpenAI's embedding list.

Inputs are strings, token ids or objects formatted by `prompt_template` (app/api/embeddings/inputs.py),
one or many. Each is embedded whole (an input longer than the model's embedding context is a 400
with the numbers). `normalize` scales each vector to unit length; `dimensions` keeps the first N
components (then renormalises when `normalize`), as Matryoshka-trained models are meant to be cut;
`encoding_format: base64` sends the float32 bytes. With `return_logits`, as Fireworks does, each
`embedding` holds the logits of the listed ids instead (all of them for an empty list): a
generative model's vocabulary at the input's last position, a ranking model's class scores;
`normalize` then makes them probabilities (softmax over the listed ids).
Nothing is cached between embedding batches, so `prompt_cache_isolation_key` holds by
construction and `prompt_cache_key` has no cache to steer; both are taken.
"""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass
from typing import Any, Literal

import msgspec
import numpy as np
from litestar import Request, post
from litestar.response import Response
from litestar.types import Receive
from msgspec import UNSET, UnsetType

from app.api.common.context import request_context
from app.api.common.decode import decode_body
from app.api.common.paths import API_PREFIXES
from app.api.common.perf_metrics import perf_headers
from app.api.embeddings.inputs import Item, format_objects, parse_inputs
from app.pipeline.errors import BadRequest
from app.pipeline.record import note_caller, track
from app.pipeline.run import acquire_model, job_events, submit
from app.pipeline.usage import RequestClock, UsageCounter
from backends.embedder import Pooling, declared_pooling
from backends.jobs import Embedded, EmbeddingJob
from backends.registry import Lease


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


@dataclass(frozen=True)
class EmbeddingPlan:
    """What an embedding request asks for, in Fireside's terms."""

    model: str
    inputs: tuple[Item, ...]
    prompt_template: str | None
    normalize: bool
    dimensions: int | None
    logits: tuple[int, ...] | None  # token or class ids whose logits replace the vector; (): all
    base64: bool
    perf_in_body: bool
    user: str | None
    truncate: bool = False  # cut each input to what the model embeds at once (else a 400 says it is too long)


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
                         None if request.return_logits is None else tuple(request.return_logits),
                         request.encoding_format == "base64", bool(request.perf_metrics_in_response), request.user)


def shape_vector(vector: np.ndarray, plan: EmbeddingPlan) -> np.ndarray:
    """The vector the client asked for: cut to `dimensions`, then normalised when asked; logits
    become probabilities over the selected ids (softmax) when asked to normalise."""
    if plan.logits is not None:
        if not plan.normalize:
            return vector
        exp = np.exp(vector.astype(np.float64) - vector.max())
        return np.asarray(exp / exp.sum(), dtype=np.float32)
    if plan.dimensions is not None:
        if plan.dimensions > len(vector):
            raise BadRequest(f"dimensions {plan.dimensions} exceeds the model's {len(vector)}", param="dimensions")
        vector = vector[:plan.dimensions]
    if plan.normalize:
        norm = float(np.linalg.norm(vector))
        vector = vector / norm if norm > 0 else vector
    return np.asarray(vector, dtype=np.float32)


async def embed_on(lease: Lease, plan: EmbeddingPlan, receive: Receive) -> tuple[list[np.ndarray], int]:
    """The plan's vectors, shaped as asked (`shape_vector`), and the prompt tokens they took, on a
    model the caller holds a lease on (other dialects' embedding routes share this path); a client
    that leaves (`receive`) cancels the job."""
    model = lease.served.model
    if declared_pooling(model) == Pooling.rank and plan.logits is None:
        raise BadRequest(f"{plan.model} is a cross-encoder: it scores (query, document) pairs and has no "
                         "embedding; use /v1/rerank, or return_logits for its class scores", param="model")
    items = plan.inputs
    if plan.prompt_template is not None:
        items = tuple(await asyncio.to_thread(format_objects, plan.prompt_template, list(items), model,
                                              lease.served.engine.embedding_input_limit))
    inputs = []
    for i, item in enumerate(items):
        tokens = (tuple(model.tokenize(item, add_special=True, parse_special=False)) if isinstance(item, str)
                  else item)
        if any(t < 0 or t >= model.n_vocab for t in tokens):
            raise BadRequest(f"input[{i}] holds a token id outside the vocabulary (0 to {model.n_vocab - 1})",
                             param="input")
        if plan.truncate:
            tokens = tokens[:lease.served.engine.embedding_input_limit]
        inputs.append(tokens)
    vectors: dict[int, np.ndarray] = {}
    async for event in job_events(submit(lease.served, EmbeddingJob(tuple(inputs), plan.logits)), receive):
        assert isinstance(event, Embedded)
        vectors[event.choice] = event.vector
    return [shape_vector(vectors[index], plan) for index in range(len(inputs))], sum(map(len, inputs))


async def create_embeddings(request: Request) -> Response:
    context = request_context(request)
    wire = decode_body(await request.body(), EmbeddingRequest)
    plan = embedding_plan(wire)
    clock = RequestClock()
    lease = await acquire_model(context.registry, plan.model, "embedding")
    try:
        note_caller(plan.user, None)
        vectors, prompt_tokens = await embed_on(lease, plan, context.receive)
    finally:
        lease.release()
    clock.finish()
    track(UsageCounter(1, prompt_tokens=prompt_tokens), clock)  # the request log line's token counts
    data = []
    for index, vector in enumerate(vectors):
        encoded: list[float] | str = (base64.b64encode(vector.tobytes()).decode() if plan.base64
                                      else vector.tolist())
        data.append(EmbeddingData(index, encoded))
    metrics: dict[str, object] = {"prompt-tokens": prompt_tokens, "cached-prompt-tokens": 0,
                                  "server-processing-time": round((clock.finished or clock.started) - clock.started, 6)}
    body = EmbeddingResponse(data, wire.model, EmbeddingUsage(prompt_tokens, prompt_tokens),
                             perf_metrics=metrics if plan.perf_in_body else UNSET)
    return Response(msgspec.json.encode(body), media_type="application/json", headers=perf_headers(metrics))


@post([prefix + "/embeddings" for prefix in API_PREFIXES], status_code=200)
async def embeddings(request: Request) -> Response:
    return await create_embeddings(request)


ROUTES = [embeddings]
