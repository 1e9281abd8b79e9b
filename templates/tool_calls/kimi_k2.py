"""Kimi K2 tool calls, e.g. `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0`
`<|tool_call_argument_begin|>{...}<|tool_call_end|><|tool_calls_section_end|>`."""

from __future__ import annotations

from grammars.gbnf import literal
from templates.tool_calls.calls import named_call
from templates.tool_calls.grammar import Function, Grammar, alternatives, repeat
from templates.tool_calls.patterns import Chars, Json, L, Opt, Seq, Span, W, other_than
from templates.tool_calls.syntax import BlockSyntax

_KIMI_SECTION_BEGIN, _KIMI_SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
_KIMI_CALL_BEGIN, _KIMI_ARGS, _KIMI_CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"


def _kimi_k2_grammar(g: Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    calls = [f'{literal(_KIMI_CALL_BEGIN)} "functions." {literal(f.name)} ":" [0-9]+ {literal(_KIMI_ARGS)} '
             f'{g.json(f.parameters)} {literal(_KIMI_CALL_END)}' for f in functions]
    body = repeat(alternatives(g, "call", calls), '"\\n"?', parallel)
    return f"{literal(_KIMI_SECTION_BEGIN)} {body} {literal(_KIMI_SECTION_END)}"


KIMI_K2 = BlockSyntax(
    name="kimi-k2", opener=_KIMI_SECTION_BEGIN, openers=(_KIMI_SECTION_BEGIN, _KIMI_CALL_BEGIN),
    detect=lambda src: _KIMI_SECTION_BEGIN in src, grammar=_kimi_k2_grammar,
    pattern=Seq(Opt(L(_KIMI_SECTION_BEGIN), W()), L(_KIMI_CALL_BEGIN), W(),
                Span("id", Seq(Opt(L("functions.")), Chars("name", other_than(":<")),
                               Opt(L(":"), Chars(None, str.isdigit)))),
                W(), L(_KIMI_ARGS), W(), Json("args"), W(), Opt(L(_KIMI_CALL_END)), W(), Opt(L(_KIMI_SECTION_END))),
    build=named_call)
