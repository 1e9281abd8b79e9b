"""`POST /v1/audio/transcriptions` and `POST /v1/audio/translations`: OpenAI's multipart audio
requests, answered by a model whose projector reads audio, through the one plan and engine (see
app/api/audio/plan.py). Errors take OpenAI's shape."""

from __future__ import annotations

from typing import Literal

from litestar import Request, post
from litestar.exceptions import HTTPException
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.response import Response, Stream

from app.api.audio.form import audio_request
from app.api.audio.plan import audio_plan
from app.api.audio.shaper import AudioShaper
from app.api.common.context import request_context, settings
from app.api.common.errors import body_too_large
from app.api.common.paths import API_PREFIXES
from app.api.common.streams import AUDIO_SSE
from app.pipeline.chat_formats import chat_format
from app.pipeline.errors import BadRequest
from app.pipeline.prepare import require_generative
from app.pipeline.run import PlanOnModel, answer
from backends.registry import ServedModel


async def _audio(request: Request, task: Literal["transcribe", "translate"]) -> Response | Stream:
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise BadRequest("an audio request is a multipart/form-data form (file, model, ...)", param="file")
    try:
        form = await request.form()
    except RequestEntityTooLarge:
        raise body_too_large(request) from None
    except HTTPException as error:
        raise BadRequest(f"the multipart form could not be read: {error.detail}", param="file") from None
    media = settings(request).media
    audio = await audio_request(form, task, media.max_bytes)

    async def build(served: ServedModel | None):
        if served is None:
            raise BadRequest(f"{audio.model} runs on an upstream server; audio is read by a local model's projector",
                             param="model")
        require_generative(served, "it cannot transcribe")
        return audio_plan(audio, chat_format(served).family.reasons)

    return await answer(request_context(request), PlanOnModel(audio.model, build),
                        lambda prepared, clock: AudioShaper(prepared, clock, audio), AUDIO_SSE)


@post([prefix + "/audio/transcriptions" for prefix in API_PREFIXES], status_code=200)
async def transcriptions(request: Request) -> Response | Stream:
    return await _audio(request, "transcribe")


@post([prefix + "/audio/translations" for prefix in API_PREFIXES], status_code=200)
async def translations(request: Request) -> Response | Stream:
    return await _audio(request, "translate")


ROUTES = [transcriptions, translations]
