"""What a door's handler reads from the running server: the model registry, the API settings and
the request's context for the pipeline (the server's assembly puts them in `app.state`)."""

from __future__ import annotations

from litestar import Request

from app.pipeline.errors import ModelNotFound
from app.pipeline.run import RequestContext
from app.settings.api import ApiSettings
from backends.registry import ModelRegistry


def registry(request: Request) -> ModelRegistry:
    return request.app.state.registry


def settings(request: Request) -> ApiSettings:
    return request.app.state.settings


def request_context(request: Request) -> RequestContext:
    """The context a generation handler runs in; its clock starts now (the request's arrival)."""
    return RequestContext(registry(request), request.receive, media=settings(request).media)


def named_or_first_model(request: Request, model: str | None) -> str:
    """The model a request names, or, for the APIs whose clients name none (TGI's, llama-server's:
    one server, one model), the first one this server serves."""
    if model is not None:
        return model
    specs = registry(request).specs()
    if not specs:
        raise ModelNotFound("(none given)")
    return specs[0][0].id
