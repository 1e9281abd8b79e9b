"""Hermes, and every template no other syntax recognises: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`."""

from __future__ import annotations

from templates.tool_calls.calls import json_calls
from templates.tool_calls.grammar import (
    Function,
    Grammar,
    alternatives,
    object_call,
    repeat,
)
from templates.tool_calls.patterns import Closer, Json, L, Seq, W
from templates.tool_calls.syntax import BlockSyntax


def _hermes_grammar(g: Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    call = alternatives(g, "call", [object_call(g, f) for f in functions])
    one = f'"<tool_call>" "\\n"? {call} "\\n"? "</tool_call>"'
    return repeat(one, '"\\n"*', parallel)


HERMES = BlockSyntax(
    name="hermes", opener="<tool_call>", openers=("<tool_call>",), detect=lambda src: "<tool_call>" in src,
    grammar=_hermes_grammar,
    pattern=Seq(L("<tool_call>"), W(), Json("json", many=True), W(), Closer("</tool_call>")),
    build=json_calls())
