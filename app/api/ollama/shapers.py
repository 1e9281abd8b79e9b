"""The engine's events as Ollama's answers: `/api/chat` messages and `/api/generate` responses,
whole or as newline-delimited JSON objects, the last one `done` with its statistics.

OllamaTool calls go out whole (Ollama's shape: `function: {name, arguments: {object}}`), in one object
after the model's text, since a call's arguments are an object, not a stream of text.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec
from litestar.response import Response
from msgspec import UNSET, UnsetType

from app.api.common.violations import AnswerWatch
from app.api.ollama.wire import (
    OllamaChatResponse,
    OllamaErrorResponse,
    OllamaGenerateResponse,
    OllamaResponseMessage,
    OllamaTimings,
    OllamaToolCall,
    OllamaToolCallFunction,
)
from app.pipeline.answer_check import SchemaViolation
from app.pipeline.errors import ApiError
from app.pipeline.output import OutputReader
from app.pipeline.prepare import PreparedRequest
from app.pipeline.run import ChoiceResult
from app.pipeline.stream_buffer import Entry, Piece
from app.pipeline.usage import RequestClock, UsageCounter
from templates.chat_output import OutputEvent
from templates.tool_calls.strict_json import arguments_object


def created_at() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def nanoseconds(seconds: float) -> int:
    return max(1, round(seconds * 1e9))  # a duration Ollama reports is never 0


def timings(clock: RequestClock, load_seconds: float, counter: UsageCounter) -> OllamaTimings:
    """Ollama's statistics from the request's clock: loading the model, then the prompt until the
    first token, then the tokens after it."""
    end = clock.finished or time.perf_counter()
    loaded = clock.started + load_seconds
    first = clock.first_token or end
    return OllamaTimings(total_duration=nanoseconds(end - clock.started), load_duration=nanoseconds(load_seconds),
                   prompt_eval_count=counter.prompt_tokens, prompt_eval_duration=nanoseconds(first - loaded),
                   eval_count=counter.completion_tokens, eval_duration=nanoseconds(end - first))


def _done_fields(reason: str, stats: OllamaTimings, violations: list[SchemaViolation] | UnsetType) -> dict[str, Any]:
    return {"done_reason": reason, **msgspec.structs.asdict(stats), "schema_violations": violations}


def tool_calls(output: OutputReader) -> list[OllamaToolCall]:
    """The calls as Ollama's objects: a call cut short (`done_reason: "length"`) with the members of
    its arguments written whole so far (its text need not be a whole JSON object)."""
    return [OllamaToolCall(OllamaToolCallFunction(call.name, arguments_object(call.arguments), index=i),
                           id=call.id or output.call_id(i))
            for i, call in enumerate(output.calls)]


@dataclass
class OllamaShaper:
    """What the chat and generate shapers share: the model's name, the clock, the load time."""

    prepared: PreparedRequest
    clock: RequestClock
    model: str  # as the request named it
    load_seconds: float
    output: OutputReader | None = None  # chats (and rendered generate prompts): content, reasoning, calls
    tokens: list[int] = field(default_factory=list)  # the generated tokens (generate's `context`)
    watch: AnswerWatch = field(init=False)

    def __post_init__(self) -> None:
        self.watch = AnswerWatch(self.prepared.check)
        if self.prepared.chats:
            self.output = self.prepared.output_parser()

    def opening(self) -> list[Any]:
        return []

    def prompt_scored(self, choice: int, entries: list[Entry]) -> list[Any]:
        return []

    def _events(self, piece: Piece) -> list[OutputEvent]:
        if self.output is not None:
            events = self.output.feed(piece)
        else:
            events = [OutputEvent("content", piece.text)] if piece.text else []
        self.watch.saw(0, events)
        return events

    def _finish_events(self) -> list[OutputEvent]:
        events = self.output.finish() if self.output is not None else []
        self.watch.saw(0, events)
        return events

    def _done(self, reason: str, counter: UsageCounter) -> dict[str, Any]:
        """The last object's fields: why it ended, the statistics, the schema check's findings."""
        calls = self.output.calls if self.output is not None else []
        return _done_fields(reason, timings(self.clock, self.load_seconds, counter),
                            self.watch.report(0, reason, calls))

    def piece(self, choice: int, piece: Piece) -> list[Any]:
        self.tokens.extend(piece.tokens)
        return [chunk for event in self._events(piece) if (chunk := self.chunk(event)) is not None]

    def _rest(self) -> list[Any]:
        return [chunk for event in self._finish_events() if (chunk := self.chunk(event)) is not None]

    def usage(self, counter: UsageCounter) -> Any:
        return None  # the last object carries the statistics

    def failed(self, error: ApiError) -> OllamaErrorResponse:
        return OllamaErrorResponse(error.message)

    def _split(self, result: ChoiceResult) -> tuple[str, str]:
        """A whole answer's content and reasoning."""
        events = self._events(result.piece()) + self._finish_events()
        return ("".join(e.text for e in events if e.kind == "content"),
                "".join(e.text for e in events if e.kind == "reasoning"))

    def chunk(self, event: OutputEvent) -> Any | None:
        raise NotImplementedError


