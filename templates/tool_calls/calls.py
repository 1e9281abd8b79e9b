"""Reading calls: the text a pattern captured, turned into (name, arguments, id) calls."""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from templates.tool_calls.patterns import Alt, Caps, L, Opt, Seq, Until
from templates.tool_calls.strict_json import load_json

Call = tuple[str, dict[str, Any], "str | None"]


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
        items = _flatten(caps[key])
        calls = [_call_object(item, names, **options) for item in items]
        if not calls or any(call is None for call in calls):
            return None
        return calls  # type: ignore[return-value]
    return build


def named_call(caps: Caps, names: frozenset[str]) -> list[Call] | None:
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
