"""Tool calls in each model family's own syntax, parsed into OpenAI-shaped calls as the text streams.

A `ToolSyntax` per syntax, in `REGISTRY`: how to recognise it in the chat template, the text that
opens a call (`opener`, for lazy grammars), a GBNF grammar for well-formed calls (`call_grammar`),
and an incremental `ToolCallParser` (`parser`). `tool_syntax_for` picks the entry for a template;
`HERMES` (`<tool_call>{json}</tool_call>`) serves every template that none recognises.

The parser is fed the *content* text (reasoning already split off) and returns content pieces
(`str`) and `CallDelta`s, in order:
- text around calls stays content; whitespace next to a call is the model's layout and is dropped;
- call markup never reaches content: only what may still become an opener is held back;
- a call that does not parse, or names a tool not in `tool_names`, stays content, verbatim;
- JSON-in-markup syntaxes (Hermes, Mistral, Kimi, DeepSeek, GPT-OSS, ...) send a call once its JSON
  is complete: one delta with the name (and the model's id), one with all the arguments;
- XML-style syntaxes (Qwen3-Coder, GLM, MiniMax, DSML, Seed-OSS, ...) send the name as soon as the
  call's header is complete, then the arguments parameter by parameter (`{"a":1`, `,"b":"x"`, `}`);
  a parameter's value becomes its JSON type when it parses as a JSON number, boolean, null, object
  or array, else it is the text (the template writes strings unquoted); once its header is
  complete the call stands, and output cut off inside it ends the call with what was written.
The argument fragments of a call concatenate to `ToolCall.arguments`, a compact JSON object. Every
decision waits until the text settles it, so a stream gives the same result however it is chunked.
The markers must reach the parser as text (special tokens rendered by the engine).

`call_grammar` writes the syntax's own markup around each tool's arguments: JSON arguments are
`grammars.json_schema.schema_to_gbnf` grammars embedded with prefixed rule names
(`grammars.embed`); key/value syntaxes take each property's value as raw text for strings (text
without the closing tag's first two characters), literal alternatives for string enums, and JSON
by the property's schema otherwise, the required properties always and in the schema's order.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from grammars.embed import embed
from grammars.gbnf import char_class, literal
from grammars.json_schema import schema_to_gbnf
from templates.reasoning_parser import find_first, partial_marker_length


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str
    """A JSON object as a string: compact `json.dumps` of the parsed arguments."""
    id: str | None
    """The model's own id when its syntax carries one, else None (the server assigns one)."""


@dataclass(frozen=True)
class CallDelta:
    """A streamed piece of call `index`: the first carries the name (and id), later ones argument text."""

    index: int
    name: str | None
    arguments: str
    id: str | None = None


Output = list["str | CallDelta"]
Call = tuple[str, dict[str, Any], "str | None"]
Caps = dict[str, Any]


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("number out of range")
    return value


def _loads(text: str) -> Any:
    """Strict JSON (no NaN/Infinity, no numbers that overflow to infinity)."""
    return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)


# ---- patterns: a small PEG that knows when the input may still be incomplete -------------------
#
# `match(text, i, final, caps)` returns the end of the match, None when the text cannot match, or
# MORE when it cannot tell yet (only when not `final`). Choices are ordered and wait on an earlier
# alternative that may still match, so a decision never depends on how the text was chunked.

MORE = -1


class Pattern:
    def match(self, text: str, i: int, final: bool, caps: Caps) -> int | None:
        raise NotImplementedError


class L(Pattern):
    """A literal."""

    def __init__(self, text: str):
        self.text = text

    def match(self, text: str, i: int, final: bool, caps: Caps) -> int | None:
        if text.startswith(self.text, i):
            return i + len(self.text)
        if not final and len(text) - i < len(self.text) and self.text.startswith(text[i:]):
            return MORE
        return None


class W(Pattern):
    """Optional whitespace (all of it)."""

    def match(self, text: str, i: int, final: bool, caps: Caps) -> int | None:
        n = len(text)
        while i < n and text[i].isspace():
            i += 1
        return MORE if i == n and not final else i


class Chars(Pattern):
    """A run of characters satisfying `ok` (captured as `key`), `low` to `high` long."""

    def __init__(self, key: str | None, ok: Callable[[str], bool], low: int = 1, high: int = 256):
        self.key, self.ok, self.low, self.high = key, ok, low, high

    def match(self, text: str, i: int, final: bool, caps: Caps) -> int | None:
        j, n = i, len(text)
        while j < n and j - i <= self.high and self.ok(text[j]):
            j += 1
        if j - i > self.high:
            return None
        if j == n and not final:
            return MORE
        if j - i < self.low:
            return None
        if self.key:
            caps[self.key] = text[i:j]
        return j


class Until(Pattern):
    """Everything up to the first of `stops` (not consumed), captured as `key`; at the end of the
    output, the rest."""

    def __init__(self, key: str, stops: Sequence[str]):
        self.key, self.stops = key, tuple(stops)

    def match(self, text: str, i: int, final: bool, caps: Caps) -> int | None:
        index, stop = find_first(text[i:], self.stops)
        if stop is None:
            if not final:
                return MORE
            caps[self.key] = text[i:]
            return len(text)
        caps[self.key] = text[i:i + index]
        return i + index


class Json(Pattern):
    """A JSON object or array (parsed into `caps[key]`); with `many`, one or more of them separated
    by whitespace, commas or semicolons (a list in `caps[key]`)."""

    def __init__(self, key: str, many: bool = False):
        self.key, self.many = key, many

    def match(self, text: str, i: int, final: bool, caps: Caps) -> int | None:
        values: list[Any] = []
        n = len(text)
        while True:
            end = _json_end(text, i, caps.get("_memo"))
            if end == MORE:
                return None if final else MORE
            if end is None:
                value = None
            else:
                try:
                    value = _loads(text[i:end])
                except (ValueError, RecursionError):
                    end = None
            if end is None:
                if not values:
                    return None
                break
            values.append(value)
            i = end
            if not self.many:
                break
            j = i
            while j < n and text[j].isspace():
                j += 1
            if j < n and text[j] in ",;":
                j += 1
                while j < n and text[j].isspace():
                    j += 1
            if j == n and not final:
                return MORE
            if j == n or text[j] not in "{[":
                break
            i = j
        caps[self.key] = values if self.many else values[0]
        return i


_OUTSIDE_STRINGS = re.compile(r'[^"{}\[\]]*')
_INSIDE_STRING = re.compile(r'[^"\\]*')


def _json_end(text: str, i: int, memo: dict[int, tuple[int, int, bool]] | None = None) -> int | None:
    """Where the JSON object or array starting at `i` ends (by its brackets), MORE if it has not
    ended yet, None if `i` does not start one. `memo` keeps where an unfinished scan stopped, so
    that scanning a text that only grows at its end costs linear time overall."""
    n = len(text)
    if i >= n:
        return MORE
    if text[i] not in "{[":
        return None
    pos, depth, in_string = memo.get(i, (i, 0, False)) if memo is not None else (i, 0, False)
    while True:
        if in_string:
            pos = _INSIDE_STRING.match(text, pos).end()  # type: ignore[union-attr]
            if pos >= n or (text[pos] == "\\" and pos + 1 >= n):
                break
            if text[pos] == "\\":
                pos += 2
                continue
            in_string, pos = False, pos + 1
            continue
        pos = _OUTSIDE_STRINGS.match(text, pos).end()  # type: ignore[union-attr]
        if pos >= n:
            break
        char = text[pos]
        pos += 1
        if char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return pos
    if memo is not None:
        memo[i] = (pos, depth, in_string)
    return MORE


class Seq(Pattern):
    def __init__(self, *parts: Pattern):
        self.parts = parts

    def match(self, text: str, i: int, final: bool, caps: Caps) -> int | None:
        for part in self.parts:
            r = part.match(text, i, final, caps)
            if r is None or r == MORE:
                return r
            i = r
        return i


