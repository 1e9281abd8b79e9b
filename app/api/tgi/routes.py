"""TGI's routes: `POST /generate`, `POST /generate_stream` and the compatibility route `POST /`
(where `huggingface_hub.InferenceClient(base_url).text_generation` posts; `stream` in the body
chooses). Errors on them are TGI's `{"error", "error_type"}`."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, Router, post
from litestar.response import Stream

from app.api.common.context import (
    named_or_first_model,
    registry,
    request_context,
    settings,
)
from app.api.common.decode import decode_body
from app.api.common.errors import error_handlers, validation_message
from app.api.common.streams import TGI_SSE
from app.api.tgi.plan import tgi_plan
from app.api.tgi.shaper import TgiShaper, error_body
from app.api.tgi.wire import TgiError, TgiGenerateRequest
from app.pipeline.errors import (
    ApiError,
    BadRequest,
    ModelNotFound,
    RequestValidationError,
)
from app.pipeline.run import answer


async def _generate(request: Request, *, stream: bool | None, listed: bool = False) -> Response | Stream:
    body = decode_body(await request.body(), TgiGenerateRequest)
    if stream is not None:
        body.stream = stream  # the route decides: /generate answers whole, /generate_stream streams
    model = named_or_first_model(request, body.model)
    if body.parameters is not None and body.parameters.adapter_id is not None:
        model = _adapter(request, model, body.parameters.adapter_id)
    plan, shape = tgi_plan(body, model, settings(request).max_logprobs)
    return await answer(request_context(request), plan,
                        lambda prepared, clock: TgiShaper(prepared, clock, shape, listed=listed), TGI_SSE)


def _adapter(request: Request, model: str, adapter_id: str) -> str:
    """The LoRA adapter model `adapter_id` names, which must be an adapter of `model` (TGI's and
    LoRAX's multi-LoRA: one base, its adapters picked per request)."""
    models = registry(request)
    base, adapter = models.knows(model), models.knows(adapter_id)
    if base is None:
        raise ModelNotFound(model)
    if adapter is None or adapter.base is None or models.knows(adapter.base) is not base:
        ours = [spec.id for spec, _, _ in models.specs() if spec.base is not None and models.knows(spec.base) is base]
        listed = f"its adapters: {', '.join(ours)}" if ours else "it has none (serve one with --lora or base/lora in the config)"
        raise BadRequest(f"adapter_id {adapter_id!r} is not a LoRA adapter of {base.id}; {listed}", param="adapter_id")
    return adapter.id


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
