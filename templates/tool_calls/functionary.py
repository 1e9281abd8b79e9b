"""Functionary v3.1 (`<function=NAME>{...}</function>`, or Llama's `<|python_tag|>`) and v3.2 (`>>>NAME\n{...}`)."""

from __future__ import annotations

from grammars.gbnf import literal
from templates.tool_calls.calls import PYTHON_TAG, Call, cut_in, named_call, python_tag
from templates.tool_calls.grammar import Function, Grammar, alternatives, repeat
from templates.tool_calls.patterns import (
    Alt,
    Caps,
    Chars,
    Closer,
    Json,
    L,
    Seq,
    W,
    name_char,
    other_than,
)
from templates.tool_calls.syntax import BlockSyntax


def _functionary_v31_grammar(g: Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    calls = [f'"<function=" {literal(f.name)} ">" {g.json(f.parameters)} "</function>"' for f in functions]
    return repeat(alternatives(g, "call", calls), '""', parallel)


def _functionary_v31_build(caps: Caps, names: frozenset[str]) -> list[Call] | None:
    if "body" in caps or cut_in(caps, "body") is not None:
        return python_tag(caps, names)
    return named_call(caps, names)


FUNCTIONARY_V31 = BlockSyntax(
    name="functionary-v3.1", opener="<function=", openers=("<function=", "<|python_tag|>"),
    detect=lambda src: "'<function=' + tool_call" in src or "start_tag => `<function`" in src,
    grammar=_functionary_v31_grammar,
    pattern=Alt(Seq(L("<function="), Chars("name", other_than(">")), L(">"), W(), Json("args"), W(),
                    Closer("</function>")), PYTHON_TAG),
    build=_functionary_v31_build)


def _functionary_v32_grammar(g: Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    calls = [f'{literal(f.name)} "\\n" {g.json(f.parameters)}' for f in functions]
    call = alternatives(g, "call", calls)
    return f'">>>"? {repeat(call, literal(">>>"), parallel)}'


_RECIPIENT_V32 = Alt(Seq(L("all"), L("\n")),
                     Seq(Chars("name", name_char), L("\n"), W(), Json("args")))


def _functionary_v32_build(caps: Caps, names: frozenset[str]) -> list[Call] | None:
    return named_call(caps, names) if "name" in caps or "_cut" in caps else []


FUNCTIONARY_V32 = BlockSyntax(
    name="functionary-v3.2", opener=">>>", openers=(">>>",), detect=lambda src: ">>>all" in src,
    grammar=_functionary_v32_grammar,
    at_start=_RECIPIENT_V32,  # the prompt ends with ">>>": the output starts with a recipient
    pattern=Seq(L(">>>"), _RECIPIENT_V32), build=_functionary_v32_build)
