"""Reading calls: the text a pattern captured, turned into (name, arguments, id) calls.

Each `build` also reads a text cut short (`caps` holds "_cut", see `patterns`): it returns the calls
written whole, then the call being written when the output ended, its arguments as text: those
written so far (JSON syntaxes: the text as the model wrote it, which need not be whole; other
syntaxes: converted to JSON as far as it reads, the last value as written, as the XML syntaxes do).
A cut before the call's name is complete gives no call ([]: its markup is dropped), provided the
name written so far may still become a tool's; what can no longer become a call is None (content).
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from templates.reasoning_parser import partial_marker_length
from templates.tool_calls.patterns import MORE, Alt, Caps, L, Opt, Seq, Until, json_end
from templates.tool_calls.strict_json import dump_json, load_json

Call = tuple[str, "dict[str, Any] | str", "str | None"]
"""(name, arguments, id): arguments as text for a call cut short (what was written of them)."""


def _flatten(values: Any) -> list[Any]:
    items = values if isinstance(values, list) else [values]
    out: list[Any] = []
    for item in items:
        out.extend(item if isinstance(item, list) else [item])
    return out


def _arguments_object(value: Any) -> dict[str, Any] | None:
    if isinstance(value, str):  # arguments written as a JSON string
        try:
            value = load_json(value) if value.strip() else {}
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


def json_calls(key: str = "json", **options: Any) -> Callable[[Caps, frozenset[str]], list[Call] | None]:
    """Calls written as JSON objects (alone, in arrays, or in a sequence); all must be calls."""
    def build(caps: Caps, names: frozenset[str]) -> list[Call] | None:
        if "_cut" in caps and key not in caps:
            written = cut_in(caps, key)
            return [] if written is None else _cut_json_calls(written, names, **options)
        items = _flatten(caps[key])
        calls = [_call_object(item, names, **options) for item in items]
        if not calls or any(call is None for call in calls):
            return None
        return calls  # type: ignore[return-value]
    return build


def named_call(caps: Caps, names: frozenset[str]) -> list[Call] | None:
    """A call whose name (and id) the markup carries, its arguments a JSON object."""
    if "_cut" in caps and "args" not in caps:
        return cut_named_call(caps, names, "args", _cut_arguments)
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


def pythonic_calls(text: str, names: frozenset[str]) -> list[Call] | None:
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


def python_tag(caps: Caps, names: frozenset[str]) -> list[Call] | None:
    """After `<|python_tag|>`: a JSON call, a built-in tool call, or code for the python tool."""
    if "_cut" in caps and "body" not in caps:
        written = (cut_in(caps, "body") or "").strip()
        if not written:
            return []
        return _cut_json_calls(written, names) if written.startswith("{") else cut_pythonic_calls(written, names)
    body = caps["body"].strip()
    if body.startswith("{"):
        try:
            call = _call_object(load_json(body), names)
        except (ValueError, RecursionError):
            call = None
        if call is not None:
            return [call]
    calls = pythonic_calls(body, names)
    if calls is not None:
        return calls
    tool = next((t for t in ("python", "code_interpreter", "ipython") if t in names), None)
    return [(tool, {"code": body}, None)] if tool and body else None


PYTHON_TAG = Seq(L("<|python_tag|>"), Until("body", ("<|eom_id|>", "<|eot_id|>")),
                 Opt(Alt(L("<|eom_id|>"), L("<|eot_id|>"))))


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
        return load_json(token)

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


def gemma_call(caps: Caps, names: frozenset[str]) -> list[Call] | None:
    if "_cut" in caps and "body" not in caps:
        return cut_named_call(caps, names, "body", _cut_gemma_arguments)
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


def lfm2_calls(caps: Caps, names: frozenset[str]) -> list[Call] | None:
    if "_cut" in caps and "body" not in caps:
        written = cut_in(caps, "body") or ""
        return cut_pythonic_calls(written, names) if written.strip() else []
    return pythonic_calls(caps["body"], names)


def xml_value(raw: str, caps: Caps) -> Any:
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
            value = load_json(stripped)
        except (ValueError, RecursionError):
            return text
        if not isinstance(value, str):
            return value
    return text


# ---- calls cut short ------------------------------------------------------------------------------


def cut_in(caps: Caps, key: str) -> str | None:
    """What was written of the capture `key` when the output ended inside it (else None)."""
    cut = caps.get("_cut")
    return cut[1] if cut is not None and cut[0] == key else None


def could_name(written: str, names: frozenset[str]) -> bool:
    """Whether a name cut short may still become one of `names`."""
    return any(name.startswith(written) for name in names)


def cut_named_call(caps: Caps, names: frozenset[str], key: str,
                   read: Callable[[str], dict[str, Any] | str | None]) -> list[Call] | None:
    """A call whose markup carries its name (`caps["name"]`), cut short: [] before its name is
    complete, else the call with `read` of what was written of its arguments (capture `key`;
    "" when they had not begun), or None where `read` cannot take them."""
    written = cut_in(caps, "name")
    if written is not None:
        return [] if could_name(written, names) else None
    name = caps.get("name")
    if name is None:
        return []
    if name not in names:
        return None
    written = cut_in(caps, key)
    arguments = "" if written is None else read(written)
    return None if arguments is None else [(name, arguments, caps.get("id") or None)]


def _cut_arguments(written: str) -> str | None:
    """JSON arguments cut short, as written: the start of an object (or of a JSON string that
    holds one, decoded), else None."""
    if written.startswith('"'):
        decoded = _partial_string(written)
        if decoded is None:
            return None
        written = decoded
    return written if not written.strip() or written.lstrip().startswith("{") else None


_STRING_BODY = re.compile(r'[^"\\]*')
_SCALAR_RUN = re.compile(r"[-+.\w]*")
_OPEN_ESCAPE = re.compile(r"(\\+)(u[0-9a-fA-F]{0,3})?$")


def _skip_space(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i].isspace():
        i += 1
    return i


def _string_end(text: str, i: int) -> int:
    """The end of the JSON string opening at `i`, MORE if the text ends first."""
    pos, n = i + 1, len(text)
    while True:
        pos = _STRING_BODY.match(text, pos).end()  # type: ignore[union-attr]
        if pos >= n or (text[pos] == "\\" and pos + 1 >= n):
            return MORE
        if text[pos] == "\\":
            pos += 2
            continue
        return pos + 1


def _partial_string(written: str) -> str | None:
    """A JSON string cut short (`written` opens with its quote), decoded as far as it goes."""
    body = written[1:]
    escape = _OPEN_ESCAPE.search(body)
    if escape is not None and len(escape.group(1)) % 2:  # an escape sequence cut short
        body = body[:escape.start(1) + len(escape.group(1)) - 1]
    try:
        value = load_json('"' + body + '"')
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def _value_end(text: str, i: int) -> int | None:
    """The end of the JSON value at `i`: MORE if the text ends inside it (or at a number's or
    literal's last character, which more may follow), None if no value starts there."""
    if text[i] in "{[":
        return json_end(text, i)
    if text[i] == '"':
        return _string_end(text, i)
    end = _SCALAR_RUN.match(text, i).end()  # type: ignore[union-attr]
    if end == i:
        return None
    return MORE if end == len(text) else end


_Pending = tuple[str, ...] | None
"""Where an object cut short ended: None between members, ("key", written) inside a key,
("value", key, written) after a member's key (written: what there is of its value, maybe "")."""


def _partial_members(text: str) -> tuple[dict[str, Any], _Pending] | None:
    """An object cut short (`text` opens it): its members written whole and where it ended; None
    if it is not the start of an object."""
    members: dict[str, Any] = {}
    i, n = 1, len(text)
    try:
        while True:
            i = _skip_space(text, i)
            if i == n:
                return members, None
            if text[i] != '"':
                return None
            end = _string_end(text, i)
            if end == MORE:
                key = _partial_string(text[i:])
                return (members, ("key", key)) if key is not None else None
            key = load_json(text[i:end])
            i = _skip_space(text, end)
            if i < n and text[i] != ":":
                return None
            i = _skip_space(text, i + 1)
            if i >= n:
                return members, ("value", key, "")
            end = _value_end(text, i)
            if end is None:
                return None
            if end == MORE:
                return members, ("value", key, text[i:])
            members[key] = load_json(text[i:end])
            i = _skip_space(text, end)
            if i == n:
                return members, None
            if text[i] != ",":
                return None
            i += 1
    except (ValueError, RecursionError):
        return None


def _partial_elements(text: str) -> tuple[list[Any], str | None] | None:
    """An array of objects cut short (`text` opens it): its elements written whole, and what was
    written of the next one (None between elements); None if it is not such an array."""
    elements: list[Any] = []
    i, n = 1, len(text)
    while True:
        i = _skip_space(text, i)
        if i == n:
            return elements, None
        if text[i] != "{":  # calls are objects; nested arrays are not read cut short
            return None
        end = json_end(text, i)
        if end == MORE:
            return elements, text[i:]
        try:
            elements.append(load_json(text[i:end]))  # type: ignore[misc]
        except (ValueError, RecursionError):
            return None
        i = _skip_space(text, end)  # type: ignore[arg-type]
        if i == n:
            return elements, None
        if text[i] != ",":
            return None
        i += 1


def _cut_json_calls(text: str, names: frozenset[str], **options: Any) -> list[Call] | None:
    """JSON calls (as `json_calls` reads them) cut short: those written whole, then the one being
    written (an object, or the objects of an array, maybe cut in its turn)."""
    values: list[Any] = []
    i, n = _skip_space(text, 0), len(text)
    rest: str | None = None
    while i < n:  # values in a row, as `Json(many=True)` reads them
        if text[i] not in "{[":
            return None
        end = json_end(text, i)
        if end == MORE:
            rest = text[i:]
            break
        try:
            values.append(load_json(text[i:end]))  # type: ignore[misc]
        except (ValueError, RecursionError):
            return None
        i = _skip_space(text, end)  # type: ignore[arg-type]
        if i < n and text[i] in ",;":
            i = _skip_space(text, i + 1)
    items = _flatten(values)
    if rest is not None and rest.startswith("["):
        read = _partial_elements(rest)
        if read is None:
            return None
        elements, rest = read
        items += elements
    whole = [_call_object(item, names, **options) for item in items]
    if any(call is None for call in whole):
        return None
    if rest is None:
        return whole  # type: ignore[return-value]
    last = _cut_call_object(rest, names, **options)
    return None if last is None else [*whole, *last]  # type: ignore[list-item]


def _cut_call_object(text: str, names: frozenset[str], *, name_keys: Sequence[str] = ("name",),
                     args_keys: Sequence[str] = ("arguments", "parameters"), id_key: str | None = None,
                     ignored: Sequence[str] = ("type", "id"), name_as_key: bool = False) -> list[Call] | None:
    """One call object cut short (as `_call_object` reads it whole): [] while its name is not
    complete, [call] (arguments as text, or whole), or None if it cannot be a call."""
    read = _partial_members(text)
    if read is None:
        return None
    members, pending = read
    if pending is not None and pending[0] == "key":
        written_key = pending[1]
        pending = None
    else:
        written_key = None
    if set(members) <= {"type", "id"} and pending is not None and pending[1] == "function":
        inner = pending[2]  # OpenAI's shape: {"type": "function", "function": {"name": ..., ...}}
        if not inner:
            return []
        calls = _cut_call_object(inner, names, name_keys=name_keys, args_keys=args_keys, ignored=ignored) \
            if inner.startswith("{") else None
        if calls and id_key and isinstance(members.get("id"), str) and members["id"]:
            calls = [(calls[0][0], calls[0][1], members["id"])]
        return calls
    if isinstance(members.get("function"), dict) and set(members) <= {"function", "type", "id"}:
        call = _call_object(members, names, name_keys=name_keys, args_keys=args_keys, id_key=id_key,
                            ignored=ignored)
        return None if call is None else [call]
    if name_as_key:  # Apertus: {"get_weather": {...}}
        if members:  # its one member whole: only the markup after it was cut
            whole = pending is None and written_key is None
            call = _call_object(members, names, name_as_key=True) if whole else None
            return None if call is None else [call]
        if pending is None:
            return [] if written_key is None or could_name(written_key, names) else None
        name = pending[1]
        arguments = _cut_arguments(pending[2])
        return None if name not in names or arguments is None else [(name, arguments, None)]
    allowed = {*name_keys, *args_keys, *ignored}
    if set(members) - allowed or (pending is not None and pending[1] not in allowed):
        return None
    name = next((members[k] for k in name_keys if k in members), None)
    if name is None:
        if pending is not None and pending[1] in name_keys and pending[2]:
            written = _partial_string(pending[2]) if pending[2].startswith('"') else None
            return [] if written is not None and could_name(written, names) else None
        return []  # its name is yet to come
    if not isinstance(name, str) or name not in names:
        return None
    call_id = members.get(id_key) if id_key else None
    call_id = call_id if isinstance(call_id, str) and call_id else None
    args_key = next((k for k in args_keys if k in members), None)
    if args_key is not None:  # its arguments are whole: only the markup after them was cut
        arguments = _arguments_object(members[args_key])
        return None if arguments is None else [(name, arguments, call_id)]
    if pending is not None and pending[1] in args_keys:
        written_arguments = _cut_arguments(pending[2])
        return None if written_arguments is None else [(name, written_arguments, call_id)]
    return [(name, "", call_id)]


_PAIRS = {"(": ")", "[": "]", "{": "}"}


def _completions(text: str, quotes: Sequence[str], escapes: bool, limit: int = 32) -> list[tuple[str, str]]:
    """Ways to close a text cut short in a bracketed syntax (Python calls, Gemma's arguments):
    (closed text, closers added), the whole text first, then the text before each of its last
    `limit` commas or after each opening bracket (an item cut short dropped), later ones first."""
    stack: list[str] = []
    quote: str | None = None
    points: list[tuple[int, str]] = []
    i, n = 0, len(text)
    while i < n:
        if quote is not None:
            if escapes and text[i] == "\\":
                i += 2
                continue
            if text.startswith(quote, i):
                i += len(quote)
                quote = None
                continue
            i += 1
            continue
        opening = next((q for q in quotes if text.startswith(q, i)), None)
        if opening is not None:
            quote = opening
            i += len(opening)
            continue
        char = text[i]
        if char == ",":
            points.append((i, "".join(_PAIRS[b] for b in reversed(stack))))
        elif char in _PAIRS:
            stack.append(char)
            points.append((i + 1, "".join(_PAIRS[b] for b in reversed(stack))))
        elif char in ")]}" and stack and _PAIRS[stack[-1]] == char:
            stack.pop()
        i += 1
    end_closers = (quote or "") + "".join(_PAIRS[b] for b in reversed(stack))
    whole = text[:n - 1] if i > n else text  # less an escape's backslash cut short
    if quote is not None:  # less a closing quote cut short (Gemma's `<|"|>`)
        whole = whole[:len(whole) - partial_marker_length(whole, (quote,))]
    return [(whole + end_closers, end_closers)] + [(text[:at] + closers, closers) for at, closers in
                                                   reversed(points[-limit:])]


_NAME_SO_FAR = re.compile(r"[\s,]*\[?\s*([\w.]*)")


def cut_pythonic_calls(text: str, names: frozenset[str]) -> list[Call] | None:
    """Python calls (`pythonic_calls`) cut short: the calls that read once closed, the last one cut
    when it was open; [] while the first name is not complete."""
    first = _NAME_SO_FAR.match(text)
    if first is None or not first.group(1):
        return [] if first is not None and first.end() == len(text) and names else None
    for closed, closers in _completions(text, ('"', "'"), escapes=True):
        calls = pythonic_calls(closed, names)
        if calls is None:
            continue
        dropped = text[len(closed) - len(closers):]
        if ")" in closers:  # the text ended inside the last call: cut short
            *whole, (name, arguments, call_id) = calls
            return [*whole, (name, dump_json(arguments), call_id)]
        rest = _NAME_SO_FAR.fullmatch(dropped)
        if rest is not None and could_name(rest.group(1), names):
            return calls
        return None
    rest = _NAME_SO_FAR.fullmatch(text)
    return [] if rest is not None and could_name(rest.group(1), names) else None


def _cut_gemma_arguments(written: str) -> dict[str, Any] | str | None:
    """Gemma 4's arguments cut short, converted to JSON as far as they read once closed (whole
    when they need no closing: only the markup after them was cut)."""
    if not written.lstrip().startswith("{"):
        return None
    for closed, closers in _completions(written, (_GemmaReader.QUOTE,), escapes=False):
        reader = _GemmaReader(closed)
        try:
            arguments = reader.value()
            reader.skip()
        except (ValueError, RecursionError):
            continue
        if isinstance(arguments, dict) and reader.pos == len(reader.text):
            return dump_json(arguments) if closers or closed != written else arguments
    return None
