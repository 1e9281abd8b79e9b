"""The Fireworks dialect's routes, under `/v1` and `/inference/v1`."""

from __future__ import annotations

from litestar import Request, get, post
from litestar.params import FromPath
from litestar.response import Response, Stream
from msgspec import UNSET

from app.api.common.context import registry, request_context, settings
from app.api.common.paths import API_PREFIXES
from app.api.fireworks.chat import create_chat_completion
from app.api.fireworks.completions import create_completion
from app.api.fireworks.responses import ModelCard, ModelList
from app.pipeline.errors import ModelNotFound
from backends.embedder import Pooling, declared_pooling
from backends.registry import ModelSpec, ServedModel


def _paths(suffix: str) -> list[str]:
    return [prefix + suffix for prefix in API_PREFIXES]


@post(_paths("/completions"), status_code=200)
async def completions(request: Request) -> Response | Stream:
    context = request_context(request)
    return await create_completion(context, settings(request), await request.body())


@post(_paths("/chat/completions"), status_code=200)
async def chat_completions(request: Request) -> Response | Stream:
    context = request_context(request)
    return await create_chat_completion(context, settings(request), await request.body())


UPSTREAM_CAPABILITIES = ["completion", "chat"]  # what is forwarded (embeddings and rerank are not)


def _card(spec: ModelSpec, served: ServedModel | None, created: int) -> ModelCard:
    if spec.upstream is not None:
        return ModelCard(id=spec.id, created=created, capabilities=UPSTREAM_CAPABILITIES, upstream=spec.upstream.url)
    context = served.engine.request_limit if served is not None else (spec.ctx_size or UNSET)
    return ModelCard(id=spec.id, created=created, context_length=context, loaded=served is not None,
                     capabilities=_capabilities(served) if served is not None else UNSET,
                     parent=spec.base if spec.base is not None else UNSET)


def _capabilities(served: ServedModel) -> list[str]:
    """A generative model completes, chats, embeds (last token; not through a LoRA adapter) and ranks
    (yes against no), and with a projector reads images ("vision") or sound ("audio"); a
    cross-encoder (rank pooling) ranks; a model that declares other pooling only embeds."""
    pooling = declared_pooling(served.model)
    if pooling != Pooling.none and served.adapters is not None:
        return []  # pooled outputs come from the base's weights alone: an adapter of such a model serves none
    if pooling == Pooling.rank:
        return ["rerank"]
    if pooling != Pooling.none:
        return ["embedding"]
    reads = served.projector
    media = ["vision"] * bool(reads and reads.vision) + ["audio"] * bool(reads and reads.audio)
    embeds = ["embedding"] if served.adapters is None else []  # an adapter's embeddings would be its base's
    return ["completion", "chat", *embeds, "rerank", *media]


@get(_paths("/models"))
async def list_models(request: Request) -> ModelList:
    """Every model this server knows (the command line's and the config file's), loaded or not."""
    return ModelList([_card(*known) for known in registry(request).specs()])


@get(_paths("/models/{model_id:path}"))
async def get_model(request: Request, model_id: FromPath[str]) -> ModelCard:
    name = model_id.lstrip("/")
    models = registry(request)
    for spec, served, created in models.specs():
        if models.knows(name) is spec:
            return _card(spec, served, created)
    raise ModelNotFound(name)


ROUTES = [completions, chat_completions, list_models, get_model]
