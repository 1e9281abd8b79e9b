"""The incremental parser: content text and call deltas from output text, however it is chunked."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from templates.reasoning_parser import find_first, partial_marker_length
from templates.tool_calls.calls import Call
from templates.tool_calls.patterns import MORE, Caps, Pattern
from templates.tool_calls.strict_json import dump_json


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str
    """A JSON object as a string: compact `json.dumps` of the parsed arguments (a call `cut` short
    in a JSON syntax: the text as written)."""
    id: str | None
    """The model's own id when its syntax carries one, else None (the server assigns one)."""
    cut: bool = field(default=False, compare=False)
    """The output ended inside the call (`max_tokens`, a stop sequence): `arguments` are what was
    written of them, which need not be a whole JSON object (see `ToolSyntax.begin`)."""


@dataclass(frozen=True)
class CallDelta:
    """A streamed piece of call `index`: the first carries the name (and id), later ones argument text."""

    index: int
    name: str | None
    arguments: str
    id: str | None = None


Output = list["str | CallDelta"]


class SyntaxHooks(Protocol):
    """What the parser asks of its syntax: `syntax.ToolSyntax` (which imports this module, not the reverse)."""

    @property
    def openers(self) -> tuple[str, ...]: ...

    @property
    def at_start(self) -> Pattern | None: ...

    def begin(self, p: ToolCallParser, out: Output, text: str, final: bool, *, at_start: bool) -> int | None: ...

    def resume(self, p: ToolCallParser, out: Output, text: str, final: bool) -> tuple[int, bool]: ...


class _Current:
    """A call being streamed (XML-style syntaxes)."""

    def __init__(self, name: str, call_id: str | None):
        self.name, self.id = name, call_id
        self.parts: list[str] = []
        self.key: str | None = None  # the parameter whose value is being read
        self.caps: Caps = {}


class ToolCallParser:
    """Fed the *content* text (after reasoning was split off); returns content text and call deltas."""

    def __init__(self, syntax: SyntaxHooks, tool_names: Iterable[str]):
        self.syntax = syntax
        self.tool_names = frozenset(tool_names)
        self.calls: list[ToolCall] = []
        self._buffer = ""
        self._mode = "start" if syntax.at_start is not None else "content"
        self._opener = ""
        self._held = ""  # trailing whitespace of the content, sent only if more content follows
        self._trim = False  # drop whitespace at the start of the content (a call just ended)
        self._current: _Current | None = None
        self._memo: dict[int, tuple[int, int, bool]] = {}  # JSON scans of the buffer, while it only grows

    def feed(self, text: str) -> list[str | CallDelta]:
        """Content pieces (str) and call deltas, in order, for the text so far."""
        self._buffer += text
        return self._drain(final=False)

    def finish(self) -> list[str | CallDelta]:
        """Everything still held back, at the end of the output."""
        out = self._drain(final=True)
        if self._held:
            out.append(self._held)
            self._held = ""
        return _merge(out)

    def _drain(self, final: bool) -> list[str | CallDelta]:
        out: Output = []
        while True:
            if self._mode == "call":
                consumed, done = self.syntax.resume(self, out, self._buffer, final)
                self._buffer = self._buffer[consumed:]
                if not done:
                    break
                self._mode = "content"
                continue
            if self._mode in ("start", "opener"):
                at_start = self._mode == "start"
                r = self.syntax.begin(self, out, self._buffer, final, at_start=at_start)
                if r == MORE:
                    break
                self._memo = {}
                if r is None:
                    self._mode = "content"
                    if not at_start:
                        self._content(out, self._opener)
                        self._buffer = self._buffer[len(self._opener):]
                    continue
                self._buffer = self._buffer[r:]
                if self._mode != "call":
                    self._mode = "content"
                continue
            text = self._buffer
            if not text:
                break
            index, opener, wait = self._find_opener(text, final)
            if opener is None or wait:
                cut = index if wait else len(text) - (0 if final else partial_marker_length(text, self.syntax.openers))
                self._content(out, text[:cut])
                self._buffer = text[cut:]
                break
            self._content(out, text[:index])
            self._buffer = text[index:]
            self._opener = opener
            self._mode = "opener"
        return _merge(out)

    def _find_opener(self, text: str, final: bool) -> tuple[int, str | None, bool]:
        """The first opener in `text`, and whether a longer opener may still start at the same place."""
        index, opener = find_first(text, self.syntax.openers)
        if opener is None or final:
            return index, opener, False
        rest = text[index:]
        wait = any(len(other) > len(rest) and other.startswith(rest) for other in self.syntax.openers)
        return index, opener, wait

    def _content(self, out: Output, text: str) -> None:
        if self._trim:
            text = text.lstrip()
            if not text:
                return
            self._trim = False
        text = self._held + text
        body = text.rstrip()
        self._held = text[len(body):]
        if body:
            out.append(body)

    # Used by the syntaxes.

    def _open_call(self, out: Output, name: str, call_id: str | None) -> None:
        self._held = ""
        self._current = _Current(name, call_id)
        out.append(CallDelta(len(self.calls), name, "", call_id))

    def _arguments(self, out: Output, fragment: str) -> None:
        assert self._current is not None
        self._current.parts.append(fragment)
        out.append(CallDelta(len(self.calls), None, fragment))

    def _close_call(self, cut: bool = False) -> None:
        current = self._current
        assert current is not None
        self.calls.append(ToolCall(current.name, "".join(current.parts), current.id, cut))
        self._current = None
        self._trim = True

    def _whole_call(self, out: Output, call: Call) -> None:
        """A call read whole; arguments given as text are those of a call cut short, as written."""
        name, arguments, call_id = call
        self._open_call(out, name, call_id)
        cut = isinstance(arguments, str)
        text = arguments if isinstance(arguments, str) else dump_json(arguments)
        if text:
            self._arguments(out, text)
        self._close_call(cut)

    def _drop_markup(self) -> None:
        """The output ended inside a call's markup before its name was complete: that markup is
        neither content nor a call, and the whitespace before it was layout."""
        self._held = ""


def _merge(pieces: Output) -> list[str | CallDelta]:
    """Adjacent content joined, and adjacent argument fragments of one call."""
    merged: Output = []
    for piece in pieces:
        last = merged[-1] if merged else None
        if isinstance(piece, str) and isinstance(last, str):
            merged[-1] = last + piece
        elif (isinstance(piece, CallDelta) and isinstance(last, CallDelta) and piece.name is None
              and last.name is None and piece.index == last.index):
            merged[-1] = CallDelta(last.index, None, last.arguments + piece.arguments)
        else:
            merged.append(piece)
    return merged
