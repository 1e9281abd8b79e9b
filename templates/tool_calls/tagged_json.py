"""One JSON call object between an opening and a closing tag, one block per call: Hermes's
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (in `hermes`), Phi-4-mini's
`<|tool_call|>{...}<|/tool_call|>` and InternLM's `<|action_start|><|plugin|>\n{...}<|action_end|>`."""

from __future__ import annotations

from collections.abc import Callable

from grammars.gbnf import literal
from templates.tool_calls.calls import json_calls
from templates.tool_calls.grammar import (
    Function,
    Grammar,
    GrammarFn,
    alternatives,
    object_call,
    repeat,
)
from templates.tool_calls.patterns import Closer, Json, L, Seq, W
from templates.tool_calls.syntax import BlockSyntax


def _tagged_grammar(opening: str, closing: str, args_key: str, padding: str, between: str) -> GrammarFn:
    def grammar(g: Grammar, functions: list[Function], parallel: bool, variant: str) -> str:
        call = alternatives(g, "call", [object_call(g, f, args_key=args_key) for f in functions])
        pad = f" {padding} " if padding else " "
        return repeat(f"{literal(opening)}{pad}{call}{pad}{literal(closing)}", between, parallel)
    return grammar


def tagged_json(name: str, opening: str, closing: str, detect: Callable[[str], bool], *,
                args_key: str = "arguments", written_opening: str | None = None, padding: str = "",
                between: str = '"\\n"?') -> BlockSyntax:
    """Calls as `OPENING{json}CLOSING`; the grammar writes `written_opening` (default `opening`),
    `padding` inside the tags and `between` between blocks."""
    return BlockSyntax(
        name=name, opener=written_opening or opening, openers=(opening,), detect=detect,
        grammar=_tagged_grammar(written_opening or opening, closing, args_key, padding, between),
        pattern=Seq(L(opening), W(), Json("json", many=True), W(), Closer(closing)), build=json_calls())


PHI4 = tagged_json("phi-4", "<|tool_call|>", "<|/tool_call|>", lambda src: "<|/tool_call|>" in src)
INTERNLM = tagged_json("internlm", "<|action_start|><|plugin|>", "<|action_end|>",
                       lambda src: "<|action_start|><|plugin|>" in src, args_key="parameters",
                       written_opening="<|action_start|><|plugin|>\n")
