"""Mistral tool calls: `[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}`, and the older JSON list
`[TOOL_CALLS][{"name": ..., "arguments": {...}}]` (mistral-json)."""

from __future__ import annotations

from grammars.gbnf import literal
from templates.tool_calls.calls import Call, cut_in, json_calls, named_call
from templates.tool_calls.grammar import (
    COMMA_WS,
    Function,
    Grammar,
    alternatives,
    json_object,
    json_string,
    repeat,
)
from templates.tool_calls.patterns import (
    Alt,
    Caps,
    Chars,
    Json,
    L,
    Opt,
    Seq,
    W,
    name_char,
)
from templates.tool_calls.syntax import BlockSyntax


def _mistral_grammar(g: Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    call_id = ' "[CALL_ID]" [a-zA-Z0-9]{9}' if variant == "call-id" else ""
    calls = [f'{literal(f.name)}{call_id} "[ARGS]" {g.json(f.parameters)}' for f in functions]
    one = f'"[TOOL_CALLS]" {alternatives(g, "call", calls)}'
    return repeat(one, '""', parallel)


_MISTRAL_ID = '( "," ws "\\"id\\"" ":" ws "\\"" [a-zA-Z0-9]{9} "\\"" )?'


def _mistral_json_grammar(g: Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    calls = [json_object([("name", json_string(f.name)), ("arguments", g.json(f.parameters))], after=_MISTRAL_ID)
             for f in functions]
    call = alternatives(g, "call", calls)
    return f'"[TOOL_CALLS]" "[" ws {repeat(call, COMMA_WS, parallel)} ws "]"'


def _mistral_build(caps: Caps, names: frozenset[str]) -> list[Call] | None:
    if "name" in caps or cut_in(caps, "name") is not None:
        return named_call(caps, names)
    return json_calls(id_key="id")(caps, names)


_MISTRAL_PATTERN = Seq(L("[TOOL_CALLS]"), W(), Alt(
    Seq(Chars("name", name_char), Opt(L("[CALL_ID]"), Chars("id", str.isalnum)), L("[ARGS]"), W(), Json("args")),
    Json("json", many=True)))

MISTRAL = BlockSyntax(
    name="mistral", opener="[TOOL_CALLS]", openers=("[TOOL_CALLS]",),
    detect=lambda src: "[TOOL_CALLS]" in src and "[ARGS]" in src, grammar=_mistral_grammar,
    adapt=lambda src: "call-id" if "[CALL_ID]" in src else "", call_id_length=9,
    pattern=_MISTRAL_PATTERN, build=_mistral_build)

MISTRAL_JSON = BlockSyntax(
    name="mistral-json", opener="[TOOL_CALLS]", openers=("[TOOL_CALLS]",),
    detect=lambda src: "[TOOL_CALLS]" in src, grammar=_mistral_json_grammar, call_id_length=9,
    pattern=_MISTRAL_PATTERN, build=_mistral_build)
