"""LFM2: `<|tool_call_start|>[name(a=1, b="x"), other()]<|tool_call_end|>` (Python call syntax)."""

from __future__ import annotations

from grammars.gbnf import literal
from templates.tool_calls.calls import lfm2_calls
from templates.tool_calls.grammar import (
    Function,
    Grammar,
    alternatives,
    keyword_arguments,
    repeat,
)
from templates.tool_calls.patterns import L, Opt, Seq, Until
from templates.tool_calls.syntax import BlockSyntax


def _lfm2_grammar(g: Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    # JSON values are Python literals too (strings, numbers, lists); LFM2 reads true/false/null as well
    calls = [f'{literal(f.name)} "(" {keyword_arguments(g, f, g.json, literal("="), literal(", "))} ")"'
             for f in functions]
    call = alternatives(g, "call", calls)
    return f'"<|tool_call_start|>[" {repeat(call, literal(", "), parallel)} "]<|tool_call_end|>"'


LFM2 = BlockSyntax(
    name="lfm2", opener="<|tool_call_start|>", openers=("<|tool_call_start|>",),
    detect=lambda src: "<|tool_call_start|>" in src or "<|tool_list_start|>" in src, grammar=_lfm2_grammar,
    pattern=Seq(L("<|tool_call_start|>"), Until("body", ("<|tool_call_end|>",)), Opt(L("<|tool_call_end|>"))),
    build=lfm2_calls)
