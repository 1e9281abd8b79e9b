"""Llama 3.x: `{"name": ..., "parameters": {...}}` at the start of the output, or `<|python_tag|>` code or calls."""

from __future__ import annotations

from templates.tool_calls.calls import PYTHON_TAG, Call, cut_in, json_calls, python_tag
from templates.tool_calls.grammar import (
    Function,
    Grammar,
    alternatives,
    object_call,
    repeat,
)
from templates.tool_calls.patterns import Alt, Caps, Json, L, Peek, Seq, W
from templates.tool_calls.syntax import BlockSyntax


def _llama3_grammar(g: Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    call = alternatives(g, "call", [object_call(g, f, args_key="parameters") for f in functions])
    return repeat(call, '";" ws', parallel)


def _llama3_build(caps: Caps, names: frozenset[str]) -> list[Call] | None:
    if "body" in caps or cut_in(caps, "body") is not None:
        return python_tag(caps, names)
    return json_calls()(caps, names)


LLAMA3 = BlockSyntax(
    name="llama3", opener='{"name":', openers=("<|python_tag|>",),
    detect=lambda src: "<|start_header_id|>" in src and '"parameters": ' in src,
    grammar=_llama3_grammar,
    at_start=Seq(W(), Peek(Seq(L("{"), W(), L('"'), Alt(L('name"'), L('type"'), L('function"')))),
                 Json("json", many=True)),
    pattern=PYTHON_TAG, build=_llama3_build)
