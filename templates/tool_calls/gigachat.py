"""GigaChat 3: `<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": ..., "arguments": {...}}`."""

from __future__ import annotations

from templates.tool_calls.calls import json_calls
from templates.tool_calls.grammar import Function, Grammar, alternatives, object_call
from templates.tool_calls.patterns import Json, L, Opt, Seq, W
from templates.tool_calls.syntax import BlockSyntax


def _gigachat_grammar(g: Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    call = alternatives(g, "call", [object_call(g, f) for f in functions])
    return f'"<|message_sep|>\\n\\nfunction call<|role_sep|>\\n" {call}'


GIGACHAT = BlockSyntax(
    name="gigachat3", opener="<|message_sep|>\n\nfunction call<|role_sep|>\n",
    openers=("<|message_sep|>", "function call<|role_sep|>"),
    detect=lambda src: "<|role_sep|>" in src and "function call" in src, grammar=_gigachat_grammar,
    pattern=Seq(Opt(L("<|message_sep|>"), W()), L("function call"), W(), L("<|role_sep|>"), W(), Json("json")),
    build=json_calls())
