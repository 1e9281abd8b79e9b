"""OpenAI's audio requests (`/v1/audio/transcriptions`, `/v1/audio/translations`) from their
multipart form: each field checked and typed, unknown fields and values we cannot honour refused
with a 400 naming them, the schema's breaks (a missing file, a temperature that is not a number)
with a 422 naming the field."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from litestar.datastructures import FormMultiDict, UploadFile

from app.pipeline.errors import BadRequest, BodyTooLarge, RequestValidationError

ResponseFormat = Literal["json", "text", "srt", "verbose_json", "vtt"]
RESPONSE_FORMATS: tuple[ResponseFormat, ...] = ("json", "text", "srt", "verbose_json", "vtt")
STREAMED_FORMATS = ("json", "text")  # OpenAI streams these two (its `transcript.text.*` events)
TRANSCRIPTION_FIELDS = frozenset({"file", "model", "language", "prompt", "response_format", "temperature", "stream",
                                  "timestamp_granularities[]", "timestamp_granularities", "chunking_strategy",
                                  "include[]", "include", "max_tokens"})
# `stream` and `max_tokens` are llama-server's additions (OpenAI's translations neither stream nor cap)
TRANSLATION_FIELDS = frozenset({"file", "model", "prompt", "response_format", "temperature", "stream", "max_tokens"})


@dataclass(frozen=True)
class AudioRequest:
    """One transcription or translation, as its form asked."""

    task: Literal["transcribe", "translate"]
    data: bytes  # the uploaded file (its name and type are not trusted: the decoders read its header)
    model: str
    language: str | None
    prompt: str | None
    response_format: ResponseFormat
    temperature: float
    stream: bool
    max_tokens: int | None  # llama-server's cap on the text's tokens (None: what the context leaves)
    logprobs: bool  # `include[]=logprobs`: each token of the text with its log-probability (json only)


async def audio_request(form: FormMultiDict, task: Literal["transcribe", "translate"],
                        max_bytes: int) -> AudioRequest:
    """The form as an `AudioRequest`; `max_bytes`: the largest file read (413 past it)."""
    allowed = TRANSCRIPTION_FIELDS if task == "transcribe" else TRANSLATION_FIELDS
    for key in form:
        if key not in allowed:
            what = "a transcription" if task == "transcribe" else "a translation"
            raise BadRequest(f"{key} is not a field of {what} request (it takes {', '.join(sorted(allowed))})",
                             param=key)
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise RequestValidationError.at(["file"], "Field required: the audio file, sent as a multipart file",
                                        "missing")
    data = await upload.read()
    if len(data) > max_bytes:
        raise BodyTooLarge(f"file is {len(data)} bytes; at most {max_bytes} bytes of audio are read")
    if not data:
        raise BadRequest("file is empty", param="file")
    response_format = _text(form, "response_format") or "json"
    if response_format not in RESPONSE_FORMATS:
        raise BadRequest(f"response_format is one of {', '.join(RESPONSE_FORMATS)}, got {response_format!r}",
                         param="response_format")
    stream = _flag(form, "stream")
    if stream and response_format not in STREAMED_FORMATS:
        raise BadRequest(f"response_format {response_format} cannot stream: a stream carries text "
                         f"({' or '.join(STREAMED_FORMATS)})", param="stream")
    _check_timing(form, response_format)
    return AudioRequest(task, data, _model(form), _text(form, "language"), _text(form, "prompt"), response_format,
                        _temperature(form), stream, _max_tokens(form), _logprobs(form, response_format))


def _logprobs(form: FormMultiDict, response_format: str) -> bool:
    """`include[]`: only `logprobs`, and (as OpenAI's) only with the json format."""
    included = [*form.getall("include[]", []), *form.getall("include", [])]
    for value in included:
        if value != "logprobs":
            raise BadRequest(f"include is logprobs, got {value!r}", param="include")
    if included and response_format != "json":
        raise BadRequest("include logprobs needs response_format json", param="include")
    return bool(included)


def _max_tokens(form: FormMultiDict) -> int | None:
    value = _text(form, "max_tokens")
    if value is None:
        return None
    if not value.isdigit():
        raise RequestValidationError.at(["max_tokens"], f"Input should be a valid integer, got {value!r}",
                                        "int_parsing")
    if int(value) < 1:
        raise BadRequest(f"max_tokens must be 1 or more, got {value}", param="max_tokens")
    return int(value)


def _text(form: FormMultiDict, key: str) -> str | None:
    value = form.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise RequestValidationError.at([key], "Input should be a valid string, not a file", "string_type")
    return value


def _model(form: FormMultiDict) -> str:
    model = _text(form, "model")
    if not model:
        raise RequestValidationError.at(["model"], "Field required", "missing")
    return model


def _flag(form: FormMultiDict, key: str) -> bool:
    value = _text(form, key)
    if value is None or value.lower() in ("false", "0"):
        return False
    if value.lower() in ("true", "1"):
        return True
    raise RequestValidationError.at([key], f"Input should be a valid boolean, got {value!r}", "bool_parsing")


def _temperature(form: FormMultiDict) -> float:
    """OpenAI's `temperature` (0 to 1; 0, greedy, unless given)."""
    value = _text(form, "temperature")
    if value is None:
        return 0.0
    try:
        temperature = float(value)
    except ValueError:
        raise RequestValidationError.at(["temperature"], f"Input should be a valid number, got {value!r}",
                                        "float_parsing") from None
    if not 0 <= temperature <= 1 or math.isnan(temperature):
        raise BadRequest(f"temperature must be 0 to 1, got {value}", param="temperature")
    return temperature


def _check_timing(form: FormMultiDict, response_format: str) -> None:
    """400 for timing an audio language model cannot give (word timestamps; `segment` is what
    verbose_json's one segment is), for granularities outside verbose_json (as OpenAI answers),
    and for chunking other than the projector's own."""
    asked = [*form.getall("timestamp_granularities[]", []), *form.getall("timestamp_granularities", [])]
    for value in asked:
        if value == "word":
            raise BadRequest("timestamp_granularities: word timestamps are not available: this model hears the "
                             "audio through a projector and writes text, with no timing of its words",
                             param="timestamp_granularities")
        if value != "segment":
            raise BadRequest(f"timestamp_granularities are word or segment, got {value!r}",
                             param="timestamp_granularities")
    if asked and response_format != "verbose_json":
        raise BadRequest("timestamp_granularities needs response_format verbose_json",
                         param="timestamp_granularities")
    chunking = form.get("chunking_strategy")
    if chunking is not None and chunking != "auto":
        raise BadRequest("chunking_strategy is auto here: the projector cuts the audio into its encoder's windows "
                         "(Whisper's 30 s) itself", param="chunking_strategy")
