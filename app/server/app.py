"""The Litestar application: every dialect's routes, `/health`, `/openapi.json` and `/metrics`,
security and observability around them, errors rendered in one place."""

from __future__ import annotations

import logging

from litestar import Litestar, MediaType, Request, Response, get
from litestar.exceptions import HTTPException
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR

from app.api.anthropic.routes import ROUTES as ANTHROPIC_ROUTES
from app.api.embeddings import ROUTES as EMBEDDING_ROUTES
from app.api.fireworks.routes import ROUTES as FIREWORKS_ROUTES
from app.api.ollama.routes import ROUTES as OLLAMA_ROUTES
from app.api.rerank import ROUTES as RERANK_ROUTES
from app.api.responses.routes import ROUTES as RESPONSES_ROUTES
from app.api.tgi.routes import ROUTES as TGI_ROUTES
from app.server import security
from app.server.errors import ApiError, ErrorBody, ErrorResponse, RequestValidationError
from app.server.health import health
from app.server.metrics import install_observability
from app.server.openapi import openapi_document
from app.server.page import ROUTES as PAGE_ROUTES
from app.server.settings import ApiSettings
from app.server.shutdown import Drain
from app.server.state import attach
from backends.registry import ModelRegistry

log = logging.getLogger("fireside.server")


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


def create_app(registry: ModelRegistry, settings: ApiSettings | None = None, drain: Drain | None = None) -> Litestar:
    """The app; with `drain`, it refuses new requests while `drain` says so (the server stops)."""
    settings = settings or ApiSettings()
    drain = drain or Drain()
    app = Litestar(
        route_handlers=[*FIREWORKS_ROUTES, *EMBEDDING_ROUTES, *RERANK_ROUTES, *ANTHROPIC_ROUTES, *RESPONSES_ROUTES,
                        *TGI_ROUTES, *OLLAMA_ROUTES,
                        *PAGE_ROUTES, health, openapi],
        exception_handlers={
            ApiError: _api_error,
            RequestValidationError: _validation_error,
            RequestEntityTooLarge: security.body_too_large,
            HTTPException: _http_error,
            Exception: _unexpected_error,
        },
        openapi_config=None,  # our own document, generated from the request Structs (app.server.openapi)
        request_max_body_size=settings.security.max_body_bytes,
        # API keys (open paths: security.is_open_path), then a 503 while the server drains
        guards=[*security.api_key_guards(settings.security), drain.guard],
        middleware=security.cors_middleware(settings.security),
        logging_config=None,  # the command line's logging: one plain line per record
        on_startup=[registry.start],  # the keep-alive reaper runs on the serving loop
        on_shutdown=[registry.stop],
    )
    attach(app, registry, settings, drain)
    install_observability(app)  # GET /metrics, per-request metrics and log line
    app.asgi_handler = drain.wrap(app.asgi_handler)
    return app
