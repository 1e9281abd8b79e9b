"""`tool_choice: auto` grammar: free text, or text and then a valid call; reasoning stays free."""

from __future__ import annotations

from grammars.reasoning_prefix import (
    OPTIONAL_ROOT,
    ROOT,
    with_free_text_first,
    with_reasoning_first,
)
from templates.tool_calls import tool_syntax_for
from tests.grammar_support import accepts as grammar_accepts
from tests.tool_schemas import TOOLS


def accepts(grammar: str, root: str, text: str) -> bool:
    return grammar_accepts(grammar, text, root)


HERMES = tool_syntax_for("no tools here")
CALLS = HERMES.call_grammar(TOOLS[:2], parallel=False)
AUTO = with_free_text_first(CALLS, opener=HERMES.opener)
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def test_plain_text_or_a_valid_call() -> None:
    assert accepts(AUTO, OPTIONAL_ROOT, "It is sunny in Paris.")
    assert accepts(AUTO, OPTIONAL_ROOT, "Let me check. " + CALL)
    assert accepts(AUTO, OPTIONAL_ROOT, CALL)


def test_once_the_opener_is_written_the_call_must_be_valid() -> None:
    assert not accepts(AUTO, OPTIONAL_ROOT, '<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>')
    assert not accepts(AUTO, OPTIONAL_ROOT, '<tool_call>\n{"name": "get_weather", "arguments": {"town": 1}}\n</tool_call>')
    assert not accepts(AUTO, OPTIONAL_ROOT, "text <tool_call> and more text")


def test_reasoning_may_mention_the_opener() -> None:
    grammar = with_reasoning_first(AUTO, start="<think>", end="</think>", inner=OPTIONAL_ROOT)
    assert accepts(grammar, ROOT, "<think>maybe a <tool_call> here</think>\n" + CALL)
    assert accepts(grammar, ROOT, "<think>no call needed</think>\nIt is sunny.")
    assert not accepts(grammar, ROOT, "<think>hm</think>\n<tool_call> oops")


def test_harmony_answer_after_optional_analysis() -> None:
    from grammars.json_schema import schema_to_gbnf

    person = schema_to_gbnf({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"],
                             "additionalProperties": False})
    answer = person + 'fireside-answer ::= "<|channel|>final<|message|>" root\n'
    grammar = with_reasoning_first(answer, start="<|channel|>analysis<|message|>", end="<|end|><|start|>assistant",
                                   inner="fireside-answer")
    final = '<|channel|>final<|message|>{"name":"Ann"}'
    assert accepts(grammar, ROOT, "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant" + final)
    assert accepts(grammar, ROOT, final)
    assert not accepts(grammar, ROOT, "<|channel|>final<|message|>Ann")
    assert not accepts(grammar, ROOT, '<|channel|>analysis<|message|>Think.<|end|>{"name":"Ann"}')
