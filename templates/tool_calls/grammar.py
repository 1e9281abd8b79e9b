"""Grammars for tool calls, and the GBNF pieces the syntaxes share.

`call_grammar` writes the syntax's own markup around each tool's arguments: JSON arguments are
`grammars.json_schema.convert_schema` grammars embedded with prefixed rule names
(`grammars.embed`); key/value syntaxes take each property's value as raw text for strings (text
without the closing tag's first two characters), literal alternatives for string enums, and JSON
by the property's schema otherwise, the required properties always and in the schema's order.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from grammars.embed import embed
from grammars.gbnf import char_class, literal
from grammars.json_schema import convert_schema


@dataclass(frozen=True)
class Function:
    name: str
    parameters: dict[str, Any]


def tool_functions(tools: Sequence[dict[str, Any]]) -> list[Function]:
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


class Grammar:
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
        """A rule for the JSON texts valid under `schema`: all the grammar can enforce (a strict
        tool's schema is refused before when it has more; else the rest is checked afterwards)."""
        key = json.dumps(schema, sort_keys=True)
        if key not in self._schemas:
            self._count += 1
            grammar = convert_schema(schema, strict=False, unique_items=False).grammar
            rules, self._schemas[key] = embed(grammar, f"s{self._count}-")
            self.embedded.append(rules)
        return self._schemas[key]

    def text(self, close: str) -> str:
        """Raw text up to `close`: anything without `<` followed by the second character of `close`."""
        return self.rule("text", f'( {char_class([(60, 60)], negated=True)} | "<" '
                                 f'{char_class([(ord(close[1]), ord(close[1]))], negated=True)} )*')

    def render(self, root: str) -> str:
        lines = [f"root ::= {root}", *(f"{name} ::= {body}" for name, body in self.rules.items()), *self.embedded]
        return "\n".join(lines) + "\n"


def alternatives(g: Grammar, hint: str, options: list[str]) -> str:
    return options[0] if len(options) == 1 else g.rule(hint, " | ".join(f"( {o} )" for o in options))


def repeat(one: str, sep: str, parallel: bool) -> str:
    return f"{one} ( {sep} {one} )*" if parallel else one


def json_object(fields: Sequence[tuple[str, str]], after: str = "") -> str:
    """`{"key": value, ...}` with the keys in this order (`after`: more before the closing brace)."""
    parts = ['"{"', "ws"]
    for index, (key, value) in enumerate(fields):
        if index:
            parts += ['","', "ws"]
        parts += [literal(json.dumps(key, ensure_ascii=False)), '":"', "ws", value]
    return " ".join([*parts, after, "ws", '"}"'] if after else [*parts, "ws", '"}"'])


def json_string(text: str) -> str:
    return literal(json.dumps(text, ensure_ascii=False))


def object_call(g: Grammar, f: Function, name_key: str = "name", args_key: str = "arguments",
                extra: Sequence[tuple[str, str]] = ()) -> str:
    return json_object([*extra, (name_key, json_string(f.name)), (args_key, g.json(f.parameters))])


def with_defs(schema: Any, root: dict[str, Any]) -> Any:
    """A property's schema, with the root's definitions so that its `$ref`s still resolve."""
    if not isinstance(schema, dict):
        return schema
    defs = {k: root[k] for k in ("$defs", "definitions") if k in root and k not in schema}
    return {**schema, **defs} if defs else schema


def schema_types(schema: Any) -> set[str]:
    if not isinstance(schema, dict):
        return set()
    kind = schema.get("type")
    return {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else set()


def string_enum(schema: Any) -> list[str] | None:
    if isinstance(schema, dict) and ("enum" in schema or "const" in schema):
        values = schema.get("enum", [schema.get("const")])
        if isinstance(values, list) and values and all(isinstance(v, str) for v in values):
            return values
    return None


def is_text(schema: Any) -> bool:
    """Whether a parameter's value is written as raw text (a string-typed parameter)."""
    return "string" in schema_types(schema) and string_enum(schema) is None and "enum" not in schema


ParamFn = Callable[[str | None, Any], str]


def params(f: Function, param: ParamFn, *, sort: bool = False) -> str:
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
        expression = param(key, with_defs(properties[key], schema))
        parts.append(expression if key in required else f"( {expression} )?")
    return " ".join(parts) if parts else '""'


KEY = "[a-zA-Z0-9_.-]+"
NL, NL_OPT, NOTHING, COMMA_WS = '"\\n"', '"\\n"?', '""', '"," ws'


def xml_param(g: Grammar, before: str, middle: str, close: str, *, newlines: bool = False,
              after: str = "") -> ParamFn:
    """`before KEY middle VALUE close after` (`before` and `close` texts, `middle` and `after` GBNF):
    raw text for strings, literal alternatives for string enums, JSON (by the schema) otherwise;
    with `newlines`, an optional newline on each side of the value."""
    nl = NL_OPT if newlines else ""

    def param(key: str | None, schema: Any) -> str:
        name = KEY if key is None else literal(key)
        _, value = param_value(g, key, schema, close, any_as_text=True)
        return " ".join(p for p in (literal(before), name, middle, nl, value, nl, literal(close), after) if p)
    return param


def param_value(g: Grammar, key: str | None, schema: Any, close: str, *, any_as_text: bool = False) -> tuple[str, str]:
    """One parameter's value: ("text", raw text up to `close`) for strings and unknown keys,
    ("enum", the alternatives) for string enums, ("json", JSON by the schema) otherwise."""
    if key is None or is_text(schema) or (any_as_text and schema is True):
        return "text", g.text(close)
    enum = string_enum(schema)
    if enum is not None:
        return "enum", "( " + " | ".join(literal(v) for v in enum) + " )"
    return "json", g.json(schema)


GrammarFn = Callable[[Grammar, list[Function], bool, str], str]


def _joined(g: Grammar, items: list[tuple[str, bool]], separator: str) -> str:
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


def keyword_arguments(g: Grammar, f: Function, value: Callable[[Any], str], equals: str, separator: str,
                      *, sort: bool = False) -> str:
    """`key=value, key=value` (LFM2) or `key:value,key:value` (Gemma 4), by the schema's properties."""
    properties = f.parameters.get("properties")
    if not isinstance(properties, dict):
        any_value = value(True)
        return f"( {KEY} {equals} {any_value} ( {separator} {KEY} {equals} {any_value} )* )?"
    required = f.parameters.get("required")
    required = set(required) if isinstance(required, list) else set()
    keys = sorted(properties) if sort else list(properties)
    items = [(g.rule("kv", f"{literal(k)} {equals} {value(with_defs(properties[k], f.parameters))}"), k in required)
             for k in keys]
    return _joined(g, items, separator)
