"""The engine's events as an Anthropic message: whole, or the stream of events
`message_start`, `ping`, per block `content_block_start` / `content_block_delta` /
`content_block_stop`, then `message_delta` (stop reason, usage) and `message_stop`.

The model's output is parsed by its chat format into reasoning, content and tool calls; each run
of one kind becomes one block (thinking, text, tool_use), in the order the model wrote them. A
thinking block is signed when it closes (`signature_delta` just before its `content_block_stop`)
so that a later turn can send it back (`app.api.anthropic.messages`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from litestar.response import Response

from app.api.anthropic.errors import from_api_error
from app.api.anthropic.messages import sign_thinking
from app.api.anthropic.responses import (
    ContentBlockDelta,
    ContentBlockStart,
    ContentBlockStop,
    ContentOut,
    ErrorEvent,
    InputJsonDelta,
    MessageDelta,
    MessageDeltaBody,
    MessageResponse,
    MessageStart,
    MessageStop,
    Ping,
    SignatureDelta,
    StopReason,
    StreamEvent,
    TextDelta,
    TextOut,
    ThinkingDelta,
    ThinkingOut,
    ToolUseOut,
    Usage,
)
from app.api.common.violations import AnswerWatch
from app.pipeline.errors import ApiError
from app.pipeline.output import OutputReader
from app.pipeline.prepare import PreparedRequest
from app.pipeline.record import note_response_id
from app.pipeline.run import ChoiceResult
from app.pipeline.stream_buffer import Entry, Piece
from app.pipeline.usage import RequestClock, UsageCounter
from templates.chat_output import OutputEvent
from templates.tool_calls.strict_json import arguments_object


def message_id() -> str:
    response_id = f"msg_{uuid.uuid4().hex}"
    note_response_id(response_id)  # the request log line shows it, as the other dialects' ids
    return response_id


def tool_use_id() -> str:
    return f"toolu_{uuid.uuid4().hex[:24]}"


def usage(counter: UsageCounter) -> Usage:
    """Anthropic counts cached prompt tokens apart: input + cache_read is the whole prompt."""
    cached = counter.cached_tokens
    return Usage(counter.prompt_tokens - cached, counter.completion_tokens, cached)


@dataclass
class _Open:
    kind: str  # "reasoning" | "content" | "call"
    index: int  # the block's index in the message
    call: int = -1  # the call's index in the output (tool_use blocks)
    text: list[str] = field(default_factory=list)  # thinking text, or a call's argument JSON


@dataclass
class BlockWriter:
    """Output events in, content blocks out: the blocks of the whole message, and the stream
    events that open, fill and close them."""

    blocks: list[ContentOut] = field(default_factory=list)
    current: _Open | None = None

    def _close(self) -> list[StreamEvent]:
        current, self.current = self.current, None
        if current is None:
            return []
        block = self.blocks[current.index]
        events: list[StreamEvent] = []
        if isinstance(block, ThinkingOut):
            block.signature = sign_thinking(block.thinking)
            events.append(ContentBlockDelta(current.index, SignatureDelta(block.signature)))
        elif isinstance(block, ToolUseOut):
            # A call cut short (max_tokens) carries its arguments as far as the model wrote them,
            # which need not be a whole JSON object: the stream sends that text as it is
            # (`input_json_delta` is partial JSON by design), and `input` holds the members
            # written whole so far, as Anthropic's SDK builds it from those deltas (so a whole
            # message and a streamed one agree); {} where nothing of them reads.
            block.input = arguments_object("".join(current.text))
        return [*events, ContentBlockStop(current.index)]

    def _open(self, kind: str, block: ContentOut, call: int = -1) -> list[StreamEvent]:
        events = self._close()
        self.current = _Open(kind, len(self.blocks), call)
        self.blocks.append(block)
        start = block
        if isinstance(block, ToolUseOut):
            start = ToolUseOut(block.id, block.name, {})
        elif isinstance(block, TextOut):
            start = TextOut("")
        elif isinstance(block, ThinkingOut):
            start = ThinkingOut("", "")
        return [*events, ContentBlockStart(self.current.index, start)]

    def add(self, event: OutputEvent) -> list[StreamEvent]:
        current = self.current
        if event.kind == "call":
            events: list[StreamEvent] = []
            if event.name is not None or current is None or current.call != event.index:
                events = self._open("call", ToolUseOut(tool_use_id(), event.name or "", {}), event.index)
            assert self.current is not None
            if event.text:
                self.current.text.append(event.text)
                events.append(ContentBlockDelta(self.current.index, InputJsonDelta(event.text)))
            return events
        if not event.text:
            return []
        events = []
        if current is None or current.kind != event.kind:
            events = self._open(event.kind, ThinkingOut("", "") if event.kind == "reasoning" else TextOut(""))
        assert self.current is not None
        block = self.blocks[self.current.index]
        if isinstance(block, ThinkingOut):
            block.thinking += event.text
            events.append(ContentBlockDelta(self.current.index, ThinkingDelta(event.text)))
        else:
            assert isinstance(block, TextOut)
            block.text += event.text
            events.append(ContentBlockDelta(self.current.index, TextDelta(event.text)))
        return events

    def finish(self) -> list[StreamEvent]:
        return self._close()


@dataclass
class MessageShaper:
    """One request's answer (Anthropic's API has one choice per request)."""

    prepared: PreparedRequest
    clock: RequestClock
    model: str  # as the request named it
    id: str = field(default_factory=message_id)
    output: OutputReader = field(init=False)
    writer: BlockWriter = field(default_factory=BlockWriter)
    watch: AnswerWatch = field(init=False)

    def __post_init__(self) -> None:
        self.output = self.prepared.output_parser()
        self.watch = AnswerWatch(self.prepared.check)

    def _write(self, outputs: list[OutputEvent]) -> list[StreamEvent]:
        self.watch.saw(0, outputs)
        return [event for output in outputs for event in self.writer.add(output)]

    def _stop(self, reason: str | None, counter: UsageCounter) -> tuple[StopReason | None, str | None]:
        if reason == "length":
            return "max_tokens", None
        if self.output.calls:
            return "tool_use", None
        matched = counter.stop_sequences.get(0)
        requested = self.prepared.plan.stop or ()
        if matched is not None and matched in requested:
            return "stop_sequence", matched
        return ("end_turn", None) if reason is not None else (None, None)

    # ---- a stream ----------------------------------------------------------------------------

    def opening(self) -> list[StreamEvent]:
        # The prompt's size is known now; how much of it the cache holds comes at the end, in
        # message_delta's usage (which clients read as the totals).
        prompt = len(self.prepared.job.prompts[0].tokens)
        message = MessageResponse(self.id, self.model, [], None, None, Usage(prompt, 0, 0))
        return [MessageStart(message), Ping()]

    def prompt_scored(self, choice: int, entries: list[Entry]) -> list[Any]:
        return []  # the Messages API has no prompt log-probabilities

    def piece(self, choice: int, piece: Piece) -> list[StreamEvent]:
        return self._write(self.output.feed(piece))

    def finished(self, choice: int, reason: str, last: bool, counter: UsageCounter) -> list[StreamEvent]:
        events = self._write(self.output.finish())
        events += self.writer.finish()
        stop_reason, sequence = self._stop(reason, counter)
        return [*events, MessageDelta(MessageDeltaBody(stop_reason, sequence), usage(counter),
                                      self.watch.report(0, reason, self.output.calls)), MessageStop()]

    def usage(self, counter: UsageCounter) -> Any:
        raise AssertionError("message_delta carries the usage (StreamPlan.include_usage is off)")

    def failed(self, error: ApiError) -> ErrorEvent:
        return from_api_error(error)

    # ---- a whole answer ----------------------------------------------------------------------

    def whole(self, results: list[ChoiceResult], counter: UsageCounter) -> Response:
        [result] = results
        self._write(self.output.feed(result.piece()) + self.output.finish())
        self.writer.finish()
        stop_reason, sequence = self._stop(result.finish_reason, counter)
        violations = self.watch.report(0, result.finish_reason or "stop", self.output.calls)
        return Response(MessageResponse(self.id, self.model, self.writer.blocks, stop_reason, sequence,
                                        usage(counter), schema_violations=violations))