@dataclass
class ChatShaper(OllamaShaper):
    def _message(self, content: str = "", thinking: str = "", calls: list[OllamaToolCall] | None = None) -> OllamaResponseMessage:
        return OllamaResponseMessage("assistant", content, thinking or UNSET, calls or UNSET)

    def chunk(self, event: OutputEvent) -> OllamaChatResponse | None:
        if event.kind == "content" and event.text:
            return OllamaChatResponse(self.model, created_at(), self._message(event.text), False)
        if event.kind == "reasoning" and event.text:
            return OllamaChatResponse(self.model, created_at(), self._message(thinking=event.text), False)
        return None  # tool-call deltas: the calls go out whole at the end

    def finished(self, choice: int, reason: str, last: bool, counter: UsageCounter) -> list[OllamaChatResponse]:
        chunks = self._rest()
        calls = tool_calls(self.output) if self.output is not None else []
        if calls:
            chunks.append(OllamaChatResponse(self.model, created_at(), self._message(calls=calls), False))
        chunks.append(OllamaChatResponse(self.model, created_at(), self._message(), True, **self._done(reason, counter)))
        return chunks

    def whole(self, results: list[ChoiceResult], counter: UsageCounter) -> Response:
        result = results[0]
        content, thinking = self._split(result)
        calls = tool_calls(self.output) if self.output is not None else []
        body = OllamaChatResponse(self.model, created_at(), self._message(content, thinking, calls), True,
                                  **self._done(result.finish_reason or "stop", counter))
        return Response(body)


@dataclass
class GenerateShaper(OllamaShaper):
    with_context: bool = True  # not for raw prompts, as Ollama

    def chunk(self, event: OutputEvent) -> OllamaGenerateResponse | None:
        if event.kind == "content" and event.text:
            return OllamaGenerateResponse(self.model, created_at(), event.text, False)
        if event.kind == "reasoning" and event.text:
            return OllamaGenerateResponse(self.model, created_at(), "", False, thinking=event.text)
        return None

    def _context(self, generated: list[int]) -> list[int] | Any:
        if not self.with_context:
            return UNSET
        return [*self.prepared.job.prompts[0].tokens, *generated]

    def finished(self, choice: int, reason: str, last: bool, counter: UsageCounter) -> list[OllamaGenerateResponse]:
        chunks = self._rest()
        chunks.append(OllamaGenerateResponse(self.model, created_at(), "", True, context=self._context(self.tokens),
                                             **self._done(reason, counter)))
        return chunks

    def whole(self, results: list[ChoiceResult], counter: UsageCounter) -> Response:
        result = results[0]
        content, thinking = self._split(result)
        body = OllamaGenerateResponse(self.model, created_at(), content, True, thinking=thinking or UNSET,
                                      context=self._context(result.tokens),
                                      **self._done(result.finish_reason or "stop", counter))
        return Response(body)
