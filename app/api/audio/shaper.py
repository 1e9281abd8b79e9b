"""The engine's events as OpenAI's audio answers: the transcript's text (the chat's content; any
reasoning is left out) as `json`, `text`, `srt`, `vtt` or `verbose_json`, or streamed as
`transcript.text.delta` events and a closing `transcript.text.done` with the usage.

Subtitles and `verbose_json` need the audio's length: it is read from the file's header when the
answer is written, only for those formats. The model gives no timing of its own, so the text is
one cue (one segment) from the start of the file to its end."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

from litestar.response import Response

from app.api.audio.form import AudioRequest
from app.api.audio.wire import (
    DurationUsage,
    InputTokenDetails,
    Segment,
    TokenLogprob,
    TokenUsage,
    Transcription,
    TranscriptionTextDeltaEvent,
    TranscriptionTextDoneEvent,
    VerboseTranscription,
)
from app.api.common.logprobs import token_texts
from app.media.audio import audio_seconds
from app.pipeline.errors import ApiError, ErrorResponse
from app.pipeline.output import OutputReader
from app.pipeline.prepare import PreparedRequest
from app.pipeline.run import ChoiceResult
from app.pipeline.stream_buffer import Entry, Piece
from app.pipeline.usage import RequestClock, UsageCounter
from templates.chat_output import OutputEvent

TEXT_PLAIN = "text/plain; charset=utf-8"


@dataclass
class AudioShaper:
    prepared: PreparedRequest
    clock: RequestClock
    request: AudioRequest
    reader: OutputReader = field(init=False)
    parts: list[str] = field(default_factory=list)  # the text streamed so far
    scores: list[TokenLogprob] = field(default_factory=list)  # `include[]=logprobs`: every token so far
    unsent: int = 0  # how many of `scores` no delta has carried yet

    def __post_init__(self) -> None:
        self.reader = self.prepared.output_parser()

    # ---- a stream ------------------------------------------------------------------------------

    def opening(self) -> list[Any]:
        return []

    def prompt_scored(self, choice: int, entries: list[Any]) -> list[Any]:
        return []

    def piece(self, choice: int, piece: Piece) -> list[Any]:
        if self.request.logprobs:
            self.scores.extend(self._logprobs(piece.logprobs))
        return self._deltas(self.reader.feed(piece))

    def finished(self, choice: int, reason: str, last: bool, counter: UsageCounter) -> list[Any]:
        deltas = self._deltas(self.reader.finish())
        done = TranscriptionTextDoneEvent("".join(self.parts), self._usage(counter))
        if self.request.logprobs:
            done.logprobs = self.scores
        return [*deltas, done]

    def usage(self, counter: UsageCounter) -> Any:
        return None  # the done event carries it

    def failed(self, error: ApiError) -> ErrorResponse:
        return error.body()

    def _deltas(self, events: list[OutputEvent]) -> list[TranscriptionTextDeltaEvent]:
        deltas = []
        for text in _content(events):
            self.parts.append(text)
            deltas.append(TranscriptionTextDeltaEvent(text))
        if deltas and self.request.logprobs:  # the tokens read since the last delta go with these
            deltas[0].logprobs, self.unsent = self.scores[self.unsent:], len(self.scores)
        return deltas

    def _logprobs(self, entries: list[Entry]) -> list[TokenLogprob]:
        served = self.prepared.served
        if served is None:
            return []
        texts = token_texts(served.model)
        return [TokenLogprob(texts.get(token).text, scored.logprob, texts.get(token).bytes)
                for token, scored in entries if scored is not None]

    # ---- a whole answer ------------------------------------------------------------------------

    def whole(self, results: list[ChoiceResult], counter: UsageCounter) -> Response:
        result = results[0]
        reader = self.prepared.output_parser()
        text = "".join(_content([*reader.feed(result.piece()), *reader.finish()]))
        form = self.request.response_format
        if form == "json":
            answer = Transcription(text, self._usage(counter))
            if self.request.logprobs:
                answer.logprobs = self._logprobs(result.logprobs)
            return Response(answer)
        if form == "text":
            return Response(text + "\n", media_type=TEXT_PLAIN)
        seconds = audio_seconds(self.request.data) or 0.0
        if form == "srt":
            return Response(f"1\n{_clock(0, ',')} --> {_clock(seconds, ',')}\n{text}\n\n", media_type=TEXT_PLAIN)
        if form == "vtt":
            return Response(f"WEBVTT\n\n{_clock(0, '.')} --> {_clock(seconds, '.')}\n{text}\n\n",
                            media_type=TEXT_PLAIN)
        scores = [scored.logprob for _, scored in result.logprobs if scored is not None]
        segment = Segment(0, 0, 0.0, round(seconds, 3), text, list(result.tokens), self.request.temperature,
                          sum(scores) / len(scores) if scores else 0.0, _compression_ratio(text))
        language = "english" if self.request.task == "translate" else self.request.language
        return Response(VerboseTranscription(self.request.task, round(seconds, 3), text, [segment],
                                             DurationUsage(round(seconds, 3)), **({"language": language}
                                                                                  if language else {})))

    def _usage(self, counter: UsageCounter) -> TokenUsage:
        audio = sum(len(image.tile.embeddings) for prompt in self.prepared.job.prompts for image in prompt.images)
        return TokenUsage(counter.prompt_tokens, counter.completion_tokens, counter.total_tokens,
                          InputTokenDetails(counter.prompt_tokens - audio, audio))


def _content(events: list[OutputEvent]) -> list[str]:
    return [event.text for event in events if event.kind == "content" and event.text]


def _clock(seconds: float, decimal: str) -> str:
    """`HH:MM:SS,mmm` (SRT) or `HH:MM:SS.mmm` (WebVTT)."""
    millis = round(seconds * 1000)
    return f"{millis // 3_600_000:02d}:{millis // 60_000 % 60:02d}:{millis // 1000 % 60:02d}{decimal}{millis % 1000:03d}"


def _compression_ratio(text: str) -> float:
    """Whisper's repetition gauge: the text's bytes over their zlib-compressed size."""
    data = text.encode()
    return round(len(data) / len(zlib.compress(data)), 3) if data else 0.0
