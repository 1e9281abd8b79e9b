"""OpenAI's audio answers (`Transcription`, `TranscriptionVerbose`, `Translation`, the
`transcript.text.*` stream events), as msgspec Structs."""

from __future__ import annotations

from typing import Literal

import msgspec
from msgspec import UNSET, UnsetType


class InputTokenDetails(msgspec.Struct):
    text_tokens: int
    audio_tokens: int


class TokenUsage(msgspec.Struct):
    """`usage` of a transcription billed by tokens (OpenAI's `type: tokens`)."""

    input_tokens: int
    output_tokens: int
    total_tokens: int
    input_token_details: InputTokenDetails
    type: Literal["tokens"] = "tokens"


class DurationUsage(msgspec.Struct):
    """`usage` of a verbose answer, by the audio's length (OpenAI's `type: duration`)."""

    seconds: float
    type: Literal["duration"] = "duration"


class TokenLogprob(msgspec.Struct):
    """One token of the text with its log-probability (`include[]=logprobs`)."""

    token: str
    logprob: float
    bytes: list[int]


class Transcription(msgspec.Struct, omit_defaults=True):
    text: str
    usage: TokenUsage
    logprobs: list[TokenLogprob] | UnsetType = UNSET


class Segment(msgspec.Struct, omit_defaults=True):
    """One timed piece of the text. An audio language model writes the text of the whole file at
    once, so the one segment spans the file; it has no `no_speech_prob` (no detector runs)."""

    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: list[int]
    temperature: float
    avg_logprob: float
    compression_ratio: float


class VerboseTranscription(msgspec.Struct, omit_defaults=True):
    task: Literal["transcribe", "translate"]
    duration: float
    text: str
    segments: list[Segment]
    usage: DurationUsage
    language: str | UnsetType = UNSET  # as the request named it (no language is detected here)


class TranscriptionTextDeltaEvent(msgspec.Struct, tag="transcript.text.delta", tag_field="type",
                                  omit_defaults=True):
    delta: str
    logprobs: list[TokenLogprob] | UnsetType = UNSET


class TranscriptionTextDoneEvent(msgspec.Struct, tag="transcript.text.done", tag_field="type", omit_defaults=True):
    text: str
    usage: TokenUsage
    logprobs: list[TokenLogprob] | UnsetType = UNSET
