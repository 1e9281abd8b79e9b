"""Gemma 4: `<|tool_call>call:NAME{key:<|"|>text<|"|>,n:1}<tool_call|>` (keys sorted, strings in `<|"|>` quotes)."""

from __future__ import annotations

from typing import Any

from grammars.gbnf import literal
from templates.tool_calls.calls import gemma_call
from templates.tool_calls.grammar import (
    NOTHING,
    Function,
    Grammar,
    alternatives,
    is_text,
    keyword_arguments,
    repeat,
    schema_types,
    string_enum,
)
from templates.tool_calls.patterns import Chars, L, Opt, Seq, Until, W, other_than
from templates.tool_calls.syntax import BlockSyntax


def _gemma_value(g: Grammar, schema: Any) -> str:
    """A Gemma 4 argument value: strings in `<|"|>` quotes, scalars as JSON, containers free-form."""
    quote = literal('<|"|>')
    if is_text(schema):
        return f"{quote} {g.text('<|')} {quote}"
    enum = string_enum(schema)
    if enum is not None:
        return "( " + " | ".join(f"{quote} {literal(v)} {quote}" for v in enum) + " )"
    if schema_types(schema) & {"object", "array"} or not schema_types(schema):
        string = g.rule("gemma-string", f"{quote} {g.text('<|')} {quote}")
        number = g.rule("gemma-number", '"-"? [0-9]+ ("." [0-9]+)? ([eE] [-+]? [0-9]+)?')
        g.rules.setdefault("gemma-value", f'{string} | gemma-dict | gemma-list | {number} | "true" | "false" | "null"')
        g.rules.setdefault("gemma-dict", '"{" ( [a-zA-Z0-9_]+ ":" gemma-value ( "," [a-zA-Z0-9_]+ ":" gemma-value )* )? "}"')
        g.rules.setdefault("gemma-list", '"[" ( gemma-value ( "," gemma-value )* )? "]"')
        return "gemma-value"
    return g.json(schema)


def _gemma4_grammar(g: Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    # the template writes the arguments sorted by key
    calls = []
    for f in functions:
        arguments = keyword_arguments(g, f, lambda s: _gemma_value(g, s), literal(":"), literal(","), sort=True)
        calls.append(f'{literal(f.name)} "{{" {arguments} "}}"')
    one = f'"<|tool_call>call:" {alternatives(g, "call", calls)} "<tool_call|>"'
    return repeat(one, NOTHING, parallel)


GEMMA4 = BlockSyntax(
    name="gemma-4", opener="<|tool_call>", openers=("<|tool_call>",), detect=lambda src: "<|tool_call>call:" in src,
    grammar=_gemma4_grammar,
    pattern=Seq(L("<|tool_call>"), W(), L("call:"), Chars("name", other_than("{<")), Until("body", ("<tool_call|>",)),
                Opt(L("<tool_call|>"))),
    build=gemma_call)
