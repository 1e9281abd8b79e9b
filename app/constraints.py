"""At most one grammar per request (DESIGN step 5): `response_format`, and tool calls forced in the
model's own syntax, compiled for the model (cached). A format that cannot be enforced exactly is
a 400, never unconstrained output instead.

When the model reasons before it answers, the grammar leaves room for that first: free text up to
the family's end-of-reasoning marker, then the constrained answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.plan import ResponseFormat, ToolPlan
from app.server.errors import BadRequest
from backends.grammar import CompiledGrammar, GrammarError
from backends.registry import ServedModel
from grammars.gbnf import literal, prefix_rules
from grammars.reasoning_prefix import (
    OPTIONAL_ROOT,
    with_free_text_first,
    with_reasoning_first,
)
from grammars.reasoning_prefix import ROOT as REASONING_ROOT
from grammars.response_format import ResponseFormatError, response_format_grammar
from grammars.schema_errors import SchemaError
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
class AnswerGrammar:
    """The grammar of a plain answer under `response_format`: its text and root rule."""

    text: str
    root: str
    what: str  # how errors name it


def answer_grammar(response_format: ResponseFormat, reasoning: ReasoningFirst | None) -> AnswerGrammar:
    """`response_format` as grammar text, after the family's answer opener when it has one (400
    for a format that cannot be enforced exactly)."""
    try:
        text = response_format_grammar(response_format.type, schema=response_format.schema,
                                       json_schema=response_format.json_schema, grammar=response_format.grammar)
    except (ResponseFormatError, SchemaError) as error:
        raise BadRequest(f"response_format: {error}", param="response_format") from None
    assert text is not None  # a plan's format is never `text`
    what = "grammar" if response_format.type == "grammar" else "generated grammar"
    if reasoning is not None and reasoning.answer_opener:
        text = f"{text.rstrip()}\n{ANSWER_ROOT} ::= {literal(reasoning.answer_opener)} root\n"
        return AnswerGrammar(text, ANSWER_ROOT, what)
    return AnswerGrammar(text, "root", what)


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
                   reasoning: ReasoningFirst | None) -> CompiledGrammar:
    """The compiled grammar of `response_format`."""
    answer = answer_grammar(response_format, reasoning)
    return compile_grammar(served, answer.text, reasoning, param="response_format", what=answer.what,
                           root=answer.root)


def call_grammar(served: ServedModel, chat: ChatFormat, tools: ToolPlan, reasoning: ReasoningFirst | None,
                 response_format: ResponseFormat | None = None) -> CompiledGrammar:
    """The grammar that makes the answer a call (or calls) of the allowed tools, in the model's own
    syntax, with arguments valid under each tool's `parameters` (`auto`: text may come instead,
    or before the calls; with a `response_format`, the answer that is not a call follows it)."""
    allowed = [tool for tool in tools.tools if tool["function"]["name"] in tools.allowed]
    try:
        text = chat.tool_syntax.call_grammar(allowed, parallel=tools.parallel)
    except SchemaError as error:
        raise BadRequest(f"tools: {error}", param="tools") from None
    if tools.mode == "required":
        return compile_grammar(served, text, reasoning, param="tools")
    if response_format is not None:
        # auto: the calls, or an answer in the requested format (each grammar keeps its own rules)
        answer = answer_grammar(response_format, reasoning)
        text = (f"{text.rstrip()}\n{prefix_rules(answer.text, FORMAT_PREFIX).rstrip()}\n"
                f"{EITHER_ROOT} ::= root | {FORMAT_PREFIX}{answer.root}\n")
        return compile_grammar(served, text, reasoning, param="response_format", root=EITHER_ROOT)
    # auto: text, or text and then calls; once the model writes the opener, the call must be valid
    text = with_free_text_first(text, opener=chat.tool_syntax.opener)
    return compile_grammar(served, text, reasoning, param="tools", root=OPTIONAL_ROOT)
