"""MiniCPM 5: `<function name="NAME"><param name="KEY">VALUE</param></function>`."""

from __future__ import annotations

from grammars.gbnf import literal
from templates.tool_calls.grammar import (
    NL_OPT,
    Function,
    Grammar,
    alternatives,
    params,
    repeat,
    xml_param,
)
from templates.tool_calls.patterns import Chars, L, Seq, other_than
from templates.tool_calls.syntax import XmlSyntax


def _minicpm5_grammar(g: Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    param = xml_param(g, '<param name="', literal('">'), "</param>")
    calls = [f'{literal("<function name=" + chr(34))} {literal(f.name)} {literal(chr(34) + ">")} {params(f, param)} '
             '"</function>"' for f in functions]
    return repeat(alternatives(g, "call", calls), NL_OPT, parallel)


MINICPM5 = XmlSyntax(
    name="minicpm5", opener='<function name="', openers=('<function name="',),
    detect=lambda src: '<function name="' in src and '<param name="' in src, grammar=_minicpm5_grammar,
    header=Seq(L('<function name="'), Chars("name", other_than('"<')), L('">')),
    param=Seq(L('<param name="'), Chars("key", other_than('"<')), L('">')),
    value_ends=("</param>", "</function>"),
    close=L("</function>"))
