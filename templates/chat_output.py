"""One choice's raw output, as it streams, split into reasoning, content and tool calls: the
family's reasoning parser first, then the tool-call parser over the content."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from templates.reasoning_parser import ReasoningParser
from templates.tool_calls import CallDelta, ToolCall, ToolCallParser


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class OutputEvent:
    kind: str  # "content" | "reasoning" | "call"
    text: str = ""  # content or reasoning text; for a call, an arguments fragment
    index: int = -1  # the call's index
    name: str | None = None  # the call's name, on its first event
    id: str | None = None  # the call's id, on its first event


@dataclass
class ChatOutput:
    reasoning: ReasoningParser
    tools: ToolCallParser | None = None
    _ids: dict[int, str] = field(default_factory=dict)

    def feed(self, text: str) -> list[OutputEvent]:
        return self._route(self.reasoning.feed(text), final=False)

    def finish(self) -> list[OutputEvent]:
        return self._route(self.reasoning.finish(), final=True)

    @property
    def calls(self) -> list[ToolCall]:
        return [] if self.tools is None else list(self.tools.calls)

    def call_id(self, index: int) -> str:
        if index not in self._ids:
            self._ids[index] = new_call_id()
        return self._ids[index]

    def _route(self, pieces: list[tuple[str, str]], *, final: bool) -> list[OutputEvent]:
        events: list[OutputEvent] = []
        for kind, text in pieces:
            if kind == "content" and self.tools is not None:
                events.extend(self._from_tools(self.tools.feed(text)))
            elif text:
                events.append(OutputEvent(kind, text))
        if final and self.tools is not None:
            events.extend(self._from_tools(self.tools.finish()))
        return events

    def _from_tools(self, items: list[str | CallDelta]) -> list[OutputEvent]:
        events = []
        for item in items:
            if isinstance(item, str):
                if item:
                    events.append(OutputEvent("content", item))
                continue
            first = item.name is not None
            if first and item.id:
                self._ids[item.index] = item.id
            events.append(OutputEvent("call", item.arguments, item.index, item.name,
                                      self.call_id(item.index) if first else None))
        return events
