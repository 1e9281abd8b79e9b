"""`schema_violations` for every door that takes a schema: a choice's finished answer checked
against what its grammar did not enforce (`app.pipeline.answer_check`).

A door feeds each choice's parsed output events as they go (`saw`) and asks at the end
(`report`); only requests that carry a check keep any text, so the others pay nothing. A tool call
that `max_tokens` or a stop sequence cut short is incomplete by request, as a cut answer is, and is
not checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from msgspec import UNSET, UnsetType

from app.pipeline.answer_check import AnswerCheck, SchemaViolation, reported
from templates.chat_output import OutputEvent
from templates.tool_calls import ToolCall


@dataclass
class AnswerWatch:
    check: AnswerCheck | None
    _contents: dict[int, list[str]] = field(default_factory=dict)

    def saw(self, choice: int, events: list[OutputEvent]) -> None:
        """A choice's parsed output so far (chats)."""
        if self.check is not None:
            self._contents.setdefault(choice, []).extend(event.text for event in events if event.kind == "content")

    def saw_text(self, choice: int, text: str) -> None:
        """A choice's raw text so far (prompts used as written: the whole text is the answer)."""
        if self.check is not None:
            self._contents.setdefault(choice, []).append(text)

    def report(self, choice: int, reason: str, calls: Sequence[ToolCall] = ()) -> list[SchemaViolation] | UnsetType:
        """The choice's violations, UNSET (left out) when there is no check or nothing broke."""
        if self.check is None:
            return UNSET
        content = "".join(self._contents.pop(choice, []))
        return reported(self.check, content, [(call.name, call.arguments) for call in calls if not call.cut], reason)
