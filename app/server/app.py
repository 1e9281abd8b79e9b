"""The Litestar application: every dialect's routes, `/health`, `/openapi.json` and `/metrics`,
security and observability around them, errors rendered in one place."""

from __future__ import annotations

import logging

from litestar import Litestar, MediaType, get

from app.api.anthropic.routes import ROUTES as ANTHROPIC_ROUTES
from app.api.audio.routes import ROUTES as AUDIO_ROUTES
from app.api.common.errors import SpecShape, error_handlers
from app.api.embeddings.routes import ROUTES as EMBEDDING_ROUTES
from app.api.fireworks.routes import ROUTES as FIREWORKS_ROUTES
from app.api.llamacpp.routes import ROUTES as LLAMACPP_ROUTES
from app.api.ollama.routes import ROUTES as OLLAMA_ROUTES
from app.api.rerank.routes import ROUTES as RERANK_ROUTES
from app.api.responses.routes import ROUTES as RESPONSES_ROUTES
from app.api.tgi.routes import ROUTES as TGI_ROUTES
from app.server import security
from app.server.health import health
from app.server.metrics import install_observability
from app.server.openapi import openapi_document
from app.server.page import ROUTES as PAGE_ROUTES
from app.server.shutdown import Drain
from app.settings.api import ApiSettings
from backends.registry import ModelRegistry

log = logging.getLogger("fireside.server")


@get(["/openapi.json", "/v1/openapi.json"], media_type=MediaType.JSON)
async def openapi() -> dict[str, object]:
    return openapi_document()


def attach(app: Litestar, registry: ModelRegistry, settings: ApiSettings, drain: Drain) -> None:
    """What handlers read from `app.state` (`app.api.common.context`)."""
    app.state.registry = registry
    app.state.settings = settings
    app.state.drain = drain


def create_app(registry: ModelRegistry, settings: ApiSettings | None = None, drain: Drain | None = None) -> Litestar:
    """The app; with `drain`, it refuses new requests while `drain` says so (the server stops)."""
    settings = settings or ApiSettings()
    drain = drain or Drain()
    app = Litestar(
        route_handlers=[*FIREWORKS_ROUTES, *EMBEDDING_ROUTES, *RERANK_ROUTES, *ANTHROPIC_ROUTES, *RESPONSES_ROUTES,
                        *TGI_ROUTES, *OLLAMA_ROUTES, *AUDIO_ROUTES, *LLAMACPP_ROUTES,
                        *PAGE_ROUTES, health, openapi],
        exception_handlers=error_handlers(SpecShape()),  # the doors with their own shape set theirs
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
