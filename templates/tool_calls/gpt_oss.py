"""GPT-OSS (harmony): `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>`."""

from __future__ import annotations

from grammars.gbnf import literal
from templates.tool_calls.calls import named_call
from templates.tool_calls.grammar import Function, Grammar, alternatives, repeat
from templates.tool_calls.patterns import Alt, Chars, Json, L, Opt, Seq, W, other_than
from templates.tool_calls.syntax import BlockSyntax


def _gpt_oss_grammar(g: Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    calls = [f'{literal(f.name)} " <|constrain|>json<|message|>" {g.json(f.parameters)}' for f in functions]
    one = f'"<|channel|>commentary to=functions." {alternatives(g, "call", calls)}'
    return repeat(one, '"<|call|><|start|>assistant"', parallel)


_CHANNEL = Seq(L("<|channel|>"), Alt(L("commentary"), L("analysis")))
_RECIPIENT = Seq(L("to=functions."), Chars("name", other_than("<")))
_CONSTRAINT = Opt(W(), Opt(L("<|constrain|>")), Chars(None, lambda c: c.isalnum() or c in "_-"))

GPT_OSS = BlockSyntax(
    name="gpt-oss", opener="<|channel|>commentary to=functions.", openers=("<|start|>", "<|channel|>"),
    detect=lambda src: "<|channel|>" in src and "<|start|>" in src, grammar=_gpt_oss_grammar,
    pattern=Seq(
        Alt(Seq(L("<|start|>"), L("assistant"), Alt(
            Seq(_CHANNEL, W(), _RECIPIENT),
            Seq(W(), _RECIPIENT, W(), _CHANNEL))),
            Seq(_CHANNEL, W(), _RECIPIENT)),
        _CONSTRAINT, W(), L("<|message|>"), W(), Json("args"), W(), Opt(Alt(L("<|call|>"), L("<|end|>")))),
    build=named_call)
