"""MiniMax-M2 and Muse Glimmer (`atem:` tags in `<atem:function_calls>`), e.g.
`<minimax:tool_call><invoke name="NAME"><parameter name="KEY">VALUE</parameter></invoke></minimax:tool_call>`."""

from __future__ import annotations

from collections.abc import Callable

from grammars.gbnf import literal
from templates.tool_calls.grammar import (
    NL_OPT,
    Function,
    Grammar,
    GrammarFn,
    alternatives,
    params,
    repeat,
    xml_param,
)
from templates.tool_calls.patterns import (
    Alt,
    Chars,
    L,
    Opt,
    Pattern,
    Seq,
    W,
    other_than,
)
from templates.tool_calls.syntax import XmlSyntax


def _invoke_grammar(section: tuple[str, str], invoke: tuple[str, str], parameter: tuple[str, str],
                    channel: bool = False) -> GrammarFn:
    """`SECTION <invoke name="NAME"> <parameter name="KEY">VALUE</parameter> </invoke> /SECTION` (MiniMax-M2
    and Muse Glimmer's ATEM, whose tool message may first name its recipient: ` to=NAME<|message|>`)."""
    def grammar(g: Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
        param = xml_param(g, parameter[0], literal('">'), parameter[1], after=NL_OPT)
        calls = [f'{literal(invoke[0])} {literal(f.name)} {literal(chr(34) + ">")} {NL_OPT} {params(f, param)} '
                 f"{literal(invoke[1])}" for f in functions]
        body = repeat(alternatives(g, "call", calls), NL_OPT, parallel)
        block = f"{literal(section[0])} {NL_OPT} {body} {NL_OPT} {literal(section[1])}"
        if channel:
            recipients = " | ".join(literal(f.name) for f in functions)
            return f'( " to=" ( {recipients} ) "<|message|>" )? {block}'
        return block
    return grammar


def _invoke_syntax(name: str, section: tuple[str, str], prefix: str, detect: Callable[[str], bool],
                   channel: bool = False) -> XmlSyntax:
    invoke, parameter = f'<{prefix}invoke name="', f'<{prefix}parameter name="'
    head: Pattern = Opt(L(section[0]), W())
    if channel:  # Muse Glimmer: the tool message's header comes along (`<|start|>assistant to=NAME<|message|>`)
        head = Seq(Opt(L("<|start|>"), Chars(None, other_than("<", space=False), low=0), L("<|message|>"), W()), head)
    tail: Pattern = L(section[1])
    if channel:
        tail = Seq(tail, Opt(Alt(L("<|eom|>"), L("<|eot|>"), L("<|end|>"))))
    return XmlSyntax(
        name=name, opener=section[0], openers=(section[0], invoke, *(("<|start|>",) if channel else ())),
        detect=detect, grammar=_invoke_grammar(section, (invoke, f"</{prefix}invoke>"),
                                               (parameter, f"</{prefix}parameter>"), channel),
        header=Seq(head, L(invoke), Chars("name", other_than('"<')), L('">')),
        param=Seq(L(parameter), Chars("key", other_than('"<')), L('">')),
        value_ends=(f"</{prefix}parameter>", parameter, f"</{prefix}invoke>"),
        close=Seq(L(f"</{prefix}invoke>"), W(), Opt(tail)))


MINIMAX_M2 = _invoke_syntax("minimax-m2", ("<minimax:tool_call>", "</minimax:tool_call>"), "",
                            lambda src: "<minimax:tool_call>" in src)
MUSE = _invoke_syntax("muse-glimmer", ("<atem:function_calls>", "</atem:function_calls>"), "atem:",
                      lambda src: "<atem:function_calls>" in src, channel=True)
