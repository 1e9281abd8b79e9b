"""TGI's routes: `POST /generate`, `POST /generate_stream` and the compatibility route `POST /`
(where `huggingface_hub.InferenceClient(base_url).text_generation` posts; `stream` in the body
chooses). Errors on them are TGI's `{"error", "error_type"}`."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, Router, post
from litestar.response import Stream

from app.api.common.context import registry, request_context, settings
from app.api.common.decode import decode_body
from app.api.common.errors import error_handlers, validation_message
from app.api.common.streams import TGI_SSE
from app.api.tgi.plan import tgi_plan
from app.api.tgi.shaper import TgiShaper, error_body
from app.api.tgi.wire import TgiError, TgiGenerateRequest
from app.pipeline.errors import ApiError, ModelNotFound, RequestValidationError
from app.pipeline.run import answer


async def _generate(request: Request, *, stream: bool | None, listed: bool = False) -> Response | Stream:
    body = decode_body(await request.body(), TgiGenerateRequest)
    if stream is not None:
        body.stream = stream  # the route decides: /generate answers whole, /generate_stream streams
    model = body.model if body.model is not None else _default_model(request)
    plan, shape = tgi_plan(body, model, settings(request).max_logprobs)
    return await answer(request_context(request), plan,
                        lambda prepared, clock: TgiShaper(prepared, clock, shape, listed=listed), TGI_SSE)


def _default_model(request: Request) -> str:
    """The model TGI's clients mean when they name none: the first one this server serves."""
    specs = registry(request).specs()
    if not specs:
        raise ModelNotFound("(none given)")
    return specs[0][0].id


@post("/generate", status_code=200)
async def generate(request: Request) -> Response | Stream:
    return await _generate(request, stream=False)


@post("/generate_stream", status_code=200)
async def generate_stream(request: Request) -> Response | Stream:
    return await _generate(request, stream=True)


@post("/", status_code=200)
async def compat_generate(request: Request) -> Response | Stream:
    return await _generate(request, stream=None, listed=True)


class TgiShape:
    """TGI's `{"error", "error_type"}`; its schema errors are 422 `validation`."""

    @staticmethod
    def body(status: int, message: str, _: ApiError | None) -> TgiError:
        return error_body(status, message)

    def invalid(self, error: RequestValidationError) -> tuple[int, Any]:
        return 422, TgiError(validation_message(error), "validation")


ROUTES = [Router("", route_handlers=[generate, generate_stream, compat_generate],
                 exception_handlers=error_handlers(TgiShape()))]
