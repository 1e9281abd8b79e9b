"""The Litestar application: routes under `/v1` and `/inference/v1`, errors rendered in one place."""

from __future__ import annotations

import dataclasses
import logging

from litestar import Litestar, MediaType, Request, Response, get, post
from litestar.exceptions import HTTPException
from litestar.response import Stream
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR

from app.chat import create_chat_completion
from app.completions import create_completion
from app.errors import ApiError, RequestValidationError
from app.generation import resolve_model
from app.openapi import openapi_document
from app.settings import ApiSettings
from app.response_types import ErrorBody, ErrorResponse, Health, ModelCard, ModelHealth, ModelList
from backends.registry import ModelRegistry, ServedModel

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


def _card(served: ServedModel) -> ModelCard:
    return ModelCard(id=served.id, created=served.created, context_length=served.engine.ctx_size)


@get(_paths("/models"))
async def list_models(request: Request) -> ModelList:
    return ModelList([_card(served) for served in _registry(request)])


@get(_paths("/models/{model_id:path}"))
async def get_model(request: Request, model_id: str) -> ModelCard:
    return _card(resolve_model(_registry(request), model_id.lstrip("/")))


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
    app = Litestar(
        route_handlers=[completions, chat_completions, list_models, get_model, health, openapi],
        exception_handlers={
            ApiError: _api_error,
            RequestValidationError: _validation_error,
            HTTPException: _http_error,
            Exception: _unexpected_error,
        },
        openapi_config=None,  # our own document, generated from the request Structs (app.openapi)
        request_max_body_size=16 * 1024 * 1024,
    )
    app.state.registry = registry
    app.state.settings = settings or ApiSettings()
    return app
