"""Tool calls: each family's syntax recognised from its template, parsed whole and streamed, and
constrained by grammars that llama.cpp's own engine checks."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from grammars.embed import embed
from grammars.json_schema import schema_to_gbnf
from templates.families import family_named
from templates.tool_calls import (
    GENERIC,
    HERMES,
    REGISTRY,
    CallDelta,
    ToolCall,
    ToolCallParser,
    tool_syntax_for,
    tool_syntax_named,
)
from tests.conftest import FIXTURES
from tests.grammar_support import accepts, compiles

OUTPUTS = Path(__file__).parent / "tool_call_outputs"

FIXTURE_SYNTAXES = {
    "Apertus-8B-Instruct.jinja": "apertus",
    "Apriel-1.6-15b-Thinker-fixed.jinja": "apriel",
    "Bielik-11B-v3.0-Instruct.jinja": "hermes",
    "ByteDance-Seed-OSS.jinja": "seed-oss",
    "Cohere2MoE.jinja": "cohere-action",
    "CohereForAI-c4ai-command-r-plus-tool_use.jinja": "command-r",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": "cohere-action",
    "GLM-4.6.jinja": "glm",
    "GigaChat3-10B-A1.8B.jinja": "gigachat3",
    "HuggingFaceTB-SmolLM3-3B.jinja": "generic",  # no call markup in the template
    "Kimi-K2-Instruct.jinja": "kimi-k2",
    "Kimi-K3.jinja": "kimi-k3",
    "LFM2-8B-A1B.jinja": "lfm2",
    "LFM2.5-8B-A1B.jinja": "lfm2",
    "MiMo-VL.jinja": "hermes",
    "MiniMax-M1.jinja": "minimax-m1",
    "MiniMax-M2.jinja": "minimax-m2",
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": "mistral",
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja": "qwen3-coder",
    "NVIDIA-Nemotron-Nano-v2.jinja": "nemotron",
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja": "hermes",
    "Qwen-QwQ-32B.jinja": "hermes",
    "Qwen-Qwen2.5-7B-Instruct.jinja": "hermes",
    "Qwen-Qwen3-0.6B.jinja": "hermes",
    "Qwen3-Coder.jinja": "qwen3-coder",
    "Reka-Edge.jinja": "hermes",
    "Spark2.5.jinja": "glm",
    "StepFun3.5-Flash.jinja": "qwen3-coder",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja": "deepseek-r1",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": "deepseek-r1",
    "deepseek-ai-DeepSeek-V3.1.jinja": "deepseek-v3.1",
    "deepseek-ai-DeepSeek-V4.jinja": "deepseek-dsml",
    "fireworks-ai-llama-3-firefunction-v2.jinja": "firefunction-v2",
    "google-gemma-2-2b-it.jinja": "generic",  # no call markup in the template
    "google-gemma-4-31B-it.jinja": "gemma-4",
    "ibm-granite-granite-3.3-2B-Instruct.jinja": "granite",
    "ibm-granite-granite-4.0.jinja": "hermes",
    "inclusionai-ling-3.0-flash.jinja": "glm",
    "llama-cpp-deepseek-r1.jinja": "deepseek-r1",
    "llama-cpp-rwkv-world.jinja": "generic",  # no call markup in the template
    "meetkai-functionary-medium-v3.1.jinja": "functionary-v3.1",
    "meetkai-functionary-medium-v3.2.jinja": "functionary-v3.2",
    "meta-llama-Llama-3.1-8B-Instruct.jinja": "llama3",
    "meta-llama-Llama-3.2-3B-Instruct.jinja": "llama3",
    "microsoft-Phi-3.5-mini-instruct.jinja": "generic",  # no call markup in the template
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja": "mistral",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": "mistral-json",
    "moonshotai-Kimi-K2.jinja": "kimi-k2",
    "muse-glimmer.jinja": "muse-glimmer",
    "openai-gpt-oss-120b.jinja": "gpt-oss",
    "openbmb-MiniCPM5-1B.jinja": "minicpm5",
    "poolside-Laguna-S-2.1.jinja": "glm",
    "poolside-Laguna-XS.2.jinja": "glm",
    "tencent-Hy3.jinja": "hy3",
    "unsloth-Apriel-1.5.jinja": "apriel",
    "upstage-Solar-Open-100B.jinja": "solar-open",
}


# ---- recognition ---------------------------------------------------------------------------------


def test_every_fixture_template_is_mapped() -> None:
    assert sorted(FIXTURE_SYNTAXES) == sorted(p.name for p in FIXTURES.glob("*.jinja"))


@pytest.mark.parametrize("fixture", sorted(FIXTURE_SYNTAXES))
def test_tool_syntax_for_fixture(fixture: str) -> None:
    assert tool_syntax_for((FIXTURES / fixture).read_text()).name == FIXTURE_SYNTAXES[fixture]


def test_unknown_template_gets_generic_written_as_hermes() -> None:
    assert tool_syntax_for("{{ messages }}") is GENERIC
    assert tool_syntax_for("") is GENERIC
    assert (GENERIC.opener, GENERIC.grammar) == (HERMES.opener, HERMES.grammar)


def test_variants_follow_the_template() -> None:
    small = tool_syntax_for((FIXTURES / "Mistral-Small-3.2-24B-Instruct-2506.jinja").read_text())
    ministral = tool_syntax_for((FIXTURES / "mistralai-Ministral-3-14B-Reasoning-2512.jinja").read_text())
    assert (small.variant, ministral.variant) == ("call-id", "")
    v4 = tool_syntax_for((FIXTURES / "deepseek-ai-DeepSeek-V4.jinja").read_text())
    assert v4.variant == "tool_calls"
    assert tool_syntax_for("{% set dsml_token = '｜DSML｜' %}function_calls").variant == "function_calls"


def test_registry_names_are_unique() -> None:
    names = [s.name for s in REGISTRY]
    assert len(names) == len(set(names))
    assert {p.stem for p in OUTPUTS.glob("*.json")} == set(names)


# ---- parsing captured outputs ----------------------------------------------------------------


def _cases() -> list[Any]:
    params = []
    for path in sorted(OUTPUTS.glob("*.json")):
        data = json.loads(path.read_text())
        for case in data["cases"]:
            params.append(pytest.param(data, case, id=f"{data['syntax']}: {case['name']}"))
    return params


def _run(parser: ToolCallParser, pieces: list[str]) -> list[str | CallDelta]:
    out: list[str | CallDelta] = []
    for piece in pieces:
        out.extend(parser.feed(piece))
    out.extend(parser.finish())
    return out


def _collect(out: list[str | CallDelta]) -> tuple[str, list[ToolCall]]:
    """The content, and the calls the deltas describe (checking that each call's first delta
    names it and the later ones carry only arguments)."""
    content = "".join(piece for piece in out if isinstance(piece, str))
    calls: dict[int, list[Any]] = {}
    for piece in out:
        if isinstance(piece, CallDelta):
            if piece.index not in calls:
                assert piece.name is not None, "a call's first delta carries its name"
                assert piece.index == len(calls), "calls are numbered in order"
                calls[piece.index] = [piece.name, piece.arguments, piece.id]
            else:
                assert piece.name is None and piece.id is None
                calls[piece.index][1] += piece.arguments
    return content, [ToolCall(name, arguments, call_id) for name, arguments, call_id in calls.values()]


def _pieces(text: str, seed: int) -> list[str]:
    rng = random.Random(seed)
    pieces, i = [], 0
    while i < len(text):
        size = rng.randint(1, 3)
        pieces.append(text[i:i + size])
        i += size
    return pieces


@pytest.mark.parametrize(("data", "case"), _cases())
def test_captured_output(data: dict[str, Any], case: dict[str, Any]) -> None:
    syntax = tool_syntax_for((FIXTURES / data["template"]).read_text())
    assert syntax.name == data["syntax"]
    names = set(data["tools"])

    parser = syntax.parser(names)
    whole = _run(parser, [case["output"]])
    content, calls = _collect(whole)
    assert content == case["content"]
    assert calls == parser.calls
    assert [c.name for c in calls] == [c["name"] for c in case["calls"]]
    # a call cut short carries its arguments as written ("partial_arguments"), else a compact JSON object
    assert [c.arguments if "partial_arguments" in e else json.loads(c.arguments)
            for c, e in zip(calls, case["calls"], strict=True)] == \
        [e.get("partial_arguments", e.get("arguments")) for e in case["calls"]]
    assert [c.id for c in calls] == [c.get("id") for c in case["calls"]]
    assert [c.cut for c in parser.calls] == [e.get("cut", "partial_arguments" in e) for e in case["calls"]]
    for call, expected in zip(calls, case["calls"], strict=True):
        if "partial_arguments" not in expected:
            assert call.arguments == json.dumps(json.loads(call.arguments), ensure_ascii=False, separators=(",", ":"))

    for seed in range(6):
        streamed = syntax.parser(names)
        assert _collect(_run(streamed, _pieces(case["output"], seed))) == (content, calls)
        assert streamed.calls == calls


# ---- streaming behaviour ---------------------------------------------------------------------


def test_content_is_held_back_only_where_an_opener_may_start() -> None:
    parser = HERMES.parser({"get_time"})
    assert parser.feed("The answer is <b>42</b> and <") == ["The answer is <b>42</b> and"]
    assert parser.feed("tool") == []
    assert parser.feed("s> are fun") == [" <tools> are fun"]
    assert parser.finish() == []


def test_json_syntax_sends_name_and_arguments_when_the_json_is_complete() -> None:
    parser = tool_syntax_named("mistral").parser({"get_weather"})
    assert parser.feed('Sure[TOOL_CALLS]get_weather[ARGS]{"city": "Par') == ["Sure"]
    assert parser.feed('is"}') == [CallDelta(0, "get_weather", ""), CallDelta(0, None, '{"city":"Paris"}')]
    assert parser.finish() == []


def test_xml_syntax_sends_the_name_first_then_each_parameter() -> None:
    parser = tool_syntax_named("qwen3-coder").parser({"get_weather"})
    assert parser.feed("<tool_call>\n<function=get_weather>\n<parameter=ci") == [CallDelta(0, "get_weather", "")]
    assert parser.feed("ty>\nParis\n</parameter>\n") == [CallDelta(0, None, '{"city":"Paris"')]
    assert parser.feed("<parameter=days>\n3\n</parameter>\n") == [CallDelta(0, None, ',"days":3')]
    assert parser.feed("</function>\n</tool_call>") == [CallDelta(0, None, "}")]
    assert parser.finish() == []
    assert parser.calls == [ToolCall("get_weather", '{"city":"Paris","days":3}', None)]


@pytest.mark.parametrize(("raw", "value"), [
    ("\n42\n", 42), ("-1.5e3", -1500.0), ("true", True), ("false", False), ("null", None),
    ('{"a": [1, 2]}', {"a": [1, 2]}), ("[1, 2]", [1, 2]), ("Paris", "Paris"), ("\n  indented\n", "  indented"),
    ('"quoted"', '"quoted"'), ("NaN", "NaN"), ("1e999", "1e999"), ("{broken", "{broken"), ("007", "007"),
])
def test_xml_values_take_their_json_type(raw: str, value: Any) -> None:
    parser = tool_syntax_named("glm").parser({"f"})
    parser.feed(f"<tool_call>f<arg_key>v</arg_key><arg_value>{raw}</arg_value></tool_call>")
    parser.finish()
    assert json.loads(parser.calls[0].arguments) == {"v": value}


@pytest.mark.parametrize("cut", ["", "<", "</", "</tool_", "</tool_call"])
def test_a_closer_cut_off_at_the_end_belongs_to_the_call(cut: str) -> None:
    """max_tokens can stop the output inside a closing tag spelled in several tokens."""
    parser = HERMES.parser({"get_time"})
    pieces = parser.feed('<tool_call>\n{"name": "get_time", "arguments": {}}\n' + cut)
    pieces += parser.finish()
    assert [p for p in pieces if isinstance(p, str)] == []
    assert parser.calls == [ToolCall("get_time", "{}", None)]


def test_text_after_a_call_that_only_looks_like_its_closer_stays_content() -> None:
    parser = HERMES.parser({"get_time"})
    pieces = parser.feed('<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_cal!')
    pieces += parser.finish()
    assert [p for p in pieces if isinstance(p, str)] == ["</tool_cal!"]


def test_nothing_is_a_call_without_tools() -> None:
    text = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
    parser = HERMES.parser(set())
    assert "".join(str(p) for p in _run(parser, [text])) == text
    assert parser.calls == []


def test_reasoning_parser_then_tool_parser() -> None:
    """GPT-OSS: the reasoning parser passes a tool message on whole; the tool parser reads it."""
    family = family_named("gpt-oss")
    raw = ('<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary '
           'to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>')
    reasoning = family.parser("<|start|>user<|message|>Weather?<|end|><|start|>assistant")
    pieces = reasoning.feed(raw) + reasoning.finish()
    content = "".join(text for kind, text in pieces if kind == "content")
    parser = tool_syntax_named("gpt-oss").parser({"get_weather"})
    assert _collect(_run(parser, [content])) == ("", [ToolCall("get_weather", '{"city":"Paris"}', None)])


def test_deeply_nested_or_huge_input_never_raises() -> None:
    for syntax in REGISTRY:
        for text in (syntax.opener + "[" * 5000, syntax.opener + "{" * 3000 + "}" * 3000,
                     syntax.opener + "[" * 3000 + "]" * 3000, syntax.opener + '"' + "x" * 2000):
            parser = syntax.parser({"f"})
            content, calls = _collect(_run(parser, [text]))
            assert calls == [] and content.strip() == text.strip(), syntax.name
        # the output ends in the third opener: a call cut short before its name, whose markup is
        # dropped (Llama 3's opener is no marker but the start of a call's JSON, nested here: content)
        parser = syntax.parser({"f"})
        content, calls = _collect(_run(parser, [syntax.opener * 3]))
        kept = 2 if syntax.opener.startswith(syntax.openers) else 3
        assert calls == [] and content.strip() == (syntax.opener * kept).strip(), syntax.name


def test_long_arguments_stream_in_linear_time() -> None:
    code = 'print("x{y}")  # \\ [z]\n' * 2000
    text = HERMES.opener + json.dumps({"name": "write", "arguments": {"code": code}}) + "</tool_call>"
    parser = HERMES.parser({"write"})
    for char in text:  # one character at a time: each feed resumes the scan where the last one stopped
        parser.feed(char)
    parser.finish()
    assert json.loads(parser.calls[0].arguments) == {"code": code}


# ---- grammars ------------------------------------------------------------------------------------

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1},
                       "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
]

# One call to get_weather(city="Paris", days=3, unit="celsius") as each model writes it.
CANONICAL = {
    "hermes": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "unit": "celsius"}}\n'
              '</tool_call>',
    "qwen3-coder": "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
                   "</parameter>\n<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>",
    "seed-oss": "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n<parameter=days>3"
                "</parameter>\n<parameter=unit>celsius</parameter>\n</function>\n</seed:tool_call>",
    "glm": "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n"
           "<arg_value>3</arg_value>\n<arg_key>unit</arg_key>\n<arg_value>celsius</arg_value>\n</tool_call>",
    "llama3": '{"name": "get_weather", "parameters": {"city": "Paris", "days": 3, "unit": "celsius"}}',
    "mistral": '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3, "unit": "celsius"}',
    "phi-4": '<|tool_call|>{"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "unit": "celsius"}}'
             '<|/tool_call|>',
    "internlm": '<|action_start|><|plugin|>\n{"name": "get_weather", "parameters": {"city": "Paris", "days": 3, '
                '"unit": "celsius"}}<|action_end|>',
    "olmo-3": '<function_calls>\nget_weather(city="Paris", days=3, unit="celsius")\n</function_calls>',
    "mistral-json": '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "unit": "celsius"}, '
                    '"id": "abc123def"}]',
    "gpt-oss": '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris", "days": 3, '
               '"unit": "celsius"}',
    "deepseek-r1": '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n'
                   '{"city": "Paris", "days": 3, "unit": "celsius"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    "deepseek-v3.1": '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris", "days": 3, '
                     '"unit": "celsius"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    "deepseek-dsml": '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" '
                     'string="true">Paris</｜DSML｜parameter>\n<｜DSML｜parameter name="days" string="false">3'
                     '</｜DSML｜parameter>\n<｜DSML｜parameter name="unit" string="true">celsius</｜DSML｜parameter>\n'
                     '</｜DSML｜invoke>\n</｜DSML｜tool_calls>',
    "kimi-k2": '<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>'
               '{"city": "Paris", "days": 3, "unit": "celsius"}<|tool_call_end|><|tool_calls_section_end|>',
    "kimi-k3": '<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="city" '
               'type="string"<|sep|>Paris<|close|>argument<|sep|><|open|>argument key="days" type="number"<|sep|>3'
               '<|close|>argument<|sep|><|open|>argument key="unit" type="string"<|sep|>celsius<|close|>argument<|sep|>'
               '<|close|>call<|sep|><|close|>tools<|sep|>',
    "minimax-m2": '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
                  '<parameter name="days">3</parameter>\n<parameter name="unit">celsius</parameter>\n</invoke>\n'
                  '</minimax:tool_call>',
    "muse-glimmer": '<atem:function_calls>\n<atem:invoke name="get_weather">\n<atem:parameter name="city">Paris'
                    '</atem:parameter>\n<atem:parameter name="days">3</atem:parameter>\n<atem:parameter name="unit">'
                    'celsius</atem:parameter>\n</atem:invoke>\n</atem:function_calls>',
    "minicpm5": '<function name="get_weather"><param name="city">Paris</param><param name="days">3</param>'
                '<param name="unit">celsius</param></function>',
    "hy3": "<tool_calls:opensource>\n<tool_call:opensource>get_weather<tool_sep:opensource>\n"
           "<arg_key:opensource>city</arg_key:opensource>\n<arg_value:opensource>Paris</arg_value:opensource>\n"
           "<arg_key:opensource>days</arg_key:opensource>\n<arg_value:opensource>3</arg_value:opensource>\n"
           "<arg_key:opensource>unit</arg_key:opensource>\n<arg_value:opensource>celsius</arg_value:opensource>\n"
           "</tool_call:opensource>\n</tool_calls:opensource>",
    "functionary-v3.1": '<function=get_weather>{"city": "Paris", "days": 3, "unit": "celsius"}</function>',
    "functionary-v3.2": '>>>get_weather\n{"city": "Paris", "days": 3, "unit": "celsius"}',
    "cohere-action": '<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": '
                     '{"city": "Paris", "days": 3, "unit": "celsius"}}\n]<|END_ACTION|>',
    "command-r": 'Action: ```json\n[\n    {"tool_name": "get_weather", "parameters": {"city": "Paris", "days": 3, '
                 '"unit": "celsius"}}\n]\n```',
    "granite": '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "unit": "celsius"}}]',
    "gemma-4": '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3,unit:<|"|>celsius<|"|>}<tool_call|>',
    "lfm2": '<|tool_call_start|>[get_weather(city="Paris", days=3, unit="celsius")]<|tool_call_end|>',
    "apriel": '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "unit": "celsius"}}]'
              '</tool_calls>',
    "nemotron": '<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "unit": "celsius"}}]'
                '</TOOLCALL>',
    "minimax-m1": '<tool_calls>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "unit": "celsius"}}\n'
                  '</tool_calls>',
    "firefunction-v2": 'functools[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "unit": "celsius"}}]',
    "apertus": '<|tools_prefix|>[{"get_weather": {"city": "Paris", "days": 3, "unit": "celsius"}}]<|tools_suffix|>',
    "gigachat3": '<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "get_weather", "arguments": {"city": "Paris", '
                 '"days": 3, "unit": "celsius"}}',
    "solar-open": '<|tool_calls|><|tool_call:begin|>c1<|tool_call:name|>get_weather<|tool_call:args|>{"city": "Paris", '
                  '"days": 3, "unit": "celsius"}<|tool_call:end|>',
}

# A second call, to get_time(), as each model writes it after the first one.
SECOND_CALL = {
    "hermes": ('</tool_call>', '</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'),
    "qwen3-coder": ("</tool_call>", "</tool_call>\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>"),
    "glm": ("</tool_call>", "</tool_call>\n<tool_call>get_time\n</tool_call>"),
    "mistral": ('"celsius"}', '"celsius"}[TOOL_CALLS]get_time[ARGS]{}'),
    "deepseek-r1": ("<｜tool▁call▁end｜>", ("<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n"
                                         "```json\n{}\n```<｜tool▁call▁end｜>")),
    "kimi-k2": ("<|tool_call_end|>", ("<|tool_call_end|><|tool_call_begin|>functions.get_time:1"
                                      "<|tool_call_argument_begin|>{}<|tool_call_end|>")),
    "deepseek-dsml": ("</｜DSML｜invoke>", '</｜DSML｜invoke>\n<｜DSML｜invoke name="get_time">\n</｜DSML｜invoke>'),
    "gemma-4": ("<tool_call|>", "<tool_call|><|tool_call>call:get_time{}<tool_call|>"),
    "lfm2": (')]', '), get_time()]'),
    "granite": ('}}]', '}}, {"name": "get_time", "arguments": {}}]'),
    "minimax-m2": ("</invoke>", '</invoke>\n<invoke name="get_time">\n</invoke>'),
    "cohere-action": ('}}\n]', '}},\n    {"tool_call_id": "1", "tool_name": "get_time", "parameters": {}}\n]'),
}


def _grammar(name: str, parallel: bool = False) -> str:
    return tool_syntax_named(name).call_grammar(TOOLS, parallel=parallel)


@pytest.mark.parametrize("name", [s.name for s in REGISTRY])
def test_call_grammar_accepts_the_model_s_own_call(name: str) -> None:
    syntax = tool_syntax_named(name)
    grammar = syntax.call_grammar(TOOLS, parallel=False)
    compiles(grammar)
    text = CANONICAL[name]
    assert text.startswith(syntax.opener)
    assert accepts(grammar, text)
    # what the grammar lets through, the parser reads as the call
    parser = syntax.parser({"get_weather", "get_time"})
    assert _collect(_run(parser, [text])) == ("", [
        ToolCall("get_weather", '{"city":"Paris","days":3,"unit":"celsius"}', parser.calls[0].id)])


@pytest.mark.parametrize("name", [s.name for s in REGISTRY])
def test_call_grammar_rejects_wrong_names_and_arguments(name: str) -> None:
    grammar = _grammar(name)
    text = CANONICAL[name]
    assert not accepts(grammar, text.replace("get_weather", "get_wether")), "unknown tool"
    assert not accepts(grammar, text.replace("3", "0")), "days below its minimum"
    assert not accepts(grammar, text.replace("3", "three").replace('"three"', "three")), "days not an integer"
    assert not accepts(grammar, text.replace("celsius", "kelvin")), "unit outside its enum"
    without_city = text.replace("city", "town")
    assert not accepts(grammar, without_city), "the required city is missing"


@pytest.mark.parametrize("name", sorted(SECOND_CALL))
def test_parallel_calls_only_when_asked(name: str) -> None:
    old, new = SECOND_CALL[name]
    text = CANONICAL[name].replace(old, new, 1)
    assert accepts(_grammar(name, parallel=True), text)
    assert not accepts(_grammar(name, parallel=False), text)
    assert accepts(_grammar(name, parallel=True), CANONICAL[name])
    parser = tool_syntax_named(name).parser({"get_weather", "get_time"})
    _run(parser, [text])
    assert [c.name for c in parser.calls] == ["get_weather", "get_time"]


def test_muse_grammar_may_name_the_recipient_first() -> None:
    grammar = _grammar("muse-glimmer")
    assert accepts(grammar, " to=get_weather<|message|>" + CANONICAL["muse-glimmer"])
    assert not accepts(grammar, " to=user<|message|>" + CANONICAL["muse-glimmer"])


def test_grammar_for_a_tool_without_parameters() -> None:
    tools = [{"type": "function", "function": {"name": "ping"}}]
    assert accepts(HERMES.call_grammar(tools, parallel=False), '<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>')
    glm = tool_syntax_named("glm").call_grammar(tools, parallel=False)
    assert accepts(glm, "<tool_call>ping\n<arg_key>anything</arg_key>\n<arg_value>goes</arg_value>\n</tool_call>")


def test_embed_prefixes_every_rule() -> None:
    rules, root = embed(schema_to_gbnf({"type": "object", "properties": {"a": {"type": "string"}}}), "t1-")
    assert root == "t1-root"
    names = [line.split(" ::= ")[0] for line in rules.splitlines()]
    assert all(name.startswith("t1-") for name in names)
    compiles(f"root ::= {root} | \"x\"\n{rules}\n")


# ---- calls cut short -----------------------------------------------------------------------------

# The output ends (max_tokens, a stop sequence) inside a call: the call stands, with its arguments as
# far as they were written, and its markup never reaches the content.

CUT_ARGUMENTS = '{"city": "Paris", "days": 3, "unit": "celsius"}'  # as the JSON syntaxes write them
WHOLE_ARGUMENTS = {"city": "Paris", "days": 3, "unit": "celsius"}


def _read_cut(name: str, text: str, seed: int | None = None) -> tuple[str, list[ToolCall]]:
    parser = tool_syntax_named(name).parser({"get_weather", "get_time"})
    content, calls = _collect(_run(parser, [text] if seed is None else _pieces(text, seed)))
    assert calls == parser.calls
    return content, parser.calls


def _is_a_start_of(arguments: dict[str, Any], whole: dict[str, Any]) -> bool:
    """The parameters of a call cut short: the first ones of the whole call, in order, the last
    one maybe as far as it was written."""
    keys = list(arguments)
    if keys != list(whole)[:len(keys)]:
        return False
    *done, last = keys or [None]
    if any(arguments[k] != whole[k] for k in done):
        return False
    return last is None or arguments[last] == whole[last] or (
        isinstance(arguments[last], str) and str(whole[last]).startswith(arguments[last]))


@pytest.mark.parametrize("name", sorted(CANONICAL))
def test_a_call_cut_anywhere_is_the_call_as_far_as_it_was_written(name: str) -> None:
    """Every syntax, cut after every character of its call from the end of its opener on (an opener
    cut short may be prose): no content ever; no call until the name is written whole; then the
    call, marked cut, its arguments the text written so far where the syntax writes JSON, else the
    parameters read so far; the whole text is the whole call."""
    syntax, text = tool_syntax_named(name), CANONICAL[name]
    name_end = text.index("get_weather") + len("get_weather")
    json_text = CUT_ARGUMENTS in text
    arguments_start = text.index(CUT_ARGUMENTS) if json_text else -1
    seen_call = False
    for end in range(len(syntax.opener) if syntax.opener.startswith(syntax.openers) else 1, len(text)):
        cut = text[:end]
        content, calls = _read_cut(name, cut)
        assert content == "", (cut, content)
        assert _read_cut(name, cut, seed=end) == (content, calls), cut  # however it streams
        if end < name_end:
            assert calls == [], cut
            continue
        if end > name_end:
            assert calls, cut  # the name is whole once its delimiter is written
        if not calls:
            continue
        seen_call = True
        [call] = calls
        assert call.name == "get_weather", cut
        if json_text and arguments_start < end < arguments_start + len(CUT_ARGUMENTS):
            assert (call.arguments, call.cut) == (cut[arguments_start:], True), cut
        elif json_text and end <= arguments_start:
            assert (call.arguments, call.cut) == ("", True), cut
        elif json_text:  # the arguments are whole: only the markup after them was cut
            assert (json.loads(call.arguments), call.cut) == (WHOLE_ARGUMENTS, False), cut
        else:
            assert _is_a_start_of(json.loads(call.arguments), WHOLE_ARGUMENTS), (cut, call.arguments)
    assert seen_call
    content, calls = _read_cut(name, text)
    assert content == "" and [(c.name, json.loads(c.arguments), c.cut) for c in calls] == [
        ("get_weather", WHOLE_ARGUMENTS, False)]


def test_a_cut_call_in_hermes_json_carries_the_arguments_text_as_written() -> None:
    text = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa'
    content, calls = _read_cut("hermes", text)
    assert content == "Let me check."
    assert calls == [ToolCall("get_weather", '{"city": "Pa', None)] and calls[0].cut
    parser = HERMES.parser({"get_weather"})  # the deltas: the name, then the arguments, at the end
    assert parser.feed(text) == ["Let me check."]
    assert parser.finish() == [CallDelta(0, "get_weather", ""), CallDelta(0, None, '{"city": "Pa')]


def test_arguments_written_as_a_json_string_are_decoded_as_far_as_they_go() -> None:
    content, calls = _read_cut("hermes", '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"P\\u00e')
    assert (content, calls[0].arguments, calls[0].cut) == ("", '{"city": "P', True)


def test_calls_written_whole_come_before_the_one_cut_short() -> None:
    content, calls = _read_cut("hermes", '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>\n'
                                         '<tool_call>\n{"name": "get_weather", "arguments": {"ci')
    assert content == "" and calls == [ToolCall("get_time", "{}", None), ToolCall("get_weather", '{"ci', None)]
    assert [c.cut for c in calls] == [False, True]
    content, calls = _read_cut("mistral-json", '[TOOL_CALLS][{"name": "get_time", "arguments": {}}, '
                                               '{"name": "get_weather", "arguments": {"city": "Ro')
    assert content == "" and [(c.name, c.arguments, c.cut) for c in calls] == [
        ("get_time", "{}", False), ("get_weather", '{"city": "Ro', True)]
    # a second call cut before its name: the first stands, the rest of the markup is dropped
    content, calls = _read_cut("qwen3-coder", "<tool_call>\n<function=get_time>\n</function>\n</tool_call>\n"
                                              "<tool_call>\n<function=get_wea")
    assert content == "" and [(c.name, c.arguments, c.cut) for c in calls] == [("get_time", "{}", False)]


@pytest.mark.parametrize(("name", "text"), [
    ("deepseek-v3.1", '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{}<｜tool▁call▁e'),
    ("kimi-k2", "<|tool_call_begin|>functions.get_time:0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_ca"),
    ("apriel", '<tool_calls>[{"name": "get_time", "arguments": {}}]</tool_cal'),
    ("minimax-m2", '<minimax:tool_call>\n<invoke name="get_time">\n</invoke>\n</minimax:tool'),
    ("gemma-4", "<|tool_call>call:get_time{}<tool_ca"),
])
def test_output_cut_in_the_markup_that_closes_a_whole_call(name: str, text: str) -> None:
    content, calls = _read_cut(name, text)
    assert content == "" and [(c.name, c.arguments, c.cut) for c in calls] == [("get_time", "{}", False)]


@pytest.mark.parametrize(("name", "text", "content"), [
    # the output ends in an opener (or a call's name so far): a call cut before its name, dropped
    ("hermes", "Checking <tool_call>", "Checking"),
    ("hermes", 'Sure.\n<tool_call>\n{"name": "get_we', "Sure."),
    ("qwen3-coder", "<tool_call>\n<function=get_", ""),
    ("mistral", "[TOOL_CALLS]get_w", ""),
    # ... unless what was written of the name is no tool's, or names none: content, as a whole one
    ("hermes", '<tool_call>\n{"name": "send_em', '<tool_call>\n{"name": "send_em'),
    ("hermes", '<tool_call>\n{"name": "send_email", "arguments": {"to', '<tool_call>\n{"name": "send_email", "arguments": {"to'),
    ("qwen3-coder", "<tool_call>\n<function=rm_r", "<tool_call>\n<function=rm_r"),
    ("mistral", "[TOOL_CALLS]order_pizza[ARGS]{", "[TOOL_CALLS]order_pizza[ARGS]{"),
    ("llama3", '{"name": "Alice", "age": 3', '{"name": "Alice", "age": 3'),  # an answer in JSON
    ("lfm2", '<|tool_call_start|>[print("hi', '<|tool_call_start|>[print("hi'),
    # ... or what follows the opener cannot be a call
    ("hermes", "The <tool_call> tag wraps a call", "The <tool_call> tag wraps a call"),
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": [1, ', '<tool_call>\n{"name": "get_weather", "arguments": [1, '),
])
def test_what_a_cut_leaves_of_a_call_that_is_not_known(name: str, text: str, content: str) -> None:
    assert _read_cut(name, text) == (content, [])


def test_nothing_cut_short_is_a_call_without_tools() -> None:
    text = '<tool_call>\n{"name": "get_time", "arguments": {"a'
    parser = HERMES.parser(set())
    assert "".join(str(p) for p in _run(parser, [text])) == text and parser.calls == []
