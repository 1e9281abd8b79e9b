"""What a tool-call syntax is: `ToolSyntax`, and its two kinds of parsing, `BlockSyntax` (calls sent
whole) and `XmlSyntax` (calls streamed parameter by parameter)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from templates.reasoning_parser import find_first, partial_marker_length
from templates.tool_calls.calls import Call, could_name, cut_in, xml_value
from templates.tool_calls.grammar import Grammar, GrammarFn, tool_functions
from templates.tool_calls.parser import Output, ToolCallParser
from templates.tool_calls.patterns import EMPTY, MORE, Caps, Pattern
from templates.tool_calls.strict_json import dump_json


def _short_id(call_id: Any, length: int) -> Any:
    if not isinstance(call_id, str) or (len(call_id) == length and call_id.isalnum()):
        return call_id
    return hashlib.sha256(call_id.encode()).hexdigest()[:length]


def _with_short_ids(message: dict[str, Any], length: int) -> dict[str, Any]:
    message = dict(message)
    if message.get("tool_calls"):
        message["tool_calls"] = [{**call, "id": _short_id(call.get("id"), length)} for call in message["tool_calls"]]
    if message.get("tool_call_id") is not None:
        message["tool_call_id"] = _short_id(message["tool_call_id"], length)
    return message


@dataclass(frozen=True)
class ToolSyntax:
    """One tool-call syntax: recognised in a template, parsed from output, constrained by a grammar."""

    name: str
    opener: str
    """The text that starts a call (the start of `call_grammar`'s sentences), for lazy grammars."""
    detect: Callable[[str], bool]
    grammar: GrammarFn
    openers: tuple[str, ...] = ()
    """Every text that may start a call in the output (the parser holds back only these)."""
    at_start: Pattern | None = None
    """A call form recognised only at the very start of the output (Llama 3's bare JSON)."""
    variant: str = ""
    """A detail of the syntax that varies between templates of one family (set by `adapt`)."""
    adapt: Callable[[str], str] | None = None
    call_id_length: int | None = None
    """The length of letters and digits the template requires of tool-call ids (Mistral: 9)."""

    def parser(self, tool_names: Iterable[str]) -> ToolCallParser:
        return ToolCallParser(self, tool_names)

    def call_grammar(self, tools: list[dict[str, Any]], *, parallel: bool) -> str:
        """GBNF (rule `root`) for one call (one or more with `parallel`) to one of `tools`, its
        arguments valid under the tool's `parameters` schema (`SchemaError` if one cannot be expressed)."""
        g = Grammar()
        return g.render(self.grammar(g, tool_functions(tools), parallel, self.variant))

    def history(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Past calls as this syntax's templates accept them: ids of `call_id_length` letters or
        digits where required, the same for a call and its result (the caller's data untouched)."""
        if self.call_id_length is None:
            return messages
        return [_with_short_ids(message, self.call_id_length) for message in messages]

    def for_template(self, template_source: str) -> ToolSyntax:
        return replace(self, variant=self.adapt(template_source)) if self.adapt else self

    # The parser's hooks.

    def begin(self, p: ToolCallParser, out: Output, text: str, final: bool, *, at_start: bool) -> int | None:
        """At an opener (or the start): how much text a call took (MORE: cannot tell yet; None: no call).

        At the end of the output (`final`), a text that could still have become a call is a call
        cut short (at `max_tokens`, a stop sequence, or an end of turn the model wrote too soon),
        and all of it is taken: OpenAI's API returns such a call in `tool_calls` with the
        arguments as far as they were written, and never its markup as content. Before the
        call's name is complete there is no call to return, and its markup is dropped (as
        OpenAI's answer holds neither a call nor text then), provided the name written so far
        may still become a tool's: a text that cannot become a call stays content, as a whole
        one that is not a call does."""
        raise NotImplementedError

    def resume(self, p: ToolCallParser, out: Output, text: str, final: bool) -> tuple[int, bool]:
        """Inside a streamed call: (text consumed, whether the call ended)."""
        raise NotImplementedError


@dataclass(frozen=True)
class BlockSyntax(ToolSyntax):
    """Calls sent whole once their text is complete: `pattern` reads the text, `build` the calls."""

    pattern: Pattern = EMPTY
    build: Callable[[Caps, frozenset[str]], list[Call] | None] = lambda caps, names: None

    def begin(self, p: ToolCallParser, out: Output, text: str, final: bool, *, at_start: bool) -> int | None:
        caps: Caps = {"_memo": p._memo}
        pattern = self.at_start if at_start and self.at_start is not None else self.pattern
        r = pattern.match(text, 0, final, caps)
        if r == MORE:
            return MORE
        calls = None if r is None else self.build(caps, p.tool_names)
        if calls is None:
            return self._cut(p, out, text, pattern) if final and p.tool_names else None
        for call in calls:
            p._whole_call(out, call)
        if final and r < len(text) and pattern.match(text, 0, False, {"_memo": p._memo}) == MORE:
            return len(text)  # the output ended inside the markup that closes the calls: theirs too
        return r

    def _cut(self, p: ToolCallParser, out: Output, text: str, pattern: Pattern) -> int | None:
        """The calls of a text cut short at the end of the output (all of it taken), or None."""
        caps: Caps = {"_memo": p._memo, "_cut": None}
        if pattern.match(text, 0, False, caps) != MORE:
            return None
        calls = self.build(caps, p.tool_names)
        if calls is None:
            return None
        if not calls:
            p._drop_markup()
        for call in calls:
            p._whole_call(out, call)
        return len(text)


@dataclass(frozen=True)
class XmlSyntax(ToolSyntax):
    """Calls streamed parameter by parameter: `header` (with the name), then `param` headers each
    followed by a value up to the first of `value_ends` (the first one closes the value and is
    consumed), then `close`."""

    header: Pattern = EMPTY
    param: Pattern = EMPTY
    value_ends: tuple[str, ...] = ()
    close: Pattern = EMPTY

    def begin(self, p: ToolCallParser, out: Output, text: str, final: bool, *, at_start: bool) -> int | None:
        caps: Caps = {}
        r = self.header.match(text, 0, final, caps)
        if r == MORE:
            return MORE
        if r is not None and caps.get("name") in p.tool_names:
            p._open_call(out, caps["name"], caps.get("id"))
            p._mode = "call"
            return r
        return self._cut(p, out, text) if final and p.tool_names else None

    def _cut(self, p: ToolCallParser, out: Output, text: str) -> int | None:
        """A call's header cut short at the end of the output (all of it taken): the call, no
        parameters written, once its name is complete; nothing before; None if it cannot be a call."""
        caps: Caps = {"_cut": None}
        if self.header.match(text, 0, False, caps) != MORE:
            return None
        written = cut_in(caps, "name")
        name = caps.get("name") if written is None else None
        if name is None:
            if written is not None and not could_name(written, p.tool_names):
                return None
            p._drop_markup()
            return len(text)
        if name not in p.tool_names:
            return None
        p._open_call(out, name, caps.get("id"))
        p._arguments(out, "{}")
        p._close_call(cut=True)
        return len(text)

    def resume(self, p: ToolCallParser, out: Output, text: str, final: bool) -> tuple[int, bool]:
        current = p._current
        assert current is not None
        i, n = 0, len(text)
        while True:
            if current.key is not None:
                index, end = find_first(text[i:], self.value_ends)
                if end is None:
                    if not final:
                        return i, False
                    # cut short inside the value: what was written, less a closing tag begun
                    value, i = text[i:n - partial_marker_length(text[i:], self.value_ends)], n
                else:
                    value = text[i:i + index]
                    i += index + (len(end) if end == self.value_ends[0] else 0)
                first = not current.parts
                fragment = dump_json(current.key) + ":" + dump_json(xml_value(value, current.caps))
                p._arguments(out, ("{" if first else ",") + fragment)
                current.key = None
                continue
            while i < n and text[i].isspace():
                i += 1
            if i == n and not final:
                return i, False
            caps: Caps = {}
            r = self.param.match(text, i, final, caps) if i < n else None
            if r == MORE:
                return i, False
            if r is not None:
                current.key, current.caps, i = caps["key"], caps, r
                continue
            r = self.close.match(text, i, final, {}) if i < n else None
            if r == MORE:
                return i, False
            # The call ends at its closing markup, at the end of the output (cut short, with what
            # was written), or where the model left the format (that text stays content). Markup
            # the output ended in (a parameter's, the closing one) is the call's.
            closing = final and (r is None or r < n) and i < n and self.close.match(text, i, False, {}) == MORE
            cut = r is None and final and (i == n or self.param.match(text, i, False, {}) == MORE)
            p._arguments(out, "}" if current.parts else "{}")
            p._close_call(cut)
            return (n if cut or closing else i if r is None else r), True
