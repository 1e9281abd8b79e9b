"""`tools` / `tool_choice` / `functions` / `function_call` normalized into one plan (no model)."""

from __future__ import annotations

import json

import pytest

from app.api.common.decode import decode_body
from app.api.fireworks.requests import ChatCompletionRequest
from app.api.fireworks.tools import tool_plan
from app.pipeline.errors import BadRequest

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get-time"}}


def plan(**fields):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}
    return tool_plan(decode_body(json.dumps(body).encode(), ChatCompletionRequest))


def test_no_tools_no_plan() -> None:
    assert plan() is None
    assert plan(tool_choice="none") is None


@pytest.mark.parametrize(("choice", "mode", "allowed"), [
    ("auto", "auto", ("get_weather", "get-time")),
    ("none", "none", ("get_weather", "get-time")),
    ("required", "required", ("get_weather", "get-time")),
    ("any", "required", ("get_weather", "get-time")),
    ({"type": "function", "function": {"name": "get-time"}}, "required", ("get-time",)),
    ({"type": "function", "name": "get-time"}, "required", ("get-time",)),
    ({"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
        {"type": "function", "function": {"name": "get_weather"}}]}}, "required", ("get_weather",)),
    ({"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "get-time"}]},
     "auto", ("get-time",)),
])
def test_tool_choice_forms(choice, mode, allowed) -> None:
    result = plan(tools=[WEATHER, TIME], tool_choice=choice)
    assert (result.mode, result.allowed) == (mode, allowed)
    assert [t["function"]["name"] for t in result.tools] == ["get_weather", "get-time"]  # the prompt keeps all
    assert result.parallel == (choice.get("type") != "function" if isinstance(choice, dict) else True)


def test_deprecated_functions_map_onto_tools() -> None:
    result = plan(functions=[WEATHER["function"]], function_call={"name": "get_weather"}, parallel_tool_calls=False)
    assert (result.mode, result.allowed, result.parallel) == ("required", ("get_weather",), False)
    assert result.tools == [WEATHER]
    assert plan(functions=[WEATHER["function"]], function_call="none").mode == "none"


@pytest.mark.parametrize(("fields", "words"), [
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}}, "'nope'"),
    ({"tools": [WEATHER], "tool_choice": {"type": "allowed_tools", "allowed_tools": {
        "mode": "auto", "tools": [{"type": "function", "function": {"name": "nope"}}]}}}, "'nope'"),
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "bad name!"),
    ({"tools": [{"type": "function", "function": {"name": "x" * 65}}]}, "64"),
    ({"tools": [WEATHER, WEATHER]}, "two tools"),
    ({"tool_choice": "required"}, "needs `tools`"),
    ({"tools": [WEATHER], "functions": [WEATHER["function"]]}, "not both"),
    ({"functions": [WEATHER["function"]], "tool_choice": "required", "function_call": "auto"}, "not both"),
])
def test_contradictions_are_400(fields, words) -> None:
    with pytest.raises(BadRequest) as caught:
        plan(**fields)
    assert words in str(caught.value)


def test_mistral_ids_are_nine_characters_and_pair_up() -> None:
    from templates.tool_calls import tool_syntax_named

    messages = [{"role": "assistant", "content": "", "tool_calls": [{"id": "call_abc123xyz", "type": "function",
                                                                      "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "call_abc123xyz", "content": "1"},
                {"role": "tool", "tool_call_id": "abcDEF123", "content": "2"}]
    short = tool_syntax_named("mistral").history(messages)
    call_id = short[0]["tool_calls"][0]["id"]
    assert len(call_id) == 9 and call_id.isalnum() and short[1]["tool_call_id"] == call_id
    assert short[2]["tool_call_id"] == "abcDEF123"
    assert messages[0]["tool_calls"][0]["id"] == "call_abc123xyz"  # the request's data is left alone


def test_tool_parameters_nesting_past_the_schema_limit_are_a_400():
    """Rendering walks the tools recursively: 600 levels would overflow the stack (a 500)."""
    from app.pipeline.errors import BadRequest
    from app.pipeline.plan import ToolPlan

    deep: dict = {}
    node = deep
    for _ in range(600):
        node["a"] = {}
        node = node["a"]
    with pytest.raises(BadRequest, match=r"tools\[0\]\.function\.parameters nests deeper than 64 levels"):
        ToolPlan([{"type": "function", "function": {"name": "f", "parameters": deep}}], "auto", ("f",), True)
