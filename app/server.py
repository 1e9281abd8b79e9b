"""The Litestar application: routes under `/v1` and `/inference/v1`, errors rendered in one place."""

from __future__ import annotations

import dataclasses
import logging

from litestar import Litestar, MediaType, Request, Response, get, post
from litestar.exceptions import HTTPException
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.params import FromPath
from litestar.response import Stream
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR
from msgspec import UNSET

from app import security
from app.chat import create_chat_completion
from app.completions import create_completion
from app.errors import ApiError, ModelNotFound, RequestValidationError
from app.metrics import install_observability
from app.openapi import openapi_document
from app.response_types import (
    ErrorBody,
    ErrorResponse,
    Health,
    ModelCard,
    ModelHealth,
    ModelList,
)
from app.settings import ApiSettings
from backends.registry import ModelRegistry, ModelSpec, ServedModel

log = logging.getLogger("fireside.server")

API_PREFIXES = ("/v1", "/inference/v1")


def _paths(suffix: str) -> list[str]:
    return [prefix + suffix for prefix in API_PREFIXES]


def _registry(request: Request) -> ModelRegistry:
    return request.app.state.registry


def _settings(request: Request) -> ApiSettings:
    return request.app.state.settings


@post(_paths("/completions"), status_code=200)
async def completions(request: Request) -> Response | Stream:
    return await create_completion(_registry(request), _settings(request), await request.body(), request.receive)


@post(_paths("/chat/completions"), status_code=200)
async def chat_completions(request: Request) -> Response | Stream:
    return await create_chat_completion(_registry(request), _settings(request), await request.body(),
                                        request.receive)


def _card(spec: ModelSpec, served: ServedModel | None, created: int) -> ModelCard:
    context = served.engine.ctx_size if served is not None else (spec.ctx_size or UNSET)
    return ModelCard(id=spec.id, created=created, context_length=context, loaded=served is not None)


@get(_paths("/models"))
async def list_models(request: Request) -> ModelList:
    """Every model this server knows (the command line's and the config file's), loaded or not."""
    return ModelList([_card(*known) for known in _registry(request).specs()])


@get(_paths("/models/{model_id:path}"))
async def get_model(request: Request, model_id: FromPath[str]) -> ModelCard:
    name = model_id.lstrip("/")
    for spec, served, created in _registry(request).specs():
        if _registry(request).knows(name) is spec:
            return _card(spec, served, created)
    raise ModelNotFound(name)


@get("/health")
async def health(request: Request) -> Health:
    return Health("ok", [ModelHealth(served.id, **dataclasses.asdict(served.engine.load())) for served in _registry(request)])


@get(["/openapi.json", "/v1/openapi.json"], media_type=MediaType.JSON)
async def openapi() -> dict[str, object]:
    return openapi_document()


def _api_error(_: Request, error: ApiError) -> Response:
    return Response(error.body(), status_code=error.status_code, headers=error.headers)


def _validation_error(_: Request, error: RequestValidationError) -> Response:
    return Response(error.body(), status_code=422)


def _http_error(_: Request, error: HTTPException) -> Response:
    kind = "invalid_request_error" if error.status_code < 500 else "server_error"
    body = ErrorResponse(ErrorBody(str(error.detail), kind, None, None))
    return Response(body, status_code=error.status_code, headers=error.headers)


def _unexpected_error(_: Request, error: Exception) -> Response:
    log.exception("unhandled error", exc_info=error)
    body = ErrorResponse(ErrorBody(f"internal error: {type(error).__name__}", "server_error", None, None))
    return Response(body, status_code=HTTP_500_INTERNAL_SERVER_ERROR)


def create_app(registry: ModelRegistry, settings: ApiSettings | None = None) -> Litestar:
    security_settings = (settings or ApiSettings()).security
    app = Litestar(
        route_handlers=[completions, chat_completions, list_models, get_model, health, openapi],
        exception_handlers={
            ApiError: _api_error,
            RequestValidationError: _validation_error,
            RequestEntityTooLarge: security.body_too_large,
            HTTPException: _http_error,
            Exception: _unexpected_error,
        },
        openapi_config=None,  # our own document, generated from the request Structs (app.openapi)
        request_max_body_size=security_settings.max_body_bytes,
        guards=security.api_key_guards(security_settings),  # API keys; open paths: security.OPEN_PATHS
        middleware=security.cors_middleware(security_settings),
        logging_config=None,  # the command line's logging: one plain line per record
        on_startup=[registry.start],  # the keep-alive reaper runs on the serving loop
        on_shutdown=[registry.stop],
    )
    app.state.registry = registry
    app.state.settings = settings or ApiSettings()
    install_observability(app)  # GET /metrics, per-request metrics and log line
    return app
