"""Qwen3-Coder and Seed-OSS (in `<seed:tool_call>`), e.g.
`<tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call>`."""

from __future__ import annotations

from typing import Any

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
from templates.tool_calls.patterns import Chars, Closer, L, Opt, Seq, W, other_than
from templates.tool_calls.syntax import XmlSyntax


def _qwen3_coder_grammar(g: Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    wrapper_open, wrapper_close = variant.split("|") if variant else ("<tool_call>", "</tool_call>")
    param = xml_param(g, "<parameter=", '">"', "</parameter>", newlines=True, after=NL_OPT)
    calls = [f'"<function=" {literal(f.name)} ">" "\\n"? {params(f, param)} "\\n"? "</function>"'
             for f in functions]
    one = f'{literal(wrapper_open)} "\\n"? {alternatives(g, "call", calls)} "\\n"? {literal(wrapper_close)}'
    return repeat(one, '"\\n"*', parallel)


def _function_xml(wrapper: str, end: str) -> dict[str, Any]:
    """`<tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call>` (Qwen3-Coder),
    with another wrapper for Seed-OSS."""
    return {
        "openers": (wrapper, "<function="),
        "header": Seq(Opt(L(wrapper), W()), L("<function="), Chars("name", other_than(">\n<", space=False)), L(">")),
        "param": Seq(L("<parameter="), Chars("key", other_than(">\n<", space=False)), L(">")),
        "value_ends": ("</parameter>", "<parameter=", "</function>"),
        "close": Seq(L("</function>"), W(), Closer(end))}


QWEN3_CODER = XmlSyntax(
    name="qwen3-coder", opener="<tool_call>", detect=lambda src: "<function=" in src and "<parameter=" in src,
    grammar=_qwen3_coder_grammar, **_function_xml("<tool_call>", "</tool_call>"))

SEED_OSS = XmlSyntax(
    name="seed-oss", opener="<seed:tool_call>", detect=lambda src: "<seed:tool_call>" in src,
    grammar=_qwen3_coder_grammar, variant="<seed:tool_call>|</seed:tool_call>",
    **_function_xml("<seed:tool_call>", "</seed:tool_call>"))
