"""Solar Open: `<|tool_calls|><|tool_call:begin|>ID<|tool_call:name|>NAME<|tool_call:args|>{...}<|tool_call:end|>`."""

from __future__ import annotations

from grammars.gbnf import literal
from templates.tool_calls.calls import named_call
from templates.tool_calls.grammar import (
    NOTHING,
    Function,
    Grammar,
    alternatives,
    repeat,
)
from templates.tool_calls.patterns import Chars, Json, L, Opt, Seq, W, other_than
from templates.tool_calls.syntax import BlockSyntax


def _solar_grammar(g: Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    calls = [f'"<|tool_call:begin|>" [a-zA-Z0-9_-]+ "<|tool_call:name|>" {literal(f.name)} "<|tool_call:args|>" '
             f'{g.json(f.parameters)} "<|tool_call:end|>"' for f in functions]
    return f'"<|tool_calls|>" {repeat(alternatives(g, "call", calls), NOTHING, parallel)}'


SOLAR = BlockSyntax(
    name="solar-open", opener="<|tool_calls|>", openers=("<|tool_calls|>", "<|tool_call:begin|>"),
    detect=lambda src: "<|tool_call:begin|>" in src, grammar=_solar_grammar,
    pattern=Seq(Opt(L("<|tool_calls|>"), W()), L("<|tool_call:begin|>"), W(), Chars("id", other_than("<"), low=0),
                L("<|tool_call:name|>"), Chars("name", other_than("<")), L("<|tool_call:args|>"), W(), Json("args"),
                W(), Opt(L("<|tool_call:end|>"))),
    build=named_call)
