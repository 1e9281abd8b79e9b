"""At most one grammar per request (DESIGN step 5): `response_format`, and tool calls forced in the
model's own syntax, compiled for the model (cached). A format that cannot be enforced exactly is
a 400, never unconstrained output instead.

When the model reasons before it answers, the grammar leaves room for that first: free text up to
the family's end-of-reasoning marker, then the constrained answer.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any

from app.pipeline.answer_check import AnswerCheck, SchemaCheck
from app.pipeline.errors import BadRequest
from app.pipeline.plan import ResponseFormat, ToolPlan
from backends.grammar import CompiledGrammar, GrammarError
from backends.registry import ServedModel
from grammars.gbnf import literal, prefix_rules
from grammars.json_schema import SchemaGrammar, convert_schema
from grammars.reasoning_prefix import (
    OPTIONAL_ROOT,
    with_free_text_first,
    with_reasoning_first,
)
from grammars.reasoning_prefix import ROOT as REASONING_ROOT
from grammars.response_format import (
    FormatGrammar,
    ResponseFormatError,
    response_format_grammar,
)
from grammars.schema_errors import SchemaError
from grammars.unique_items import UniqueItemsGuard
from templates.chat_format import ChatFormat
from templates.families import ChannelFamily

ANSWER_ROOT = "fireside-answer"
FORMAT_PREFIX = "fireside-format-"
EITHER_ROOT = "fireside-either"


@dataclass(frozen=True)
class ReasoningFirst:
    """The answer's grammar starts after a reasoning block: `start` opens it (None: the prompt
    already did), `end` closes it."""

    start: str | None
    end: str
    after: str = ""  # always follows the end marker
    answer_opener: str = ""  # opens a plain (non-call) answer


def reasoning_first(chat: ChatFormat, prompt: str) -> ReasoningFirst | None:
    """Where a `response_format` or tool-call grammar must leave room for reasoning first (None: nowhere)."""
    family = chat.family
    if not family.reasons or family.closes_reasoning(prompt):
        return None
    if isinstance(family, ChannelFamily) and not family.answer_opener:
        # the answer follows a channel header that this family does not describe
        raise BadRequest(f"{family.name} writes its answer after a channel header that Fireside cannot predict, so "
                         "its answer cannot be constrained: response_format and tools are refused for this "
                         "model's reasoning channels", param="response_format")
    assert family.reasoning_end is not None
    return ReasoningFirst(None if family.opens_reasoning(prompt) else family.reasoning_start, family.reasoning_end,
                          family.after_reasoning, family.answer_opener)


@dataclass(frozen=True)
class Constraint:
    """What holds an answer to its format: the grammar, the guard that keeps arrays' items unique
    while decoding (None: none needed), and the check of the finished answer (None: the grammar
    enforced everything)."""

    grammar: CompiledGrammar
    guard: UniqueItemsGuard | None = None
    check: AnswerCheck | None = None


@dataclass(frozen=True)
class AnswerGrammar:
    """The grammar of a plain answer under `response_format`: its text and root rule."""

    text: str
    root: str
    what: str  # how errors name it
    format: FormatGrammar = field(repr=False, default=FormatGrammar(""))


def answer_grammar(response_format: ResponseFormat, reasoning: ReasoningFirst | None, *,
                   unique_items: bool = True) -> AnswerGrammar:
    """`response_format` as grammar text, after the family's answer opener when it has one (400
    for a format that cannot be enforced exactly)."""
    try:
        converted = response_format_grammar(response_format.type, schema=response_format.schema,
                                            json_schema=response_format.json_schema, grammar=response_format.grammar,
                                            unique_items=unique_items)
    except (ResponseFormatError, SchemaError) as error:
        raise BadRequest(f"response_format: {error}", param="response_format") from None
    assert converted is not None  # a plan's format is never `text`
    text = converted.text
    what = "grammar" if response_format.type == "grammar" else "generated grammar"
    if reasoning is not None and reasoning.answer_opener:
        text = f"{text.rstrip()}\n{ANSWER_ROOT} ::= {literal(reasoning.answer_opener)} root\n"
        return AnswerGrammar(text, ANSWER_ROOT, what, converted)
    return AnswerGrammar(text, "root", what, converted)


def compile_grammar(served: ServedModel, text: str, reasoning: ReasoningFirst | None, *, param: str,
                    what: str = "generated grammar", root: str = "root") -> CompiledGrammar:
    """`text` (rule `root`) compiled for the model (cached), after room for reasoning when there is some."""
    if reasoning is not None:
        text = with_reasoning_first(text, start=reasoning.start, end=reasoning.end + reasoning.after, inner=root)
        root = REASONING_ROOT
    try:
        return served.grammars.get(text, root)
    except GrammarError as error:
        raise BadRequest(f"{param}: the {what} does not parse: {error}", param=param) from None


def format_grammar(served: ServedModel, response_format: ResponseFormat,
                   reasoning: ReasoningFirst | None) -> Constraint:
    """The constraint of `response_format`."""
    answer = answer_grammar(response_format, reasoning)
    grammar = compile_grammar(served, answer.text, reasoning, param="response_format", what=answer.what,
                              root=answer.root)
    converted = answer.format
    guard = None
    if converted.unique_items:
        guard = UniqueItemsGuard(converted.schema, opener=reasoning.answer_opener if reasoning is not None else "",
                                 **_reasoning_markers(reasoning))
    check = None
    if converted.unique_items or converted.deferred:
        check = AnswerCheck(content=SchemaCheck(converted.schema))
    return Constraint(grammar, guard, check)


def call_grammar(served: ServedModel, chat: ChatFormat, tools: ToolPlan, reasoning: ReasoningFirst | None,
                 response_format: ResponseFormat | None = None) -> Constraint:
    """The grammar that makes the answer a call (or calls) of the allowed tools, in the model's own
    syntax, with arguments valid under each tool's `parameters` (`auto`: text may come instead,
    or before the calls; with a `response_format`, the answer that is not a call follows it).

    A tool whose function says `strict: true` is refused (400) when its `parameters` use what the
    grammar cannot enforce; any other tool's arguments are checked when the call is complete.
    `uniqueItems` in arguments is kept by a guard at decode time."""
    allowed = [tool for tool in tools.tools if tool["function"]["name"] in tools.allowed]
    check = AnswerCheck()
    unique: list[Any] = []
    for tool in allowed:
        function = tool["function"]
        parameters = function.get("parameters") or {"type": "object"}
        try:
            converted = _tool_conversion(json.dumps(parameters, ensure_ascii=False), function.get("strict") is True)
        except SchemaError as error:
            raise BadRequest(f"tools: function `{function['name']}`: {error}", param="tools") from None
        if converted.deferred or converted.unique_items:
            check.tools[function["name"]] = SchemaCheck(parameters)
        if converted.unique_items:
            unique.append(parameters)
    guard = None
    if unique:
        guard = UniqueItemsGuard.for_calls(unique, opener=chat.tool_syntax.opener, **_reasoning_markers(reasoning))
    try:
        text = chat.tool_syntax.call_grammar(allowed, parallel=tools.parallel)
    except SchemaError as error:
        raise BadRequest(f"tools: {error}", param="tools") from None
    if tools.mode == "required":
        return Constraint(compile_grammar(served, text, reasoning, param="tools"), guard, check.or_none())
    if response_format is not None:
        # auto: the calls, or an answer in the requested format (each grammar keeps its own rules;
        # the guard reads one JSON answer, so here `uniqueItems` is left to the check)
        answer = answer_grammar(response_format, reasoning, unique_items=False)
        if answer.format.deferred:
            check.content = SchemaCheck(answer.format.schema)
        text = (f"{text.rstrip()}\n{prefix_rules(answer.text, FORMAT_PREFIX).rstrip()}\n"
                f"{EITHER_ROOT} ::= root | {FORMAT_PREFIX}{answer.root}\n")
        grammar = compile_grammar(served, text, reasoning, param="response_format", root=EITHER_ROOT)
        return Constraint(grammar, guard, check.or_none())
    # auto: text, or text and then calls; once the model writes the opener, the call must be valid
    text = with_free_text_first(text, opener=chat.tool_syntax.opener)
    return Constraint(compile_grammar(served, text, reasoning, param="tools", root=OPTIONAL_ROOT), guard,
                      check.or_none())


def _reasoning_markers(reasoning: ReasoningFirst | None) -> dict[str, str | None]:
    """Where a uniqueItems guard skips the reasoning block: as the grammar writes it."""
    if reasoning is None:
        return {"reasoning_start": None, "reasoning_end": None}
    return {"reasoning_start": reasoning.start, "reasoning_end": reasoning.end + reasoning.after}


@functools.lru_cache(maxsize=256)
def _tool_conversion(parameters_json: str, strict: bool) -> SchemaGrammar:
    """A tool's `parameters` converted whole: refused when strict and unenforceable, else what the
    grammar leaves to the check (the call syntaxes convert the arguments piece by piece)."""
    parameters: Any = json.loads(parameters_json)
    return convert_schema(parameters, strict=strict, unique_items=True)