class Alt(Pattern):
    """Ordered choice: the first alternative that matches, waiting on any before it that may."""

    def __init__(self, *options: Pattern):
        self.options = options

    def match(self, text: str, i: int, final: bool, caps: Caps) -> int | None:
        for option in self.options:
            trial = dict(caps)
            r = option.match(text, i, final, trial)
            if r == MORE:
                return MORE
            if r is not None:
                caps.update(trial)
                return r
        return None


class _Empty(Pattern):
    def match(self, text: str, i: int, final: bool, caps: Caps) -> int | None:
        return i


_EMPTY = _Empty()


def Opt(*parts: Pattern) -> Pattern:
    return Alt(parts[0] if len(parts) == 1 else Seq(*parts), _Empty())


class Closer(Pattern):
    """An optional closing literal; at the end of the whole output also any start of it (the
    output stopped inside a closer spelled in several tokens, at `max_tokens`)."""

    def __init__(self, text: str):
        self.literal = L(text)

    def match(self, text: str, i: int, final: bool, caps: Caps) -> int | None:
        r = self.literal.match(text, i, final, caps)
        if r is not None:
            return r
        if final and i < len(text) and self.literal.text.startswith(text[i:]):
            return len(text)
        return i


class Peek(Pattern):
    """Lookahead: `inner` must match here, nothing is consumed."""

    def __init__(self, inner: Pattern):
        self.inner = inner

    def match(self, text: str, i: int, final: bool, caps: Caps) -> int | None:
        r = self.inner.match(text, i, final, {})
        return r if r is None or r == MORE else i


class Span(Pattern):
    """`inner`, with the text it matched captured as `key`."""

    def __init__(self, key: str, inner: Pattern):
        self.key, self.inner = key, inner

    def match(self, text: str, i: int, final: bool, caps: Caps) -> int | None:
        r = self.inner.match(text, i, final, caps)
        if r is not None and r != MORE:
            caps[self.key] = text[i:r]
        return r


def _name_char(c: str) -> bool:
    return c.isalnum() or c in "_-."


def _not(chars: str, space: bool = True) -> Callable[[str], bool]:
    """Characters other than `chars` (and, unless `space` is False, other than whitespace)."""
    if space:
        return lambda c: c not in chars and not c.isspace()
    return lambda c: c not in chars


# ---- the parser ---------------------------------------------------------------------------------


class _Current:
    """A call being streamed (XML-style syntaxes)."""

    def __init__(self, name: str, call_id: str | None):
        self.name, self.id = name, call_id
        self.parts: list[str] = []
        self.key: str | None = None  # the parameter whose value is being read
        self.caps: Caps = {}


class ToolCallParser:
    """Fed the *content* text (after reasoning was split off); returns content text and call deltas."""

    def __init__(self, syntax: ToolSyntax, tool_names: Iterable[str]):
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

    def _close_call(self) -> None:
        current = self._current
        assert current is not None
        self.calls.append(ToolCall(current.name, "".join(current.parts), current.id))
        self._current = None
        self._trim = True

    def _whole_call(self, out: Output, call: Call) -> None:
        name, arguments, call_id = call
        self._open_call(out, name, call_id)
        self._arguments(out, _dumps(arguments))
        self._close_call()


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


# ---- reading calls ------------------------------------------------------------------------------


def _flatten(values: Any) -> list[Any]:
    items = values if isinstance(values, list) else [values]
    out: list[Any] = []
    for item in items:
        out.extend(item if isinstance(item, list) else [item])
    return out


def _arguments_object(value: Any) -> dict[str, Any] | None:
    if isinstance(value, str):  # arguments written as a JSON string
        try:
            value = _loads(value) if value.strip() else {}
        except (ValueError, RecursionError):
            return None
    return value if isinstance(value, dict) else None


def _call_object(item: Any, names: frozenset[str], *, name_keys: Sequence[str] = ("name",),
                 args_keys: Sequence[str] = ("arguments", "parameters"), id_key: str | None = None,
                 ignored: Sequence[str] = ("type", "id"), name_as_key: bool = False) -> Call | None:
    """One call written as a JSON object: `{"name": ..., "arguments": {...}}` and its relatives."""
    if not isinstance(item, dict):
        return None
    if isinstance(item.get("function"), dict) and set(item) <= {"function", "type", "id"}:
        item = {**item["function"], **({"id": item["id"]} if "id" in item else {})}
    if name_as_key and len(item) == 1:  # Apertus: {"get_weather": {...}}
        name, arguments = next(iter(item.items()))
    else:
        name = next((item[k] for k in name_keys if k in item), None)
        arguments = next((item[k] for k in args_keys if k in item), {})
        if set(item) - {*name_keys, *args_keys, *ignored}:
            return None
    arguments = _arguments_object(arguments)
    if not isinstance(name, str) or name not in names or arguments is None:
        return None
    call_id = item.get(id_key) if id_key else None
    return name, arguments, call_id if isinstance(call_id, str) and call_id else None


def _json_calls(key: str = "json", **options: Any) -> Callable[[Caps, frozenset[str]], list[Call] | None]:
    """Calls written as JSON objects (alone, in arrays, or in a sequence); all must be calls."""
    def build(caps: Caps, names: frozenset[str]) -> list[Call] | None:
        items = _flatten(caps[key])
        calls = [_call_object(item, names, **options) for item in items]
        if not calls or any(call is None for call in calls):
            return None
        return calls  # type: ignore[return-value]
    return build


def _named_call(caps: Caps, names: frozenset[str]) -> list[Call] | None:
    """A call whose name (and id) the markup carries, its arguments a JSON object."""
    name, arguments = caps["name"], _arguments_object(caps["args"])
    if name not in names or arguments is None:
        return None
    return [(name, arguments, caps.get("id") or None)]


_PY_NAMES = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


