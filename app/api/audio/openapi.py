"""The audio door's part of `/openapi.json`: OpenAI's multipart forms and their answers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.api.audio.form import (
    RESPONSE_FORMATS,
    TRANSCRIPTION_FIELDS,
    TRANSLATION_FIELDS,
)
from app.api.audio.wire import (
    Transcription,
    TranscriptionTextDeltaEvent,
    TranscriptionTextDoneEvent,
    VerboseTranscription,
)
from app.api.common.paths import API_PREFIXES
from app.pipeline.errors import ErrorResponse, HTTPValidationError

STRUCTS: list[type] = [Transcription, VerboseTranscription, TranscriptionTextDeltaEvent, TranscriptionTextDoneEvent]

_FIELDS: dict[str, dict[str, Any]] = {
    "file": {"type": "string", "format": "binary", "description": "The sound: WAV, MP3, FLAC, OGG/Opus, WebM, M4A"},
    "model": {"type": "string"},
    "language": {"type": "string", "description": "Named to the model in its instruction"},
    "prompt": {"type": "string", "description": "The instruction the model gets in place of the default one"},
    "response_format": {"type": "string", "enum": list(RESPONSE_FORMATS), "default": "json"},
    "temperature": {"type": "number", "minimum": 0, "maximum": 1, "default": 0},
    "stream": {"type": "boolean", "default": False},
    "max_tokens": {"type": "integer", "minimum": 1},
    "timestamp_granularities[]": {"type": "array", "items": {"type": "string", "enum": ["segment"]}},
    "chunking_strategy": {"type": "string", "enum": ["auto"]},
    "include[]": {"type": "array", "items": {"type": "string", "enum": ["logprobs"]}},
}


def paths(ref: Callable[[type], dict[str, str]]) -> dict[str, Any]:
    def operation(summary: str, fields: frozenset[str]) -> dict[str, Any]:
        form = {"type": "object", "required": ["file", "model"],
                "properties": {name: schema for name, schema in _FIELDS.items() if name in fields}}
        ok = {"application/json": {"schema": {"anyOf": [ref(Transcription), ref(VerboseTranscription)]}},
              "text/plain": {"schema": {"type": "string"}},
              "text/event-stream": {"schema": {"anyOf": [ref(TranscriptionTextDeltaEvent), ref(TranscriptionTextDoneEvent)]}}}
        errors = {status: {"description": what, "content": {"application/json": {"schema": ref(body)}}}
                  for status, what, body in (("400", "The request means something the server refuses", ErrorResponse),
                                             ("404", "Unknown model", ErrorResponse),
                                             ("413", "The file is past the size limit", ErrorResponse),
                                             ("422", "The form does not fit the schema", HTTPValidationError))}
        return {"post": {"summary": summary, "tags": ["Audio"],
                         "requestBody": {"required": True, "content": {"multipart/form-data": {"schema": form}}},
                         "responses": {"200": {"description": "The text", "content": ok}, **errors}}}

    documented: dict[str, Any] = {}
    for prefix in API_PREFIXES:
        documented[f"{prefix}/audio/transcriptions"] = operation("Create Transcription", TRANSCRIPTION_FIELDS)
        documented[f"{prefix}/audio/translations"] = operation("Create Translation", TRANSLATION_FIELDS)
    return documented
