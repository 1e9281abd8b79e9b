"""An upstream's chat output, already split by the server that generated it, carried to the
dialects' shapers through the same text stream the local engine's output takes.

A local model's output is raw text that its chat format's parser splits into content, reasoning
and tool calls (`templates.chat_output.ChatOutput`). An upstream sends those apart, as
`reasoning_content` and `tool_calls` deltas. Its content goes into the text stream as it is; each
reasoning or tool-call delta goes in as a record between two markers, which `UpstreamOutput` (the
parser a shaper gets for an upstream answer) turns back into the same `OutputEvent`s a local
parser makes. So buffering, whole answers and every dialect's shaper work unchanged. The
markers' random part is made at start-up and a control character opens them (JSON escapes those
in a record), so no text an upstream or a user writes can make a record.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field

from templates.chat_output import OutputEvent, new_call_id
from templates.tool_calls.parser import ToolCall

MARK = f"\x00upstream-{secrets.token_hex(8)}\x00"


def reasoning_record(text: str) -> str:
    return f"{MARK}{json.dumps(['reasoning', text])}{MARK}" if text else ""


def call_record(index: int, arguments: str, name: str | None, call_id: str | None) -> str:
    return f"{MARK}{json.dumps(['call', arguments, index, name, call_id])}{MARK}"


def _marker_start(text: str) -> int:
    """Where a marker may begin at the end of `text` (its length when none may)."""
    at = text.rfind(MARK[0], max(0, len(text) - len(MARK) + 1))
    while at >= 0:
        if MARK.startswith(text[at:]):
            return at
        at = text.rfind(MARK[0], max(0, len(text) - len(MARK) + 1), at)
    return len(text)


@dataclass
class _Call:
    name: str
    id: str | None
    arguments: list[str] = field(default_factory=list)


@dataclass
class UpstreamOutput:
    """`ChatOutput`'s interface (feed, finish, calls, call_id) over text made of content and
    records; a record cut at a piece's end waits for the rest."""

    _held: str = ""
    _calls: dict[int, _Call] = field(default_factory=dict)
    _ids: dict[int, str] = field(default_factory=dict)

    def feed(self, text: str) -> list[OutputEvent]:
        text = self._held + text
        self._held = ""
        events: list[OutputEvent] = []
        while text:
            start = text.find(MARK)
            if start < 0:
                held = _marker_start(text)
                if held:
                    events.append(OutputEvent("content", text[:held]))
                self._held = text[held:]
                break
            if start:
                events.append(OutputEvent("content", text[:start]))
            end = text.find(MARK, start + len(MARK))
            if end < 0:
                self._held = text[start:]
                break
            events.append(self._event(json.loads(text[start + len(MARK):end])))
            text = text[end + len(MARK):]
        return events

    def finish(self) -> list[OutputEvent]:
        """What was held back as a possible marker's start is content after all (the upstream's
        own parser finished its calls); an unfinished record is dropped."""
        held, self._held = self._held, ""
        return [OutputEvent("content", held)] if held and not held.startswith(MARK) else []

    def _event(self, record: list) -> OutputEvent:
        if record[0] == "reasoning":
            return OutputEvent("reasoning", record[1])
        _, arguments, index, name, call_id = record
        call = self._calls.get(index)
        if call is None:
            call = self._calls[index] = _Call(name or "", call_id)
            if call_id:
                self._ids[index] = call_id
            first = True
        else:
            first = False
            call.name = call.name or name or ""
        call.arguments.append(arguments)
        return OutputEvent("call", arguments, index, call.name if first else None,
                           self.call_id(index) if first else None)

    @property
    def calls(self) -> list[ToolCall]:
        return [ToolCall(call.name, "".join(call.arguments), call.id) for _, call in sorted(self._calls.items())]

    def call_id(self, index: int) -> str:
        if index not in self._ids:
            self._ids[index] = new_call_id()
        return self._ids[index]
