"""Cohere: `<|START_ACTION|>[{"tool_call_id": "0", "tool_name": ..., "parameters": {...}}]<|END_ACTION|>` (Command R7B
and later), and Command R+'s `Action:` followed by the same list, without the ids, in a ```json block."""

from __future__ import annotations

from templates.tool_calls.calls import json_calls
from templates.tool_calls.grammar import (
    Function,
    Grammar,
    GrammarFn,
    alternatives,
    object_call,
    repeat,
)
from templates.tool_calls.patterns import Json, L, Opt, Seq, W
from templates.tool_calls.syntax import BlockSyntax


def _cohere_grammar(opening: str, closing: str, call_id: bool) -> GrammarFn:
    def grammar(g: Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
        extra = [("tool_call_id", '"\\"" [0-9]+ "\\""')] if call_id else []
        calls = [object_call(g, f, "tool_name", "parameters", extra) for f in functions]
        body = repeat(alternatives(g, "call", calls), '"," ws', parallel)
        return f'{opening} ws "[" ws {body} ws "]" ws {closing}'
    return grammar


_COHERE_CALLS = json_calls(name_keys=("tool_name", "name"), args_keys=("parameters", "arguments"),
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
