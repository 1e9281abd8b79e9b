"""Ollama's routes under `/api`, with Ollama's error shape (`app.api.ollama.errors`), and `HEAD /`,
which Ollama clients probe to see that the server runs."""

from __future__ import annotations

import asyncio

from litestar import Request, Router, delete, get, head, post
from litestar.response import Response, Stream

from app.api.common.context import registry, request_context
from app.api.common.decode import decode_body
from app.api.common.streams import NDJSON
from app.api.ollama import embed as embedding
from app.api.ollama import generation
from app.api.ollama.errors import HANDLERS
from app.api.ollama.models import (
    OLLAMA_API_VERSION,
    capabilities,
    deletable,
    details,
    digest,
    expires_at,
    file_size,
    metadata,
    modified_at,
    resolve,
    weights_of,
)
from app.api.ollama.pull import downloaded_files, parse_name, pull_stream, pull_whole
from app.api.ollama.wire import (
    OllamaEmbeddingsResponse,
    OllamaEmbedResponse,
    OllamaListedModel,
    OllamaListResponse,
    OllamaModelRequest,
    OllamaProcessResponse,
    OllamaPullRequest,
    OllamaRunningModel,
    OllamaShowResponse,
    OllamaVersionResponse,
)
from app.pipeline.closing_stream import ClosingStream
from app.pipeline.errors import BadRequest
from app.settings.config import remove_model
from backends.llama_model import ModelLoadError
from backends.registry import ModelSpec, ServedModel


@post("/chat", status_code=200)
async def chat(request: Request) -> Response | Stream:
    return await generation.chat(request_context(request), await request.body())


@post("/generate", status_code=200)
async def generate(request: Request) -> Response | Stream:
    return await generation.generate(request_context(request), await request.body())


@post("/embed", status_code=200)
async def embed(request: Request) -> OllamaEmbedResponse:
    return await embedding.embed(request_context(request), await request.body())


@post("/embeddings", status_code=200)
async def embeddings(request: Request) -> OllamaEmbeddingsResponse:
    return await embedding.embeddings(request_context(request), await request.body())


@get("/tags")
async def tags(request: Request) -> OllamaListResponse:
    """Every model this server knows, loaded or not."""
    listed = []
    models = registry(request)
    for spec, served, _ in models.specs():
        info = await metadata(weights_of(models, spec), served) if spec.upstream is None else {}
        model = OllamaListedModel(spec.id, spec.id, modified_at(spec), file_size(spec), digest(spec),
                                  details(info, spec.base))
        if spec.upstream is not None:
            model.remote_model, model.remote_host = spec.upstream.model or spec.id, spec.upstream.url
        listed.append(model)
    return OllamaListResponse(listed)


@get("/ps")
async def ps(request: Request) -> OllamaProcessResponse:
    """The loaded models; `size` is the weights and every slot's cache (as `--memory-budget` counts it)."""
    models = registry(request)
    running = []
    for spec, served, _ in models.specs():
        if served is None:
            continue
        size = await asyncio.to_thread(models.estimate_bytes, spec)
        placed = served.placement  # what the fit put on GPUs and RPC workers' devices
        vram = min(size, sum(share.weights + share.kv_cache for share in placed.devices)) if placed else 0
        info = await metadata(spec, served)
        running.append(OllamaRunningModel(spec.id, spec.id, size, digest(spec), details(info, spec.base),
                                    expires_at(models, spec), vram, served.engine.ctx_size))
    return OllamaProcessResponse(running)


def _named(body: bytes) -> str:
    request = decode_body(body, OllamaModelRequest)
    if not request.target:
        raise BadRequest("model is required", param="model")
    if request.verbose:
        raise BadRequest("verbose cannot be honoured: model_info leaves out the tokenizer's arrays (vocabulary, "
                         "merges); the GGUF file holds them", param="verbose")
    return request.target


def _served(request: Request, spec: ModelSpec) -> ServedModel | None:
    return next((served for known, served, _ in registry(request).specs() if known is spec), None)


@post("/show", status_code=200)
async def show(request: Request) -> OllamaShowResponse:
    models = registry(request)
    spec = resolve(models, _named(await request.body()))
    served = _served(request, spec)
    weights = weights_of(models, spec)
    info = await metadata(weights, served)
    if served is not None:
        template = served.chat_template or served.model.chat_template() or ""
    else:
        template = spec.chat_template.read_text(encoding="utf-8") if spec.chat_template else ""
    parameters = "\n".join(f"{name:<30} {value}" for name, value in spec.sampling.items())
    adapter = f"ADAPTER {spec.path}\n" if spec.base is not None else ""  # as Ollama's Modelfile bakes one in
    modelfile = f"# Modelfile generated by Fireside\nFROM {weights.path}\n{adapter}" + "".join(
        f"PARAMETER {name} {value}\n" for name, value in spec.sampling.items())
    return OllamaShowResponse(modelfile, parameters, template, details(info, spec.base), info,
                              capabilities(served, info), modified_at(spec))


@get("/version")
async def version() -> OllamaVersionResponse:
    return OllamaVersionResponse(OLLAMA_API_VERSION)


@post("/pull", status_code=200)
async def pull(request: Request) -> Response | Stream:
    body = decode_body(await request.body(), OllamaPullRequest)
    name = body.model or body.name
    if not name:
        raise BadRequest("model is required", param="model")
    if body.insecure:
        raise BadRequest("insecure cannot apply: models come from the Hugging Face Hub over HTTPS (HF_ENDPOINT "
                         "points at a mirror)", param="insecure")
    models = registry(request)
    if not body.stream:
        return Response(await pull_whole(models, name))
    parse_name(name)  # a bad name is a 400 before the stream starts

    async def frames():
        async for progress in pull_stream(models, name):
            yield NDJSON.frame(progress)

    return ClosingStream(frames(), media_type=NDJSON.media_type)


@delete("/delete", status_code=200)
async def delete_model(request: Request) -> None:
    """Forget a model `fireside pull` downloaded, and delete its files (see `app.api.ollama.models`)."""
    models = registry(request)
    spec = resolve(models, _named(await request.body()))
    deletable(spec)
    files = downloaded_files(spec)
    try:
        await models.remove(spec.id)
    except ModelLoadError as error:
        raise BadRequest(str(error), param="model") from None
    remove_model(spec.id)
    for path in files:
        path.unlink(missing_ok=True)


@head("/", status_code=200)
async def alive() -> None:
    """Ollama's clients check that the server runs with `HEAD /`."""


ROUTES = [
    Router("/api", route_handlers=[chat, generate, embed, embeddings, tags, ps, show, version, pull, delete_model],
           exception_handlers=HANDLERS),
    alive,
]
