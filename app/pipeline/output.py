"""A choice's output read into content, reasoning and tool-call events, whoever split it.

A local model's output is raw text that its chat format's parser splits (`ParsedOutput`, over
`templates.chat_output.ChatOutput`); an upstream server sends its output already split, as parts
on the events (`SplitOutput`). Shapers feed either one `Piece`s and read the same events and
calls, so every door writes a local and an upstream answer alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from app.pipeline.stream_buffer import Piece
from templates.chat_output import ChatOutput, OutputEvent, new_call_id
from templates.tool_calls import ToolCall


class OutputReader(Protocol):
    def feed(self, piece: Piece) -> list[OutputEvent]: ...
    def finish(self) -> list[OutputEvent]: ...
    @property
    def calls(self) -> list[ToolCall]: ...
    def call_id(self, index: int) -> str: ...


@dataclass
class ParsedOutput:
    """A local model's raw output through its chat format's parser."""

    parser: ChatOutput

    def feed(self, piece: Piece) -> list[OutputEvent]:
        return self.parser.feed(piece.text)

    def finish(self) -> list[OutputEvent]:
        return self.parser.finish()

    @property
    def calls(self) -> list[ToolCall]:
        return self.parser.calls

    def call_id(self, index: int) -> str:
        return self.parser.call_id(index)


@dataclass
class _Call:
    name: str
    id: str | None
    arguments: list[str] = field(default_factory=list)


@dataclass
class SplitOutput:
    """Output that came split (an upstream's chat deltas): its parts as the events they are."""

    _calls: dict[int, _Call] = field(default_factory=dict)
    _ids: dict[int, str] = field(default_factory=dict)

    def feed(self, piece: Piece) -> list[OutputEvent]:
        if piece.parts is None:  # text with no parts: content (a completion's, or text the producer did not split)
            return [OutputEvent("content", piece.text)] if piece.text else []
        events = []
        for part in piece.parts:
            if part.kind != "call":
                if part.text:
                    events.append(OutputEvent(part.kind, part.text))
                continue
            call = self._calls.get(part.index)
            first = call is None
            if call is None:
                call = self._calls[part.index] = _Call(part.name or "", part.id)
                if part.id:
                    self._ids[part.index] = part.id
            else:
                call.name = call.name or part.name or ""
            call.arguments.append(part.text)
            events.append(OutputEvent("call", part.text, part.index, call.name if first else None,
                                      self.call_id(part.index) if first else None))
        return events

    def finish(self) -> list[OutputEvent]:
        return []  # nothing is held back: the producer's own parser finished its calls

    @property
    def calls(self) -> list[ToolCall]:
        return [ToolCall(call.name, "".join(call.arguments), call.id) for _, call in sorted(self._calls.items())]

    def call_id(self, index: int) -> str:
        if index not in self._ids:
            self._ids[index] = new_call_id()
        return self._ids[index]
