"""DeepSeek DSML tool calls, e.g. `<｜DSML｜tool_calls><｜DSML｜invoke name="NAME">`
`<｜DSML｜parameter name="KEY" string="true">VALUE</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜tool_calls>`."""

from __future__ import annotations

from typing import Any

from grammars.gbnf import literal
from templates.tool_calls.grammar import (
    KEY,
    Function,
    Grammar,
    alternatives,
    param_value,
    params,
    repeat,
)
from templates.tool_calls.patterns import Alt, Chars, L, Opt, Seq, W, other_than
from templates.tool_calls.syntax import XmlSyntax


def _dsml_grammar(g: Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    block = variant or "tool_calls"

    def param(key: str | None, schema: Any) -> str:
        name = KEY if key is None else literal(key)
        head = f'"<｜DSML｜parameter name=\\"" {name} "\\" string=\\""'
        close = '"</｜DSML｜parameter>" "\\n"?'
        kind, value = param_value(g, key, schema, "</｜DSML｜parameter>")
        string = '"false\\">"' if kind == "json" else '"true\\">"'
        return f"{head} {string} {value} {close}"

    calls = [f'"<｜DSML｜invoke name=\\"" {literal(f.name)} "\\">" "\\n"? {params(f, param)} "\\n"? '
             '"</｜DSML｜invoke>"' for f in functions]
    invokes = repeat(alternatives(g, "call", calls), '"\\n"?', parallel)
    return f'{literal(f"<｜DSML｜{block}>")} "\\n"? {invokes} "\\n"? {literal(f"</｜DSML｜{block}>")}'


_DSML_BLOCKS = (L("<｜DSML｜function_calls>"), L("<｜DSML｜tool_calls>"))
_DSML_CLOSE = (L("</｜DSML｜function_calls>"), L("</｜DSML｜tool_calls>"))

DSML = XmlSyntax(
    name="deepseek-dsml", opener="<｜DSML｜tool_calls>",
    openers=("<｜DSML｜function_calls>", "<｜DSML｜tool_calls>", "<｜DSML｜invoke name="),
    detect=lambda src: "dsml_token" in src or "｜DSML｜" in src, grammar=_dsml_grammar,
    adapt=lambda src: "tool_calls" if "function_calls" not in src else "function_calls",
    header=Seq(Opt(Alt(*_DSML_BLOCKS), W()), L('<｜DSML｜invoke name="'), Chars("name", other_than('"<')), L('">')),
    param=Seq(L('<｜DSML｜parameter name="'), Chars("key", other_than('"<')), L('"'),
              Opt(W(), L('string="'), Chars("type", other_than('"<')), L('"')), W(), L(">")),
    value_ends=("</｜DSML｜parameter>", "</｜DSML｜invoke>"),
    close=Seq(L("</｜DSML｜invoke>"), W(), Opt(Alt(*_DSML_CLOSE))))
