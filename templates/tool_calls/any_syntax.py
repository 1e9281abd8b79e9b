"""Calls in any of several syntaxes: what Fireside reads from a model whose syntax it cannot tell.

`AnySyntax` parses with every member syntax (at each opener, the first member whose pattern reads
a call there); its grammar, opener and history handling are its `primary` member's, since a
forced call must be written in one syntax.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from templates.tool_calls.parser import Output, ToolCallParser
from templates.tool_calls.patterns import MORE, Pattern
from templates.tool_calls.syntax import ToolSyntax


class _AnyHooks:
    """The parser's view of an `AnySyntax`: one per parser, since it remembers which member's
    call is being streamed."""

    at_start: Pattern | None = None

    def __init__(self, members: tuple[ToolSyntax, ...]):
        self.members = members
        self.openers = tuple(dict.fromkeys(opener for member in members for opener in member.openers))
        self._streaming: ToolSyntax | None = None

    def begin(self, p: ToolCallParser, out: Output, text: str, final: bool, *, at_start: bool) -> int | None:
        for member in self.members:
            if not any(text.startswith(opener) for opener in member.openers):
                continue
            taken = member.begin(p, out, text, final, at_start=False)
            if taken == MORE:
                return MORE
            if taken is not None:
                self._streaming = member
                return taken
        return None

    def resume(self, p: ToolCallParser, out: Output, text: str, final: bool) -> tuple[int, bool]:
        assert self._streaming is not None
        return self._streaming.resume(p, out, text, final)


@dataclass(frozen=True)
class AnySyntax(ToolSyntax):
    members: tuple[ToolSyntax, ...] = ()
    primary: ToolSyntax | None = field(default=None, repr=False)

    def parser(self, tool_names: Iterable[str]) -> ToolCallParser:
        return ToolCallParser(_AnyHooks(self.members), tool_names)

    def history(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return self.primary.history(messages) if self.primary is not None else messages


def any_syntax(name: str, primary: ToolSyntax, members: tuple[ToolSyntax, ...]) -> AnySyntax:
    """Calls parsed in every syntax of `members` (tried in order), written in `primary`'s."""
    return AnySyntax(name=name, opener=primary.opener, detect=lambda src: False, grammar=primary.grammar,
                     openers=tuple(dict.fromkeys(o for m in members for o in m.openers)),
                     call_id_length=primary.call_id_length, members=members, primary=primary)
