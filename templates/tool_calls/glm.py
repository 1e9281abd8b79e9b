"""GLM: `<tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value></tool_call>`."""

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
from templates.tool_calls.patterns import Chars, L, Seq, W, other_than
from templates.tool_calls.syntax import XmlSyntax


def _glm_grammar(g: Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    param = xml_param(g, "<arg_key>", f'"</arg_key>" {NL_OPT} "<arg_value>"', "</arg_value>", after=NL_OPT)
    calls = [f'"<tool_call>" {literal(f.name)} {NL_OPT} {params(f, param)} "</tool_call>"' for f in functions]
    return repeat(alternatives(g, "call", calls), NL_OPT, parallel)


GLM = XmlSyntax(
    name="glm", opener="<tool_call>", openers=("<tool_call>",), detect=lambda src: "<arg_key>" in src,
    grammar=_glm_grammar,
    header=Seq(L("<tool_call>"), W(), Chars("name", other_than("<"))),
    param=Seq(L("<arg_key>"), Chars("key", other_than("<", space=False)), L("</arg_key>"), W(), L("<arg_value>")),
    value_ends=("</arg_value>", "<arg_key>", "</tool_call>"),
    close=L("</tool_call>"))
