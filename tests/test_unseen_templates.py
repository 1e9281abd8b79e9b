"""Held-out templates: real chat templates of families the recognition rules were not written from.

`fixtures/chat-templates-unseen/` was gathered (with its README: sources, licences, and what each
model writes, from the template text or its documentation) after the cue rules of
`templates.cues` and the generic fallback were written, by someone who had not seen the rules.
On first contact 10 of the 15 were read whole; what the other five showed was then added (the
`/no_think` words of Nemotron Super, the Phi-4-mini, InternLM and OLMo 3 call syntaxes) and two
are still read as plain content (`NOT_READ`). Each template must render, read its model's
reasoning apart from the answer, read its model's calls, and honour effort "none" where the
template or its words can switch reasoning off.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from templates.chat_format import ChatFormat
from templates.reasoning import normalize_reasoning

UNSEEN = Path(__file__).parent / "fixtures" / "chat-templates-unseen"
ROME = {"city": "Rome"}
JSON_CALL = '{"name": "get_weather", "arguments": {"city": "Rome"}}'

# file: (the reasoning markers the model writes or None, one call as the model writes it)
EXPECTED: dict[str, tuple[tuple[str, str] | None, str]] = {
    "Kimi-K2-Thinking.jinja": (("<think>", "</think>"), (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
        '{"city": "Rome"}<|tool_call_end|><|tool_calls_section_end|>')),
    "Llama-3.3-Nemotron-Super-49B-v1.5.jinja": (("<think>", "</think>"), f"<TOOLCALL>[{JSON_CALL}]</TOOLCALL>"),
    "Hermes-3-Llama-3.1.jinja": (None, f"<tool_call>\n{JSON_CALL}\n</tool_call>"),
    "Devstral-Small-2507.jinja": (None, '[TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}'),
    "LFM2.5-Instruct.jinja": (("<think>", "</think>"), "<|tool_call_start|>[get_weather(city='Rome')]<|tool_call_end|>"),
    "GLM-4.7-Flash.jinja": (("<think>", "</think>"),
                            "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome</arg_value></tool_call>"),
    "GLM-4.5.jinja": (("<think>", "</think>"),
                      "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Rome</arg_value>\n</tool_call>"),
    "DeepSeek-V3.2.jinja": (("<think>", "</think>"), (
        '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" '
        'string="true">Rome</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>')),
    "Phi-4-mini-instruct.jinja": (None, f"<|tool_call|>{JSON_CALL}<|/tool_call|>"),
    "Hunyuan-A13B.jinja": (("<think>", "</think>"), f"<tool_calls>[{JSON_CALL}]</tool_calls>"),
    "OLMo-3-Instruct.jinja": (None, "<function_calls>\nget_weather(city='Rome')\n</function_calls>"),
    "InternLM2.5-tool.jinja": (None, (
        '<|action_start|><|plugin|>\n{"name": "get_weather", "parameters": {"city": "Rome"}}<|action_end|>')),
    "EXAONE-4.0.jinja": (("<think>", "</think>"), f"<tool_call>{JSON_CALL}</tool_call>"),
}
# Read as plain content, with the reason (left alone, see the closing note):
NOT_READ = {
    # calls as a bare Python list at the start of the answer, with no markup to tell them from text
    "Llama-4-pythonic.jinja": "[get_weather(city='Rome')]",
    # reasoning is a turn of its own (`assistant/think`) and calls a turn to `tool/function_call`
    "HyperCLOVAX-SEED-Think-14B.jinja": "-> tool/function_call\n[" + JSON_CALL + "]",
}
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}},
                       "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "description": "The time now.",
                                      "parameters": {"type": "object", "properties": {}}}},
]
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Rome?"}]


def chat_format(name: str) -> ChatFormat:
    return ChatFormat((UNSEEN / name).read_text(encoding="utf-8"), bos_token="<s>", eos_token="</s>")


def test_every_unseen_template_is_listed() -> None:
    assert sorted(p.name for p in UNSEEN.glob("*.jinja")) == sorted([*EXPECTED, *NOT_READ])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_unseen_template_is_read(name: str) -> None:
    markers, call = EXPECTED[name]
    chat = chat_format(name)
    prompt = chat.render(MESSAGES, tools=TOOLS)
    assert "Weather in Rome?" in prompt and "get_weather" in prompt
    output = f"{markers[0]}\nThe user wants the weather.\n{markers[1]}\n\n{call}" if markers else call
    if markers and chat.family.opens_reasoning(prompt):
        output = output.removeprefix(markers[0])  # the prompt already opened the block
    message = chat.parse(prompt, output, {"get_weather", "get_time"})
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]] == [
        ("get_weather", ROME)], (chat.tool_syntax.name, message)
    assert message["content"] is None, message
    if markers is None:
        assert not chat.family.reasons
        return
    assert (chat.family.reasoning_start, chat.family.reasoning_end) == markers
    assert message["reasoning_content"] == "The user wants the weather."
    answer = chat.parse(prompt, output.replace(call, "It is sunny."))
    assert (answer["content"], answer["reasoning_content"]) == ("It is sunny.", "The user wants the weather.")


@pytest.mark.parametrize("name", sorted(n for n, (markers, _) in EXPECTED.items() if markers))
def test_unseen_reasoning_can_be_switched_off(name: str) -> None:
    chat = chat_format(name)
    off = chat.render(MESSAGES, normalize_reasoning("none", None, None))
    on = chat.render(MESSAGES, normalize_reasoning("high", None, None))
    assert chat.family.closes_reasoning(off), off[-80:]
    start = chat.family.reasoning_start or ""
    assert start * 2 not in off.replace("\n", ""), off[-80:]  # one block, not one opened twice
    assert not chat.family.closes_reasoning(on), on[-80:]


@pytest.mark.parametrize("name", sorted(NOT_READ))
def test_unread_syntaxes_stay_content_verbatim(name: str) -> None:
    chat = chat_format(name)
    prompt = chat.render(MESSAGES, tools=TOOLS)
    message = chat.parse(prompt, NOT_READ[name], {"get_weather"})
    assert message["tool_calls"] == [] and message["content"] == NOT_READ[name]