def _py_value(node: ast.AST) -> Any:
    """A Python (or JSON) literal."""
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, (str, int, float, bool))):
        if isinstance(node.value, float) and not math.isfinite(node.value):
            raise ValueError("not a finite number")
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_py_value(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        keys = [_py_value(k) if k is not None else None for k in node.keys]
        if not all(isinstance(k, str) for k in keys):
            raise ValueError("object keys must be strings")
        return {k: _py_value(v) for k, v in zip(keys, node.values, strict=True)}
    if isinstance(node, ast.Name) and node.id in _PY_NAMES:
        return _PY_NAMES[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _py_value(node.operand)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    raise ValueError("not a literal")


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _pythonic_calls(text: str, names: frozenset[str]) -> list[Call] | None:
    """`[name(a=1, b="x"), other()]` (LFM2) or `name.call(query="...")` (Llama's built-in tools)."""
    try:
        body = ast.parse(text.strip(), mode="eval").body
        items = body.elts if isinstance(body, (ast.List, ast.Tuple)) else [body]
        calls: list[Call] = []
        for item in items:
            if not isinstance(item, ast.Call) or item.args:
                return None
            name = _dotted(item.func)
            if name is not None and name not in names and name.endswith(".call"):
                name = name[:-len(".call")]
            if name is None or name not in names or any(k.arg is None for k in item.keywords):
                return None
            calls.append((name, {k.arg: _py_value(k.value) for k in item.keywords if k.arg}, None))
        return calls or None
    except (SyntaxError, ValueError, RecursionError, MemoryError, TypeError):
        return None


def _python_tag(caps: Caps, names: frozenset[str]) -> list[Call] | None:
    """After `<|python_tag|>`: a JSON call, a built-in tool call, or code for the python tool."""
    body = caps["body"].strip()
    if body.startswith("{"):
        try:
            call = _call_object(_loads(body), names)
        except (ValueError, RecursionError):
            call = None
        if call is not None:
            return [call]
    calls = _pythonic_calls(body, names)
    if calls is not None:
        return calls
    tool = next((t for t in ("python", "code_interpreter", "ipython") if t in names), None)
    return [(tool, {"code": body}, None)] if tool and body else None


_GEMMA_SCALAR = re.compile(r"[^,}\]]*")


class _GemmaReader:
    """Gemma 4's argument syntax: JSON with bare keys and strings quoted by `<|"|>`."""

    QUOTE = '<|"|>'

    def __init__(self, text: str):
        self.text, self.pos = text, 0

    def skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def value(self, depth: int = 0) -> Any:
        if depth > 64:
            raise ValueError("nested too deeply")
        self.skip()
        text, pos = self.text, self.pos
        if text.startswith(self.QUOTE, pos):
            end = text.find(self.QUOTE, pos + len(self.QUOTE))
            if end < 0:
                raise ValueError("unterminated string")
            self.pos = end + len(self.QUOTE)
            return text[pos + len(self.QUOTE):end]
        if text.startswith("{", pos):
            self.pos += 1
            out: dict[str, Any] = {}
            self.skip()
            if self.text.startswith("}", self.pos):
                self.pos += 1
                return out
            while True:
                self.skip()
                if self.text.startswith(self.QUOTE, self.pos):
                    key = self.value(depth + 1)
                else:
                    end = self.text.find(":", self.pos)
                    if end < 0:
                        raise ValueError("missing ':'")
                    key = self.text[self.pos:end].strip()
                    self.pos = end
                self.skip()
                if not key or not self.text.startswith(":", self.pos):
                    raise ValueError("bad key")
                self.pos += 1
                out[key] = self.value(depth + 1)
                if self.close("}"):
                    return out
        if text.startswith("[", pos):
            self.pos += 1
            items: list[Any] = []
            self.skip()
            if self.text.startswith("]", self.pos):
                self.pos += 1
                return items
            while True:
                items.append(self.value(depth + 1))
                if self.close("]"):
                    return items
        end = _GEMMA_SCALAR.match(text, pos).end()  # type: ignore[union-attr]
        token, self.pos = text[pos:end].strip(), end
        if token[:1] not in set("-0123456789tfn"):  # a number, true, false or null
            raise ValueError("not a value")
        return _loads(token)

    def close(self, bracket: str) -> bool:
        """After an item: True at the closing bracket, False after a comma."""
        self.skip()
        if self.text.startswith(bracket, self.pos):
            self.pos += 1
            return True
        if self.text.startswith(",", self.pos):
            self.pos += 1
            return False
        raise ValueError("expected ',' or a closing bracket")


def _gemma_call(caps: Caps, names: frozenset[str]) -> list[Call] | None:
    name = caps["name"]
    if name not in names:
        return None
    reader = _GemmaReader(caps["body"])
    try:
        arguments = reader.value()
        reader.skip()
    except (ValueError, RecursionError):
        return None
    if not isinstance(arguments, dict) or reader.pos != len(reader.text):
        return None
    return [(name, arguments, None)]


def _lfm2_calls(caps: Caps, names: frozenset[str]) -> list[Call] | None:
    return _pythonic_calls(caps["body"], names)


def _xml_value(raw: str, caps: Caps) -> Any:
    """A parameter's text as a value: its JSON type when it is a JSON number, boolean, null, object
    or array, else the text itself (without the one newline the layout puts on each side)."""
    text = raw.removeprefix("\n")
    text = text.removesuffix("\n")
    kind = caps.get("type")
    if kind in ("true", "string"):  # DSML's string="true", Kimi K3's type="string": as written
        return text
    stripped = text.strip()
    if stripped.startswith("<![CDATA[") and stripped.endswith("]]>"):
        return stripped[len("<![CDATA["):-len("]]>")]
    if stripped[:1] in set('{["-0123456789tfn'):
        try:
            value = _loads(stripped)
        except (ValueError, RecursionError):
            return text
        if not isinstance(value, str):
            return value
    return text


# ---- grammars -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Function:
    name: str
    parameters: dict[str, Any]


def _functions(tools: Sequence[dict[str, Any]]) -> list[Function]:
    out = []
    for tool in tools:
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise TypeError("each tool needs a function name")
        parameters = function.get("parameters")
        out.append(Function(function["name"], parameters if isinstance(parameters, dict) else {"type": "object"}))
    if not out:
        raise ValueError("call_grammar needs at least one tool")
    return out


class _Grammar:
    """The rules of one tool-call grammar; argument schemas are embedded with their own prefix."""

    WS = '( " " | "\\n" [ \\t]{0,20} )?'

    def __init__(self) -> None:
        self.rules: dict[str, str] = {"ws": self.WS}
        self.embedded: list[str] = []
        self._schemas: dict[str, str] = {}  # schema (as JSON) -> its embedded root rule
        self._count = 0

    def rule(self, hint: str, body: str) -> str:
        for name, existing in self.rules.items():
            if existing == body:
                return name
        self._count += 1
        name = f"{hint}-{self._count}"
        self.rules[name] = body
        return name

    def json(self, schema: Any) -> str:
        """A rule for the JSON texts valid under `schema` (`SchemaError` if it cannot be expressed)."""
        key = json.dumps(schema, sort_keys=True)
        if key not in self._schemas:
            self._count += 1
            rules, self._schemas[key] = embed(schema_to_gbnf(schema), f"s{self._count}-")
            self.embedded.append(rules)
        return self._schemas[key]

    def text(self, close: str) -> str:
        """Raw text up to `close`: anything without `<` followed by the second character of `close`."""
        return self.rule("text", f'( {char_class([(60, 60)], negated=True)} | "<" '
                                 f'{char_class([(ord(close[1]), ord(close[1]))], negated=True)} )*')

    def render(self, root: str) -> str:
        lines = [f"root ::= {root}", *(f"{name} ::= {body}" for name, body in self.rules.items()), *self.embedded]
        return "\n".join(lines) + "\n"


def _alternatives(g: _Grammar, hint: str, options: list[str]) -> str:
    return options[0] if len(options) == 1 else g.rule(hint, " | ".join(f"( {o} )" for o in options))


def _repeat(one: str, sep: str, parallel: bool) -> str:
    return f"{one} ( {sep} {one} )*" if parallel else one


def _json_object(fields: Sequence[tuple[str, str]], after: str = "") -> str:
    """`{"key": value, ...}` with the keys in this order (`after`: more before the closing brace)."""
    parts = ['"{"', "ws"]
    for index, (key, value) in enumerate(fields):
        if index:
            parts += ['","', "ws"]
        parts += [literal(json.dumps(key, ensure_ascii=False)), '":"', "ws", value]
    return " ".join([*parts, after, "ws", '"}"'] if after else [*parts, "ws", '"}"'])


def _jstr(text: str) -> str:
    return literal(json.dumps(text, ensure_ascii=False))


def _object_call(g: _Grammar, f: Function, name_key: str = "name", args_key: str = "arguments",
                 extra: Sequence[tuple[str, str]] = ()) -> str:
    return _json_object([*extra, (name_key, _jstr(f.name)), (args_key, g.json(f.parameters))])


def _with_defs(schema: Any, root: dict[str, Any]) -> Any:
    """A property's schema, with the root's definitions so that its `$ref`s still resolve."""
    if not isinstance(schema, dict):
        return schema
    defs = {k: root[k] for k in ("$defs", "definitions") if k in root and k not in schema}
    return {**schema, **defs} if defs else schema


def _types(schema: Any) -> set[str]:
    if not isinstance(schema, dict):
        return set()
    kind = schema.get("type")
    return {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else set()


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


def _string_enum(schema: Any) -> list[str] | None:
    if isinstance(schema, dict) and ("enum" in schema or "const" in schema):
        values = schema.get("enum", [schema.get("const")])
        if isinstance(values, list) and values and all(isinstance(v, str) for v in values):
            return values
    return None


def _is_text(schema: Any) -> bool:
    """Whether a parameter's value is written as raw text (a string-typed parameter)."""
    return "string" in _types(schema) and _string_enum(schema) is None and "enum" not in schema


ParamFn = Callable[[str | None, Any], str]


def _params(f: Function, param: ParamFn, *, sort: bool = False) -> str:
    """The parameters of a key/value syntax in the schema's order (sorted with `sort`): the
    required ones always, the others optionally; any keys when the schema lists none."""
    schema = f.parameters
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return f"( {param(None, True)} )*"
    required = set(schema.get("required", [])) if isinstance(schema.get("required"), list) else set()
    keys = sorted(properties) if sort else list(properties)
    parts = []
    for key in keys:
        expression = param(key, _with_defs(properties[key], schema))
        parts.append(expression if key in required else f"( {expression} )?")
    return " ".join(parts) if parts else '""'


_KEY = "[a-zA-Z0-9_.-]+"
NL, NL_OPT, NLS, NOTHING, COMMA_WS = '"\\n"', '"\\n"?', '"\\n"*', '""', '"," ws'


def _xml_param(g: _Grammar, before: str, middle: str, close: str, *, newlines: bool = False,
               after: str = "") -> ParamFn:
    """`before KEY middle VALUE close after` (`before` and `close` texts, `middle` and `after` GBNF):
    raw text for strings, literal alternatives for string enums, JSON (by the schema) otherwise;
    with `newlines`, an optional newline on each side of the value."""
    nl = NL_OPT if newlines else ""

    def param(key: str | None, schema: Any) -> str:
        name = _KEY if key is None else literal(key)
        _, value = _value(g, key, schema, close, any_as_text=True)
        return " ".join(p for p in (literal(before), name, middle, nl, value, nl, literal(close), after) if p)
    return param


def _value(g: _Grammar, key: str | None, schema: Any, close: str, *, any_as_text: bool = False) -> tuple[str, str]:
    """One parameter's value: ("text", raw text up to `close`) for strings and unknown keys,
    ("enum", the alternatives) for string enums, ("json", JSON by the schema) otherwise."""
    if key is None or _is_text(schema) or (any_as_text and schema is True):
        return "text", g.text(close)
    enum = _string_enum(schema)
    if enum is not None:
        return "enum", "( " + " | ".join(literal(v) for v in enum) + " )"
    return "json", g.json(schema)


# ---- syntaxes -----------------------------------------------------------------------------------

GrammarFn = Callable[[_Grammar, list[Function], bool, str], str]


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
        g = _Grammar()
        return g.render(self.grammar(g, _functions(tools), parallel, self.variant))

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
        """At an opener (or the start): how much text a call took (MORE: cannot tell yet; None: no call)."""
        raise NotImplementedError

    def resume(self, p: ToolCallParser, out: Output, text: str, final: bool) -> tuple[int, bool]:
        """Inside a streamed call: (text consumed, whether the call ended)."""
        raise NotImplementedError


@dataclass(frozen=True)
class BlockSyntax(ToolSyntax):
    """Calls sent whole once their text is complete: `pattern` reads the text, `build` the calls."""

    pattern: Pattern = _EMPTY
    build: Callable[[Caps, frozenset[str]], list[Call] | None] = lambda caps, names: None

    def begin(self, p: ToolCallParser, out: Output, text: str, final: bool, *, at_start: bool) -> int | None:
        caps: Caps = {"_memo": p._memo}
        pattern = self.at_start if at_start and self.at_start is not None else self.pattern
        r = pattern.match(text, 0, final, caps)
        if r is None or r == MORE:
            return r
        calls = self.build(caps, p.tool_names)
        if calls is None:
            return None
        for call in calls:
            p._whole_call(out, call)
        return r


@dataclass(frozen=True)
class XmlSyntax(ToolSyntax):
    """Calls streamed parameter by parameter: `header` (with the name), then `param` headers each
    followed by a value up to the first of `value_ends` (the first one closes the value and is
    consumed), then `close`."""

    header: Pattern = _EMPTY
    param: Pattern = _EMPTY
    value_ends: tuple[str, ...] = ()
    close: Pattern = _EMPTY

    def begin(self, p: ToolCallParser, out: Output, text: str, final: bool, *, at_start: bool) -> int | None:
        caps: Caps = {}
        r = self.header.match(text, 0, final, caps)
        if r is None or r == MORE:
            return r
        if caps.get("name") not in p.tool_names:
            return None
        p._open_call(out, caps["name"], caps.get("id"))
        p._mode = "call"
        return r

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
                    value, i = text[i:], n
                else:
                    value = text[i:i + index]
                    i += index + (len(end) if end == self.value_ends[0] else 0)
                first = not current.parts
                fragment = _dumps(current.key) + ":" + _dumps(_xml_value(value, current.caps))
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
            # The call ends at its closing markup, at the end of the output, or where the model
            # left the format (that text stays content).
            p._arguments(out, "}" if current.parts else "{}")
            p._close_call()
            return (i if r is None else r), True


# ---- the syntaxes' markup -----------------------------------------------------------------------


def _hermes_grammar(g: _Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    call = _alternatives(g, "call", [_object_call(g, f) for f in functions])
    one = f'"<tool_call>" "\\n"? {call} "\\n"? "</tool_call>"'
    return _repeat(one, '"\\n"*', parallel)


HERMES = BlockSyntax(
    name="hermes", opener="<tool_call>", openers=("<tool_call>",), detect=lambda src: "<tool_call>" in src,
    grammar=_hermes_grammar,
    pattern=Seq(L("<tool_call>"), W(), Json("json", many=True), W(), Closer("</tool_call>")),
    build=_json_calls())


def _qwen3_coder_grammar(g: _Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    wrapper_open, wrapper_close = variant.split("|") if variant else ("<tool_call>", "</tool_call>")
    param = _xml_param(g, "<parameter=", '">"', "</parameter>", newlines=True, after=NL_OPT)
    calls = [f'"<function=" {literal(f.name)} ">" "\\n"? {_params(f, param)} "\\n"? "</function>"'
             for f in functions]
    one = f'{literal(wrapper_open)} "\\n"? {_alternatives(g, "call", calls)} "\\n"? {literal(wrapper_close)}'
    return _repeat(one, '"\\n"*', parallel)


def _function_xml(wrapper: str, end: str) -> dict[str, Any]:
    """`<tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call>` (Qwen3-Coder),
    with another wrapper for Seed-OSS."""
    return {
        "openers": (wrapper, "<function="),
        "header": Seq(Opt(L(wrapper), W()), L("<function="), Chars("name", _not(">\n<", space=False)), L(">")),
        "param": Seq(L("<parameter="), Chars("key", _not(">\n<", space=False)), L(">")),
        "value_ends": ("</parameter>", "<parameter=", "</function>"),
        "close": Seq(L("</function>"), W(), Closer(end))}


QWEN3_CODER = XmlSyntax(
    name="qwen3-coder", opener="<tool_call>", detect=lambda src: "<function=" in src and "<parameter=" in src,
    grammar=_qwen3_coder_grammar, **_function_xml("<tool_call>", "</tool_call>"))

SEED_OSS = XmlSyntax(
    name="seed-oss", opener="<seed:tool_call>", detect=lambda src: "<seed:tool_call>" in src,
    grammar=_qwen3_coder_grammar, variant="<seed:tool_call>|</seed:tool_call>",
    **_function_xml("<seed:tool_call>", "</seed:tool_call>"))


def _llama3_grammar(g: _Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    call = _alternatives(g, "call", [_object_call(g, f, args_key="parameters") for f in functions])
    return _repeat(call, '";" ws', parallel)


_PYTHON_TAG = Seq(L("<|python_tag|>"), Until("body", ("<|eom_id|>", "<|eot_id|>")),
                  Opt(Alt(L("<|eom_id|>"), L("<|eot_id|>"))))


def _llama3_build(caps: Caps, names: frozenset[str]) -> list[Call] | None:
    return _python_tag(caps, names) if "body" in caps else _json_calls()(caps, names)


LLAMA3 = BlockSyntax(
    name="llama3", opener='{"name":', openers=("<|python_tag|>",),
    detect=lambda src: "<|start_header_id|>" in src and '"parameters": ' in src,
    grammar=_llama3_grammar,
    at_start=Seq(W(), Peek(Seq(L("{"), W(), L('"'), Alt(L('name"'), L('type"'), L('function"')))),
                 Json("json", many=True)),
    pattern=_PYTHON_TAG, build=_llama3_build)


def _mistral_grammar(g: _Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    call_id = ' "[CALL_ID]" [a-zA-Z0-9]{9}' if variant == "call-id" else ""
    calls = [f'{literal(f.name)}{call_id} "[ARGS]" {g.json(f.parameters)}' for f in functions]
    one = f'"[TOOL_CALLS]" {_alternatives(g, "call", calls)}'
    return _repeat(one, '""', parallel)


_MISTRAL_ID = '( "," ws "\\"id\\"" ":" ws "\\"" [a-zA-Z0-9]{9} "\\"" )?'


def _mistral_json_grammar(g: _Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    calls = [_json_object([("name", _jstr(f.name)), ("arguments", g.json(f.parameters))], after=_MISTRAL_ID)
             for f in functions]
    call = _alternatives(g, "call", calls)
    return f'"[TOOL_CALLS]" "[" ws {_repeat(call, COMMA_WS, parallel)} ws "]"'


def _mistral_build(caps: Caps, names: frozenset[str]) -> list[Call] | None:
    if "name" in caps:
        return _named_call(caps, names)
    return _json_calls(id_key="id")(caps, names)


_MISTRAL_PATTERN = Seq(L("[TOOL_CALLS]"), W(), Alt(
    Seq(Chars("name", _name_char), Opt(L("[CALL_ID]"), Chars("id", str.isalnum)), L("[ARGS]"), W(), Json("args")),
    Json("json", many=True)))

MISTRAL = BlockSyntax(
    name="mistral", opener="[TOOL_CALLS]", openers=("[TOOL_CALLS]",),
    detect=lambda src: "[TOOL_CALLS]" in src and "[ARGS]" in src, grammar=_mistral_grammar,
    adapt=lambda src: "call-id" if "[CALL_ID]" in src else "", call_id_length=9,
    pattern=_MISTRAL_PATTERN, build=_mistral_build)

MISTRAL_JSON = BlockSyntax(
    name="mistral-json", opener="[TOOL_CALLS]", openers=("[TOOL_CALLS]",),
    detect=lambda src: "[TOOL_CALLS]" in src, grammar=_mistral_json_grammar, call_id_length=9,
    pattern=_MISTRAL_PATTERN, build=_mistral_build)


def _gpt_oss_grammar(g: _Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    calls = [f'{literal(f.name)} " <|constrain|>json<|message|>" {g.json(f.parameters)}' for f in functions]
    one = f'"<|channel|>commentary to=functions." {_alternatives(g, "call", calls)}'
    return _repeat(one, '"<|call|><|start|>assistant"', parallel)


_CHANNEL = Seq(L("<|channel|>"), Alt(L("commentary"), L("analysis")))
_RECIPIENT = Seq(L("to=functions."), Chars("name", _not("<")))
_CONSTRAINT = Opt(W(), Opt(L("<|constrain|>")), Chars(None, lambda c: c.isalnum() or c in "_-"))

GPT_OSS = BlockSyntax(
    name="gpt-oss", opener="<|channel|>commentary to=functions.", openers=("<|start|>", "<|channel|>"),
    detect=lambda src: "<|channel|>" in src and "<|start|>" in src, grammar=_gpt_oss_grammar,
    pattern=Seq(
        Alt(Seq(L("<|start|>"), L("assistant"), Alt(
            Seq(_CHANNEL, W(), _RECIPIENT),
            Seq(W(), _RECIPIENT, W(), _CHANNEL))),
            Seq(_CHANNEL, W(), _RECIPIENT)),
        _CONSTRAINT, W(), L("<|message|>"), W(), Json("args"), W(), Opt(Alt(L("<|call|>"), L("<|end|>")))),
    build=_named_call)


_DS_CALLS_BEGIN, _DS_CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
_DS_CALL_BEGIN, _DS_CALL_END, _DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def _deepseek_grammar(g: _Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    if variant == "r1":
        calls = [f'"function" {literal(_DS_SEP)} {literal(f.name)} "\\n```json\\n" {g.json(f.parameters)} '
                 '"\\n```"' for f in functions]
    else:
        calls = [f"{literal(f.name)} {literal(_DS_SEP)} {g.json(f.parameters)}" for f in functions]
    one = f"{literal(_DS_CALL_BEGIN)} {_alternatives(g, 'call', calls)} {literal(_DS_CALL_END)}"
    return f"{literal(_DS_CALLS_BEGIN)} {_repeat(one, NL_OPT, parallel)} {literal(_DS_CALLS_END)}"


def _deepseek(name: str, variant: str, detect: Callable[[str], bool]) -> BlockSyntax:
    """DeepSeek R1 (`function<sep>NAME` and the arguments in a ```json block) and V3.1
    (`NAME<sep>ARGS`); each reads both."""
    return BlockSyntax(
        name=name, opener=_DS_CALLS_BEGIN, openers=(_DS_CALLS_BEGIN, _DS_CALL_BEGIN), detect=detect,
        grammar=_deepseek_grammar, variant=variant,
        pattern=Seq(
            Opt(L(_DS_CALLS_BEGIN), W()), L(_DS_CALL_BEGIN), Alt(
                Seq(Opt(L("function")), L(_DS_SEP), Chars("name", _not("<`"))),
                Seq(Chars("name", _not("<`")), W(), L(_DS_SEP))),
            W(), Opt(L("```"), Opt(L("json"))), W(), Json("args"), W(), Opt(L("```")), W(),
            Opt(L(_DS_CALL_END)), W(), Opt(L(_DS_CALLS_END))),
        build=_named_call)


DEEPSEEK_R1 = _deepseek("deepseek-r1", "r1", lambda src: "tool▁sep" in src and "```json" in src)
DEEPSEEK_V31 = _deepseek("deepseek-v3.1", "v3.1", lambda src: "tool▁sep" in src)


def _dsml_grammar(g: _Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    block = variant or "tool_calls"

    def param(key: str | None, schema: Any) -> str:
        name = _KEY if key is None else literal(key)
        head = f'"<｜DSML｜parameter name=\\"" {name} "\\" string=\\""'
        close = '"</｜DSML｜parameter>" "\\n"?'
        kind, value = _value(g, key, schema, "</｜DSML｜parameter>")
        string = '"false\\">"' if kind == "json" else '"true\\">"'
        return f"{head} {string} {value} {close}"

    calls = [f'"<｜DSML｜invoke name=\\"" {literal(f.name)} "\\">" "\\n"? {_params(f, param)} "\\n"? '
             '"</｜DSML｜invoke>"' for f in functions]
    invokes = _repeat(_alternatives(g, "call", calls), '"\\n"?', parallel)
    return f'{literal(f"<｜DSML｜{block}>")} "\\n"? {invokes} "\\n"? {literal(f"</｜DSML｜{block}>")}'


_DSML_BLOCKS = (L("<｜DSML｜function_calls>"), L("<｜DSML｜tool_calls>"))
_DSML_CLOSE = (L("</｜DSML｜function_calls>"), L("</｜DSML｜tool_calls>"))

DSML = XmlSyntax(
    name="deepseek-dsml", opener="<｜DSML｜tool_calls>",
    openers=("<｜DSML｜function_calls>", "<｜DSML｜tool_calls>", "<｜DSML｜invoke name="),
    detect=lambda src: "dsml_token" in src or "｜DSML｜" in src, grammar=_dsml_grammar,
    adapt=lambda src: "tool_calls" if "function_calls" not in src else "function_calls",
    header=Seq(Opt(Alt(*_DSML_BLOCKS), W()), L('<｜DSML｜invoke name="'), Chars("name", _not('"<')), L('">')),
    param=Seq(L('<｜DSML｜parameter name="'), Chars("key", _not('"<')), L('"'),
              Opt(W(), L('string="'), Chars("type", _not('"<')), L('"')), W(), L(">")),
    value_ends=("</｜DSML｜parameter>", "</｜DSML｜invoke>"),
    close=Seq(L("</｜DSML｜invoke>"), W(), Opt(Alt(*_DSML_CLOSE))))


def _glm_grammar(g: _Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    param = _xml_param(g, "<arg_key>", f'"</arg_key>" {NL_OPT} "<arg_value>"', "</arg_value>", after=NL_OPT)
    calls = [f'"<tool_call>" {literal(f.name)} {NL_OPT} {_params(f, param)} "</tool_call>"' for f in functions]
    return _repeat(_alternatives(g, "call", calls), NL_OPT, parallel)


GLM = XmlSyntax(
    name="glm", opener="<tool_call>", openers=("<tool_call>",), detect=lambda src: "<arg_key>" in src,
    grammar=_glm_grammar,
    header=Seq(L("<tool_call>"), W(), Chars("name", _not("<"))),
    param=Seq(L("<arg_key>"), Chars("key", _not("<", space=False)), L("</arg_key>"), W(), L("<arg_value>")),
    value_ends=("</arg_value>", "<arg_key>", "</tool_call>"),
    close=L("</tool_call>"))


_HY = ":opensource"


def _hy3_grammar(g: _Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    param = _xml_param(g, f"<arg_key{_HY}>", f'{literal(f"</arg_key{_HY}>")} {NL} {literal(f"<arg_value{_HY}>")}',
                       f"</arg_value{_HY}>", after=NL)
    calls = [f'{literal(f"<tool_call{_HY}>")} {literal(f.name)} {literal(f"<tool_sep{_HY}>")} {NL} '
             f'{_params(f, param)} {literal(f"</tool_call{_HY}>")}' for f in functions]
    body = _repeat(_alternatives(g, "call", calls), NL, parallel)
    return f'{literal(f"<tool_calls{_HY}>")} {NL} {body} {NL} {literal(f"</tool_calls{_HY}>")}'


HY3 = XmlSyntax(
    name="hy3", opener=f"<tool_calls{_HY}>", openers=(f"<tool_calls{_HY}>", f"<tool_call{_HY}>"),
    detect=lambda src: "toolsep_token" in src or f"<tool_sep{_HY}>" in src, grammar=_hy3_grammar,
    header=Seq(Opt(L(f"<tool_calls{_HY}>"), W()), L(f"<tool_call{_HY}>"), W(), Chars("name", _not("<")), W(),
               L(f"<tool_sep{_HY}>")),
    param=Seq(L(f"<arg_key{_HY}>"), Chars("key", _not("<", space=False)), L(f"</arg_key{_HY}>"), W(),
              L(f"<arg_value{_HY}>")),
    value_ends=(f"</arg_value{_HY}>", f"<arg_key{_HY}>", f"</tool_call{_HY}>"),
    close=Seq(L(f"</tool_call{_HY}>"), W(), Opt(L(f"</tool_calls{_HY}>"))))


_KIMI_SECTION_BEGIN, _KIMI_SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
_KIMI_CALL_BEGIN, _KIMI_ARGS, _KIMI_CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"


def _kimi_k2_grammar(g: _Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    calls = [f'{literal(_KIMI_CALL_BEGIN)} "functions." {literal(f.name)} ":" [0-9]+ {literal(_KIMI_ARGS)} '
             f'{g.json(f.parameters)} {literal(_KIMI_CALL_END)}' for f in functions]
    body = _repeat(_alternatives(g, "call", calls), '"\\n"?', parallel)
    return f"{literal(_KIMI_SECTION_BEGIN)} {body} {literal(_KIMI_SECTION_END)}"


KIMI_K2 = BlockSyntax(
    name="kimi-k2", opener=_KIMI_SECTION_BEGIN, openers=(_KIMI_SECTION_BEGIN, _KIMI_CALL_BEGIN),
    detect=lambda src: _KIMI_SECTION_BEGIN in src, grammar=_kimi_k2_grammar,
    pattern=Seq(Opt(L(_KIMI_SECTION_BEGIN), W()), L(_KIMI_CALL_BEGIN), W(),
                Span("id", Seq(Opt(L("functions.")), Chars("name", _not(":<")), Opt(L(":"), Chars(None, str.isdigit)))),
                W(), L(_KIMI_ARGS), W(), Json("args"), W(), Opt(L(_KIMI_CALL_END)), W(), Opt(L(_KIMI_SECTION_END))),
    build=_named_call)


def _kimi_k3_grammar(g: _Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    def param(key: str | None, schema: Any) -> str:
        name = _KEY if key is None else literal(key)
        head = f'"<|open|>argument key=\\"" {name} "\\" type=\\""'
        close = '"<|close|>argument<|sep|>"'
        kind, value = _value(g, key, schema, "<|close|>argument<|sep|>")
        if kind != "json":
            return f'{head} "string\\"<|sep|>" {value} {close}'
        types = _types(schema) - {"integer"} | ({"number"} if "integer" in _types(schema) else set())
        type_name = literal(next(iter(types))) if len(types) == 1 else "[a-z]+"
        return f'{head} {type_name} "\\"<|sep|>" {value} {close}'

    calls = [f'"<|open|>call tool=\\"" {literal(f.name)} "\\" index=\\"" [0-9]+ "\\"<|sep|>" {_params(f, param)} '
             '"<|close|>call<|sep|>"' for f in functions]
    body = _repeat(_alternatives(g, "call", calls), '""', parallel)
    return f'"<|open|>tools<|sep|>" {body} "<|close|>tools<|sep|>"'


KIMI_K3 = XmlSyntax(
    name="kimi-k3", opener="<|open|>tools<|sep|>", openers=("<|open|>tools<|sep|>", '<|open|>call tool="'),
    detect=lambda src: "<|open|>" in src and "open_tag('call'" in src, grammar=_kimi_k3_grammar,
    header=Seq(Opt(L("<|open|>tools<|sep|>"), W()), L('<|open|>call tool="'), Chars("name", _not('"<')), L('"'),
               Chars(None, _not("<", space=False), low=0), L("<|sep|>")),
    param=Seq(L('<|open|>argument key="'), Chars("key", _not('"<')), L('"'),
              Opt(W(), L('type="'), Chars("type", _not('"<')), L('"')), Chars(None, _not("<", space=False), low=0),
              L("<|sep|>")),
    value_ends=("<|close|>argument<|sep|>", "<|close|>call<|sep|>"),
    close=Seq(L("<|close|>call<|sep|>"), W(), Opt(L("<|close|>tools<|sep|>"))))


def _invoke_grammar(section: tuple[str, str], invoke: tuple[str, str], parameter: tuple[str, str],
                    channel: bool = False) -> GrammarFn:
    """`SECTION <invoke name="NAME"> <parameter name="KEY">VALUE</parameter> </invoke> /SECTION` (MiniMax-M2
    and Muse Glimmer's ATEM, whose tool message may first name its recipient: ` to=NAME<|message|>`)."""
    def grammar(g: _Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
        param = _xml_param(g, parameter[0], literal('">'), parameter[1], after=NL_OPT)
        calls = [f'{literal(invoke[0])} {literal(f.name)} {literal(chr(34) + ">")} {NL_OPT} {_params(f, param)} '
                 f"{literal(invoke[1])}" for f in functions]
        body = _repeat(_alternatives(g, "call", calls), NL_OPT, parallel)
        block = f"{literal(section[0])} {NL_OPT} {body} {NL_OPT} {literal(section[1])}"
        if channel:
            recipients = " | ".join(literal(f.name) for f in functions)
            return f'( " to=" ( {recipients} ) "<|message|>" )? {block}'
        return block
    return grammar


def _invoke_syntax(name: str, section: tuple[str, str], prefix: str, detect: Callable[[str], bool],
                   channel: bool = False) -> XmlSyntax:
    invoke, parameter = f'<{prefix}invoke name="', f'<{prefix}parameter name="'
    head: Pattern = Opt(L(section[0]), W())
    if channel:  # Muse Glimmer: the tool message's header comes along (`<|start|>assistant to=NAME<|message|>`)
        head = Seq(Opt(L("<|start|>"), Chars(None, _not("<", space=False), low=0), L("<|message|>"), W()), head)
    tail: Pattern = L(section[1])
    if channel:
        tail = Seq(tail, Opt(Alt(L("<|eom|>"), L("<|eot|>"), L("<|end|>"))))
    return XmlSyntax(
        name=name, opener=section[0], openers=(section[0], invoke, *(("<|start|>",) if channel else ())),
        detect=detect, grammar=_invoke_grammar(section, (invoke, f"</{prefix}invoke>"),
                                               (parameter, f"</{prefix}parameter>"), channel),
        header=Seq(head, L(invoke), Chars("name", _not('"<')), L('">')),
        param=Seq(L(parameter), Chars("key", _not('"<')), L('">')),
        value_ends=(f"</{prefix}parameter>", parameter, f"</{prefix}invoke>"),
        close=Seq(L(f"</{prefix}invoke>"), W(), Opt(tail)))


MINIMAX_M2 = _invoke_syntax("minimax-m2", ("<minimax:tool_call>", "</minimax:tool_call>"), "",
                            lambda src: "<minimax:tool_call>" in src)
MUSE = _invoke_syntax("muse-glimmer", ("<atem:function_calls>", "</atem:function_calls>"), "atem:",
                      lambda src: "<atem:function_calls>" in src, channel=True)


def _minicpm5_grammar(g: _Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    param = _xml_param(g, '<param name="', literal('">'), "</param>")
    calls = [f'{literal("<function name=" + chr(34))} {literal(f.name)} {literal(chr(34) + ">")} {_params(f, param)} '
             '"</function>"' for f in functions]
    return _repeat(_alternatives(g, "call", calls), NL_OPT, parallel)


MINICPM5 = XmlSyntax(
    name="minicpm5", opener='<function name="', openers=('<function name="',),
    detect=lambda src: '<function name="' in src and '<param name="' in src, grammar=_minicpm5_grammar,
    header=Seq(L('<function name="'), Chars("name", _not('"<')), L('">')),
    param=Seq(L('<param name="'), Chars("key", _not('"<')), L('">')),
    value_ends=("</param>", "</function>"),
    close=L("</function>"))


def _functionary_v31_grammar(g: _Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    calls = [f'"<function=" {literal(f.name)} ">" {g.json(f.parameters)} "</function>"' for f in functions]
    return _repeat(_alternatives(g, "call", calls), '""', parallel)


def _functionary_v31_build(caps: Caps, names: frozenset[str]) -> list[Call] | None:
    return _python_tag(caps, names) if "body" in caps else _named_call(caps, names)


FUNCTIONARY_V31 = BlockSyntax(
    name="functionary-v3.1", opener="<function=", openers=("<function=", "<|python_tag|>"),
    detect=lambda src: "'<function=' + tool_call" in src or "start_tag => `<function`" in src,
    grammar=_functionary_v31_grammar,
    pattern=Alt(Seq(L("<function="), Chars("name", _not(">")), L(">"), W(), Json("args"), W(),
                    Closer("</function>")), _PYTHON_TAG),
    build=_functionary_v31_build)


def _functionary_v32_grammar(g: _Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    calls = [f'{literal(f.name)} "\\n" {g.json(f.parameters)}' for f in functions]
    call = _alternatives(g, "call", calls)
    return f'">>>"? {_repeat(call, literal(">>>"), parallel)}'


_RECIPIENT_V32 = Alt(Seq(L("all"), L("\n")),
                     Seq(Chars("name", _name_char), L("\n"), W(), Json("args")))


def _functionary_v32_build(caps: Caps, names: frozenset[str]) -> list[Call] | None:
    return _named_call(caps, names) if "name" in caps else []


FUNCTIONARY_V32 = BlockSyntax(
    name="functionary-v3.2", opener=">>>", openers=(">>>",), detect=lambda src: ">>>all" in src,
    grammar=_functionary_v32_grammar,
    at_start=_RECIPIENT_V32,  # the prompt ends with ">>>": the output starts with a recipient
    pattern=Seq(L(">>>"), _RECIPIENT_V32), build=_functionary_v32_build)


def _cohere_grammar(opening: str, closing: str, call_id: bool) -> GrammarFn:
    def grammar(g: _Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
        extra = [("tool_call_id", '"\\"" [0-9]+ "\\""')] if call_id else []
        calls = [_object_call(g, f, "tool_name", "parameters", extra) for f in functions]
        body = _repeat(_alternatives(g, "call", calls), '"," ws', parallel)
        return f'{opening} ws "[" ws {body} ws "]" ws {closing}'
    return grammar


_COHERE_CALLS = _json_calls(name_keys=("tool_name", "name"), args_keys=("parameters", "arguments"),
                            ignored=("tool_call_id", "type", "id"))

COHERE = BlockSyntax(
    name="cohere-action", opener="<|START_ACTION|>", openers=("<|START_ACTION|>",),
    detect=lambda src: "<|START_ACTION|>" in src,
    grammar=_cohere_grammar('"<|START_ACTION|>"', '"<|END_ACTION|>"', call_id=True),
    pattern=Seq(L("<|START_ACTION|>"), W(), Json("json"), W(), Opt(L("<|END_ACTION|>"))), build=_COHERE_CALLS)

COMMAND_R = BlockSyntax(
    name="command-r", opener="Action:", openers=("Action:",),
    detect=lambda src: "Action:" in src and "tool_name" in src,
    grammar=_cohere_grammar('"Action:" ws "```json"', '"```"', call_id=False),
    pattern=Seq(L("Action:"), W(), Opt(L("```"), Opt(L("json"))), W(), Json("json"), W(), Opt(L("```"))),
    build=_COHERE_CALLS)


def _json_list_grammar(opening: str, closing: str, name_as_key: bool = False) -> GrammarFn:
    """`OPENING[{"name": ..., "arguments": ...}, ...]CLOSING` (one object per line without brackets for
    MiniMax-M1, whose opening ends with a newline)."""
    def grammar(g: _Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
        if name_as_key:
            calls = [_json_object([(f.name, g.json(f.parameters))]) for f in functions]
        else:
            calls = [_object_call(g, f) for f in functions]
        call = _alternatives(g, "call", calls)
        if opening.endswith("\n"):
            return f"{literal(opening)} {_repeat(call, NL, parallel)} {NL} {literal(closing)}"
        return f'{literal(opening)} "[" ws {_repeat(call, COMMA_WS, parallel)} ws "]" {literal(closing)}'
    return grammar


def _json_block(name: str, opening: str, closing: str | None, detect: Callable[[str], bool], *,
                grammar_opening: str | None = None, **options: Any) -> BlockSyntax:
    """`OPENING` then calls as JSON (arrays or objects), then `CLOSING` (optional at the end)."""
    tail: list[Pattern] = [W(), Opt(L(closing))] if closing else []
    return BlockSyntax(
        name=name, opener=grammar_opening or opening, openers=(opening,), detect=detect,
        grammar=_json_list_grammar(grammar_opening or opening, closing or "", options.get("name_as_key", False)),
        pattern=Seq(L(opening), W(), Json("json", many=closing is not None), *tail),
        build=_json_calls(**options))


GRANITE = _json_block("granite", "<|tool_call|>", None, lambda src: "<|tool_call|>" in src)
APRIEL = _json_block("apriel", "<tool_calls>", "</tool_calls>", lambda src: "<tool_calls>[" in src)
MINIMAX_M1 = _json_block("minimax-m1", "<tool_calls>", "</tool_calls>",
                         lambda src: "<tool_calls>" in src and "<beginning_of_sentence>" in src,
                         grammar_opening="<tool_calls>\n")
NEMOTRON = _json_block("nemotron", "<TOOLCALL>", "</TOOLCALL>", lambda src: "<TOOLCALL>" in src)
FIREFUNCTION = _json_block("firefunction-v2", "functools", None, lambda src: "functools[" in src)
APERTUS = _json_block("apertus", "<|tools_prefix|>", "<|tools_suffix|>", lambda src: "<|tools_prefix|>" in src,
                      name_as_key=True)


def _gigachat_grammar(g: _Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    call = _alternatives(g, "call", [_object_call(g, f) for f in functions])
    return f'"<|message_sep|>\\n\\nfunction call<|role_sep|>\\n" {call}'


GIGACHAT = BlockSyntax(
    name="gigachat3", opener="<|message_sep|>\n\nfunction call<|role_sep|>\n",
    openers=("<|message_sep|>", "function call<|role_sep|>"),
    detect=lambda src: "<|role_sep|>" in src and "function call" in src, grammar=_gigachat_grammar,
    pattern=Seq(Opt(L("<|message_sep|>"), W()), L("function call"), W(), L("<|role_sep|>"), W(), Json("json")),
    build=_json_calls())


def _solar_grammar(g: _Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    calls = [f'"<|tool_call:begin|>" [a-zA-Z0-9_-]+ "<|tool_call:name|>" {literal(f.name)} "<|tool_call:args|>" '
             f'{g.json(f.parameters)} "<|tool_call:end|>"' for f in functions]
    return f'"<|tool_calls|>" {_repeat(_alternatives(g, "call", calls), NOTHING, parallel)}'


SOLAR = BlockSyntax(
    name="solar-open", opener="<|tool_calls|>", openers=("<|tool_calls|>", "<|tool_call:begin|>"),
    detect=lambda src: "<|tool_call:begin|>" in src, grammar=_solar_grammar,
    pattern=Seq(Opt(L("<|tool_calls|>"), W()), L("<|tool_call:begin|>"), W(), Chars("id", _not("<"), low=0),
                L("<|tool_call:name|>"), Chars("name", _not("<")), L("<|tool_call:args|>"), W(), Json("args"), W(),
                Opt(L("<|tool_call:end|>"))),
    build=_named_call)


def _gemma_value(g: _Grammar, schema: Any) -> str:
    """A Gemma 4 argument value: strings in `<|"|>` quotes, scalars as JSON, containers free-form."""
    quote = literal('<|"|>')
    if _is_text(schema):
        return f"{quote} {g.text('<|')} {quote}"
    enum = _string_enum(schema)
    if enum is not None:
        return "( " + " | ".join(f"{quote} {literal(v)} {quote}" for v in enum) + " )"
    if _types(schema) & {"object", "array"} or not _types(schema):
        string = g.rule("gemma-string", f"{quote} {g.text('<|')} {quote}")
        number = g.rule("gemma-number", '"-"? [0-9]+ ("." [0-9]+)? ([eE] [-+]? [0-9]+)?')
        g.rules.setdefault("gemma-value", f'{string} | gemma-dict | gemma-list | {number} | "true" | "false" | "null"')
        g.rules.setdefault("gemma-dict", '"{" ( [a-zA-Z0-9_]+ ":" gemma-value ( "," [a-zA-Z0-9_]+ ":" gemma-value )* )? "}"')
        g.rules.setdefault("gemma-list", '"[" ( gemma-value ( "," gemma-value )* )? "]"')
        return "gemma-value"
    return g.json(schema)


def _joined(g: _Grammar, items: list[tuple[str, bool]], separator: str) -> str:
    """Items in this order, the required ones always, joined by `separator` (a chain of rules: after
    the first item written, each later one is preceded by the separator)."""
    rest = first = NOTHING
    for item, required in reversed(items):
        if required:
            rest, first = g.rule("rest", f"{separator} {item} {rest}"), g.rule("first", f"{item} {rest}")
        else:
            rest, first = (g.rule("rest", f"( {separator} {item} )? {rest}"),
                           g.rule("first", f"( {item} {rest} ) | {first}"))
    return first


def _keyword_arguments(g: _Grammar, f: Function, value: Callable[[Any], str], equals: str, separator: str,
                       *, sort: bool = False) -> str:
    """`key=value, key=value` (LFM2) or `key:value,key:value` (Gemma 4), by the schema's properties."""
    properties = f.parameters.get("properties")
    if not isinstance(properties, dict):
        any_value = value(True)
        return f"( {_KEY} {equals} {any_value} ( {separator} {_KEY} {equals} {any_value} )* )?"
    required = f.parameters.get("required")
    required = set(required) if isinstance(required, list) else set()
    keys = sorted(properties) if sort else list(properties)
    items = [(g.rule("kv", f"{literal(k)} {equals} {value(_with_defs(properties[k], f.parameters))}"), k in required)
             for k in keys]
    return _joined(g, items, separator)


def _gemma4_grammar(g: _Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    # the template writes the arguments sorted by key
    calls = []
    for f in functions:
        arguments = _keyword_arguments(g, f, lambda s: _gemma_value(g, s), literal(":"), literal(","), sort=True)
        calls.append(f'{literal(f.name)} "{{" {arguments} "}}"')
    one = f'"<|tool_call>call:" {_alternatives(g, "call", calls)} "<tool_call|>"'
    return _repeat(one, NOTHING, parallel)


GEMMA4 = BlockSyntax(
    name="gemma-4", opener="<|tool_call>", openers=("<|tool_call>",), detect=lambda src: "<|tool_call>call:" in src,
    grammar=_gemma4_grammar,
    pattern=Seq(L("<|tool_call>"), W(), L("call:"), Chars("name", _not("{<")), Until("body", ("<tool_call|>",)),
                Opt(L("<tool_call|>"))),
    build=_gemma_call)


def _lfm2_grammar(g: _Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    # JSON values are Python literals too (strings, numbers, lists); LFM2 reads true/false/null as well
    calls = [f'{literal(f.name)} "(" {_keyword_arguments(g, f, g.json, literal("="), literal(", "))} ")"'
             for f in functions]
    call = _alternatives(g, "call", calls)
    return f'"<|tool_call_start|>[" {_repeat(call, literal(", "), parallel)} "]<|tool_call_end|>"'


LFM2 = BlockSyntax(
    name="lfm2", opener="<|tool_call_start|>", openers=("<|tool_call_start|>",),
    detect=lambda src: "<|tool_call_start|>" in src or "<|tool_list_start|>" in src, grammar=_lfm2_grammar,
    pattern=Seq(L("<|tool_call_start|>"), Until("body", ("<|tool_call_end|>",)), Opt(L("<|tool_call_end|>"))),
    build=_lfm2_calls)


REGISTRY: tuple[ToolSyntax, ...] = (
    GPT_OSS, MUSE, KIMI_K3, KIMI_K2, DSML, DEEPSEEK_R1, DEEPSEEK_V31, FUNCTIONARY_V32, FUNCTIONARY_V31,
    SEED_OSS, MINIMAX_M2, MINICPM5, QWEN3_CODER, HY3, GLM, SOLAR, GEMMA4, LFM2, MISTRAL, MISTRAL_JSON,
    COHERE, COMMAND_R, GRANITE, APERTUS, NEMOTRON, MINIMAX_M1, APRIEL, FIREFUNCTION, GIGACHAT, LLAMA3, HERMES,
)
"""In the order they are tried: more specific markup before markup it contains."""


def tool_syntax_for(template_source: str) -> ToolSyntax:
    """The tool-call syntax of the model whose chat template this is; `HERMES` when none is recognised."""
    syntax = next((s for s in REGISTRY if s.detect(template_source)), HERMES)
    return syntax.for_template(template_source)


def tool_syntax_named(name: str) -> ToolSyntax:
    """The registry entry called `name` (KeyError if there is none)."""
    for syntax in REGISTRY:
        if syntax.name == name:
            return syntax
    raise KeyError(name)
