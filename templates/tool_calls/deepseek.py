"""DeepSeek R1 and V3.1 tool calls (R1: `function<｜tool▁sep｜>NAME` and the arguments in a ```json block), e.g.
`<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜><｜tool▁calls▁end｜>`."""

from __future__ import annotations

from collections.abc import Callable

from grammars.gbnf import literal
from templates.tool_calls.calls import named_call
from templates.tool_calls.grammar import NL_OPT, Function, Grammar, alternatives, repeat
from templates.tool_calls.patterns import Alt, Chars, Json, L, Opt, Seq, W, other_than
from templates.tool_calls.syntax import BlockSyntax

_DS_CALLS_BEGIN, _DS_CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
_DS_CALL_BEGIN, _DS_CALL_END, _DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def _deepseek_grammar(g: Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
    if variant == "r1":
        calls = [f'"function" {literal(_DS_SEP)} {literal(f.name)} "\\n```json\\n" {g.json(f.parameters)} '
                 '"\\n```"' for f in functions]
    else:
        calls = [f"{literal(f.name)} {literal(_DS_SEP)} {g.json(f.parameters)}" for f in functions]
    one = f"{literal(_DS_CALL_BEGIN)} {alternatives(g, 'call', calls)} {literal(_DS_CALL_END)}"
    return f"{literal(_DS_CALLS_BEGIN)} {repeat(one, NL_OPT, parallel)} {literal(_DS_CALLS_END)}"


def _deepseek(name: str, variant: str, detect: Callable[[str], bool]) -> BlockSyntax:
    """DeepSeek R1 (`function<sep>NAME` and the arguments in a ```json block) and V3.1
    (`NAME<sep>ARGS`); each reads both."""
    return BlockSyntax(
        name=name, opener=_DS_CALLS_BEGIN, openers=(_DS_CALLS_BEGIN, _DS_CALL_BEGIN), detect=detect,
        grammar=_deepseek_grammar, variant=variant,
        pattern=Seq(
            Opt(L(_DS_CALLS_BEGIN), W()), L(_DS_CALL_BEGIN), Alt(
                Seq(Opt(L("function")), L(_DS_SEP), Chars("name", other_than("<`"))),
                Seq(Chars("name", other_than("<`")), W(), L(_DS_SEP))),
            W(), Opt(L("```"), Opt(L("json"))), W(), Json("args"), W(), Opt(L("```")), W(),
            Opt(L(_DS_CALL_END)), W(), Opt(L(_DS_CALLS_END))),
        build=named_call)


DEEPSEEK_R1 = _deepseek("deepseek-r1", "r1", lambda src: "tool▁sep" in src and "```json" in src)
DEEPSEEK_V31 = _deepseek("deepseek-v3.1", "v3.1", lambda src: "tool▁sep" in src)
