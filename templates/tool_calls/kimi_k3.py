"""Kimi K3 tool calls, e.g. `<|open|>tools<|sep|><|open|>call tool="NAME" index="0"<|sep|>`
`<|open|>argument key="KEY" type="string"<|sep|>VALUE<|close|>argument<|sep|>`
`<|close|>call<|sep|><|close|>tools<|sep|>`."""

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
    schema_types,
)
from templates.tool_calls.patterns import Chars, L, Opt, Seq, W, other_than
from templates.tool_calls.syntax import XmlSyntax


def _kimi_k3_grammar(g: Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    def param(key: str | None, schema: Any) -> str:
        name = KEY if key is None else literal(key)
        head = f'"<|open|>argument key=\\"" {name} "\\" type=\\""'
        close = '"<|close|>argument<|sep|>"'
        kind, value = param_value(g, key, schema, "<|close|>argument<|sep|>")
        if kind != "json":
            return f'{head} "string\\"<|sep|>" {value} {close}'
        types = schema_types(schema) - {"integer"} | ({"number"} if "integer" in schema_types(schema) else set())
        type_name = literal(next(iter(types))) if len(types) == 1 else "[a-z]+"
        return f'{head} {type_name} "\\"<|sep|>" {value} {close}'

    calls = [f'"<|open|>call tool=\\"" {literal(f.name)} "\\" index=\\"" [0-9]+ "\\"<|sep|>" {params(f, param)} '
             '"<|close|>call<|sep|>"' for f in functions]
    body = repeat(alternatives(g, "call", calls), '""', parallel)
    return f'"<|open|>tools<|sep|>" {body} "<|close|>tools<|sep|>"'


KIMI_K3 = XmlSyntax(
    name="kimi-k3", opener="<|open|>tools<|sep|>", openers=("<|open|>tools<|sep|>", '<|open|>call tool="'),
    detect=lambda src: "<|open|>" in src and "open_tag('call'" in src, grammar=_kimi_k3_grammar,
    header=Seq(Opt(L("<|open|>tools<|sep|>"), W()), L('<|open|>call tool="'), Chars("name", other_than('"<')), L('"'),
               Chars(None, other_than("<", space=False), low=0), L("<|sep|>")),
    param=Seq(L('<|open|>argument key="'), Chars("key", other_than('"<')), L('"'),
              Opt(W(), L('type="'), Chars("type", other_than('"<')), L('"')),
              Chars(None, other_than("<", space=False), low=0), L("<|sep|>")),
    value_ends=("<|close|>argument<|sep|>", "<|close|>call<|sep|>"),
    close=Seq(L("<|close|>call<|sep|>"), W(), Opt(L("<|close|>tools<|sep|>"))))
