"""Hy3 tool calls, e.g. `<tool_calls:opensource><tool_call:opensource>NAME<tool_sep:opensource>`
`<arg_key:opensource>KEY</arg_key:opensource><arg_value:opensource>VALUE</arg_value:opensource>`
`</tool_call:opensource></tool_calls:opensource>`."""

from __future__ import annotations

from grammars.gbnf import literal
from templates.tool_calls.grammar import (
    NL,
    Function,
    Grammar,
    alternatives,
    params,
    repeat,
    xml_param,
)
from templates.tool_calls.patterns import Chars, L, Opt, Seq, W, other_than
from templates.tool_calls.syntax import XmlSyntax

_HY = ":opensource"


def _hy3_grammar(g: Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    param = xml_param(g, f"<arg_key{_HY}>", f'{literal(f"</arg_key{_HY}>")} {NL} {literal(f"<arg_value{_HY}>")}',
                      f"</arg_value{_HY}>", after=NL)
    calls = [f'{literal(f"<tool_call{_HY}>")} {literal(f.name)} {literal(f"<tool_sep{_HY}>")} {NL} '
             f'{params(f, param)} {literal(f"</tool_call{_HY}>")}' for f in functions]
    body = repeat(alternatives(g, "call", calls), NL, parallel)
    return f'{literal(f"<tool_calls{_HY}>")} {NL} {body} {NL} {literal(f"</tool_calls{_HY}>")}'


HY3 = XmlSyntax(
    name="hy3", opener=f"<tool_calls{_HY}>", openers=(f"<tool_calls{_HY}>", f"<tool_call{_HY}>"),
    detect=lambda src: "toolsep_token" in src or f"<tool_sep{_HY}>" in src, grammar=_hy3_grammar,
    header=Seq(Opt(L(f"<tool_calls{_HY}>"), W()), L(f"<tool_call{_HY}>"), W(), Chars("name", other_than("<")), W(),
               L(f"<tool_sep{_HY}>")),
    param=Seq(L(f"<arg_key{_HY}>"), Chars("key", other_than("<", space=False)), L(f"</arg_key{_HY}>"), W(),
              L(f"<arg_value{_HY}>")),
    value_ends=(f"</arg_value{_HY}>", f"<arg_key{_HY}>", f"</tool_call{_HY}>"),
    close=Seq(L(f"</tool_call{_HY}>"), W(), Opt(L(f"</tool_calls{_HY}>"))))
