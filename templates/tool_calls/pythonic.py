"""Python call syntax between tags, one call per line: OLMo 3's
`<function_calls>\nget_weather(city='Paris')\nget_time()\n</function_calls>`."""

from __future__ import annotations

from grammars.gbnf import literal
from templates.tool_calls.calls import Call, cut_in, cut_pythonic_calls, pythonic_calls
from templates.tool_calls.grammar import (
    Function,
    Grammar,
    alternatives,
    keyword_arguments,
    repeat,
)
from templates.tool_calls.patterns import Caps, L, Opt, Seq, Until
from templates.tool_calls.syntax import BlockSyntax

_OPEN, _CLOSE = "<function_calls>", "</function_calls>"


def _olmo3_grammar(g: Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    # JSON values are Python literals too (strings, numbers, lists)
    calls = [f'{literal(f.name)} "(" {keyword_arguments(g, f, g.json, literal("="), literal(", "))} ")"'
             for f in functions]
    call = alternatives(g, "call", calls)
    return f'"{_OPEN}\\n" {repeat(call, literal(chr(10)), parallel)} "\\n{_CLOSE}"'


def _lines(body: str) -> list[str]:
    return [line.strip() for line in body.splitlines() if line.strip()]


def _line_calls(caps: Caps, names: frozenset[str]) -> list[Call] | None:
    if "_cut" in caps and "body" not in caps:  # cut short: the calls so far (see `calls`)
        lines = _lines(cut_in(caps, "body") or "")
        return cut_pythonic_calls(f"[{', '.join(lines)}", names) if lines else []
    lines = _lines(caps["body"])
    return pythonic_calls(f"[{', '.join(lines)}]", names) if lines else None


OLMO3 = BlockSyntax(
    name="olmo-3", opener=_OPEN, openers=(_OPEN,), detect=lambda src: _OPEN in src and "pythonic" in src,
    grammar=_olmo3_grammar, pattern=Seq(L(_OPEN), Until("body", (_CLOSE,)), Opt(L(_CLOSE))), build=_line_calls)
