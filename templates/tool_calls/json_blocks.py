"""JSON calls after an opening marker (Granite, Apriel, MiniMax-M1, Nemotron, FireFunction v2, Apertus), e.g.
`<TOOLCALL>[{"name": ..., "arguments": {...}}]</TOOLCALL>`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grammars.gbnf import literal
from templates.tool_calls.calls import json_calls
from templates.tool_calls.grammar import (
    COMMA_WS,
    NL,
    Function,
    Grammar,
    GrammarFn,
    alternatives,
    json_object,
    object_call,
    repeat,
)
from templates.tool_calls.patterns import Json, L, Opt, Pattern, Seq, W
from templates.tool_calls.syntax import BlockSyntax


def _json_list_grammar(opening: str, closing: str, name_as_key: bool = False) -> GrammarFn:
    """`OPENING[{"name": ..., "arguments": ...}, ...]CLOSING` (one object per line without brackets for
    MiniMax-M1, whose opening ends with a newline)."""
    def grammar(g: Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
        if name_as_key:
            calls = [json_object([(f.name, g.json(f.parameters))]) for f in functions]
        else:
            calls = [object_call(g, f) for f in functions]
        call = alternatives(g, "call", calls)
        if opening.endswith("\n"):
            return f"{literal(opening)} {repeat(call, NL, parallel)} {NL} {literal(closing)}"
        return f'{literal(opening)} "[" ws {repeat(call, COMMA_WS, parallel)} ws "]" {literal(closing)}'
    return grammar


def _json_block(name: str, opening: str, closing: str | None, detect: Callable[[str], bool], *,
                grammar_opening: str | None = None, **options: Any) -> BlockSyntax:
    """`OPENING` then calls as JSON (arrays or objects), then `CLOSING` (optional at the end)."""
    tail: list[Pattern] = [W(), Opt(L(closing))] if closing else []
    return BlockSyntax(
        name=name, opener=grammar_opening or opening, openers=(opening,), detect=detect,
        grammar=_json_list_grammar(grammar_opening or opening, closing or "", options.get("name_as_key", False)),
        pattern=Seq(L(opening), W(), Json("json", many=closing is not None), *tail),
        build=json_calls(**options))


GRANITE = _json_block("granite", "<|tool_call|>", None, lambda src: "<|tool_call|>" in src)
APRIEL = _json_block("apriel", "<tool_calls>", "</tool_calls>", lambda src: "<tool_calls>[" in src)
MINIMAX_M1 = _json_block("minimax-m1", "<tool_calls>", "</tool_calls>",
                         lambda src: "<tool_calls>" in src and "<beginning_of_sentence>" in src,
                         grammar_opening="<tool_calls>\n")
NEMOTRON = _json_block("nemotron", "<TOOLCALL>", "</TOOLCALL>", lambda src: "<TOOLCALL>" in src)
FIREFUNCTION = _json_block("firefunction-v2", "functools", None, lambda src: "functools[" in src)
APERTUS = _json_block("apertus", "<|tools_prefix|>", "<|tools_suffix|>", lambda src: "<|tools_prefix|>" in src,
                      name_as_key=True)
