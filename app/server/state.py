"""What the running server holds for every request: the model registry and the API settings."""

from __future__ import annotations

from litestar import Litestar, Request

from app.run import RequestContext
from app.server.settings import ApiSettings
from app.server.shutdown import Drain
from backends.registry import ModelRegistry


def attach(app: Litestar, registry: ModelRegistry, settings: ApiSettings, drain: Drain) -> None:
    app.state.registry = registry
    app.state.settings = settings
    app.state.drain = drain


def registry(request: Request) -> ModelRegistry:
    return request.app.state.registry


def settings(request: Request) -> ApiSettings:
    return request.app.state.settings


def request_context(request: Request) -> RequestContext:
    """The context a generation handler runs in; its clock starts now (the request's arrival)."""
    return RequestContext(registry(request), request.receive, media=settings(request).media)
