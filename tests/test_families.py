"""Model families: recognition, reasoning variables, history, prompts, and parsing of their outputs."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from templates.chat_template import ChatTemplate, TemplateRenderError
from templates.families import (
    GENERIC,
    REGISTRY,
    ChatFamily,
    family_for,
    family_named,
    strip_reasoning,
)
from templates.reasoning import (
    DEFAULT_BUDGET_END,
    ReasoningError,
    ReasoningRequest,
    ThinkingControl,
    normalize_reasoning,
)
from templates.reasoning_parser import ReasoningParser
from tests.conftest import FIXTURES

OUTPUTS = Path(__file__).parent / "reasoning_outputs"

FIXTURE_FAMILIES = {
    "Apertus-8B-Instruct.jinja": "apertus",
    "Apriel-1.6-15b-Thinker-fixed.jinja": "apriel-1.6",
    "Bielik-11B-v3.0-Instruct.jinja": "bielik",
    "ByteDance-Seed-OSS.jinja": "seed-oss",
    "Cohere2MoE.jinja": "cohere2",
    "CohereForAI-c4ai-command-r-plus-tool_use.jinja": "generic",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": "command-r7b",
    "GLM-4.6.jinja": "glm-4.6",
    "GigaChat3-10B-A1.8B.jinja": "generic",
    "HuggingFaceTB-SmolLM3-3B.jinja": "smollm3",
    "Kimi-K2-Instruct.jinja": "kimi-k2",
    "Kimi-K3.jinja": "kimi-k3",
    "LFM2-8B-A1B.jinja": "generic",
    "LFM2.5-8B-A1B.jinja": "lfm2.5",
    "MiMo-VL.jinja": "mimo",
    "MiniMax-M1.jinja": "minimax-m1",
    "MiniMax-M2.jinja": "minimax-m2",
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": "generic",
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja": "nemotron-3",
    "NVIDIA-Nemotron-Nano-v2.jinja": "nemotron-nano-v2",
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja": "generic",
    "Qwen-QwQ-32B.jinja": "qwq",
    "Qwen-Qwen2.5-7B-Instruct.jinja": "generic",
    "Qwen-Qwen3-0.6B.jinja": "qwen3",
    "Qwen3-Coder.jinja": "qwen3-coder",
    "Reka-Edge.jinja": "reka",
    "Spark2.5.jinja": "spark",
    "StepFun3.5-Flash.jinja": "stepfun",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja": "deepseek-r1",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": "deepseek-r1",
    "deepseek-ai-DeepSeek-V3.1.jinja": "deepseek-v3.1",
    "deepseek-ai-DeepSeek-V4.jinja": "deepseek-v4",
    "fireworks-ai-llama-3-firefunction-v2.jinja": "generic",
    "google-gemma-2-2b-it.jinja": "generic",
    "google-gemma-4-31B-it.jinja": "gemma-4",
    "ibm-granite-granite-3.3-2B-Instruct.jinja": "granite-3.3",
    "ibm-granite-granite-4.0.jinja": "generic",
    "inclusionai-ling-3.0-flash.jinja": "ling",
    "llama-cpp-deepseek-r1.jinja": "deepseek-r1",
    "llama-cpp-rwkv-world.jinja": "rwkv-world",
    "meetkai-functionary-medium-v3.1.jinja": "generic",
    "meetkai-functionary-medium-v3.2.jinja": "generic",
    "meta-llama-Llama-3.1-8B-Instruct.jinja": "generic",
    "meta-llama-Llama-3.2-3B-Instruct.jinja": "generic",
    "microsoft-Phi-3.5-mini-instruct.jinja": "generic",
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja": "ministral-reasoning",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": "generic",
    "moonshotai-Kimi-K2.jinja": "kimi-k2",
    "muse-glimmer.jinja": "muse-glimmer",
    "openai-gpt-oss-120b.jinja": "gpt-oss",
    "openbmb-MiniCPM5-1B.jinja": "minicpm5",
    "poolside-Laguna-S-2.1.jinja": "laguna-s",
    "poolside-Laguna-XS.2.jinja": "laguna-xs",
    "tencent-Hy3.jinja": "hy3",
    "unsloth-Apriel-1.5.jinja": "apriel-1.5",
    "upstage-Solar-Open-100B.jinja": "solar-open",
}
REASONING_FAMILIES = [f for f in REGISTRY if f.reasons]


def source(fixture: str) -> str:
    return (FIXTURES / fixture).read_text(encoding="utf-8")


def request(effort: object = None, *, history: str | None = None, **thinking: Any) -> ReasoningRequest:
    config = ThinkingControl(**thinking) if thinking else None
    return normalize_reasoning(effort, config, history)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- recognition


def test_every_fixture_is_listed() -> None:
    assert sorted(p.name for p in FIXTURES.glob("*.jinja")) == sorted(FIXTURE_FAMILIES)


@pytest.mark.parametrize(("fixture", "name"), sorted(FIXTURE_FAMILIES.items()))
def test_family_for_fixture(fixture: str, name: str) -> None:
    assert family_for(source(fixture)).name == name


def test_registry_names_are_unique_and_every_reasoning_family_has_outputs() -> None:
    names = [family.name for family in REGISTRY]
    assert len(names) == len(set(names))
    assert set(FIXTURE_FAMILIES.values()) <= {*names, "generic"}
    for family in REASONING_FAMILIES:
        assert (OUTPUTS / f"{family.name}.json").is_file(), family.name
        assert family.budget_close, family.name


def test_unknown_template_is_generic() -> None:
    assert family_for("{{ messages }}") is GENERIC
    assert family_named("generic") is GENERIC
    with pytest.raises(KeyError):
        family_named("no-such-family")


# ---------------------------------------------------------------------------------------------- variables

T, F = True, False
# family: variables for effort (not given, "none", "low", "high", 2048 tokens); a string is the expected error.
VARIABLES: dict[str, tuple[Any, Any, Any, Any, Any]] = {
    "qwen3": ({"enable_thinking": T}, {"enable_thinking": F}, {"enable_thinking": T}, {"enable_thinking": T},
              {"enable_thinking": T}),
    "qwq": ({"enable_thinking": T}, {"enable_thinking": F}, {"enable_thinking": T}, {"enable_thinking": T},
            {"enable_thinking": T}),
    "deepseek-r1": ({"enable_thinking": T}, {"enable_thinking": F}, {"enable_thinking": T}, {"enable_thinking": T},
                    {"enable_thinking": T}),
    "deepseek-v3.1": ({"thinking": F}, {"thinking": F}, {"thinking": T}, {"thinking": T}, {"thinking": T}),
    "deepseek-v4": ({"thinking": T, "reasoning_effort": "high"}, {"thinking": F, "reasoning_effort": "none"},
                    {"thinking": T, "reasoning_effort": "high"}, {"thinking": T, "reasoning_effort": "high"},
                    {"thinking": T, "reasoning_effort": "high"}),
    "gpt-oss": ({"reasoning_effort": "medium"}, "Invalid reasoning effort: none", {"reasoning_effort": "low"},
                {"reasoning_effort": "high"}, "Invalid reasoning effort: 2048"),
    "muse-glimmer": ({"reasoning_strength": "high"}, {"reasoning_strength": "low"}, {"reasoning_strength": "low"},
                     {"reasoning_strength": "high"}, {"reasoning_strength": "medium"}),
    "glm-4.6": ({"enable_thinking": T}, {"enable_thinking": F}, {"enable_thinking": T}, {"enable_thinking": T},
                {"enable_thinking": T}),
    "granite-3.3": ({"thinking": F}, {"thinking": F}, {"thinking": T}, {"thinking": T}, {"thinking": T}),
    "smollm3": ({"enable_thinking": T}, {"enable_thinking": F}, {"enable_thinking": T}, {"enable_thinking": T},
                {"enable_thinking": T}),
    "ministral-reasoning": ({}, {}, {}, {}, {}),
    "seed-oss": ({"thinking_budget": -1}, {"thinking_budget": 0}, {"thinking_budget": -1}, {"thinking_budget": -1},
                 {"thinking_budget": 2048}),
    "cohere2": ({"reasoning": T}, {"reasoning": F}, {"reasoning": T}, {"reasoning": T}, {"reasoning": T}),
    "command-r7b": ({"enable_thinking": F}, {"enable_thinking": F}, {"enable_thinking": T}, {"enable_thinking": T},
                    {"enable_thinking": T}),
    "minimax-m2": ({}, "Invalid reasoning effort: none", {}, {}, "Invalid reasoning effort: 2048"),
    "minimax-m1": ({}, {}, {}, {}, {}),
    "kimi-k3": ({"thinking": T, "thinking_effort": "max"}, {"thinking": F, "thinking_effort": None},
                {"thinking": T, "thinking_effort": "low"}, {"thinking": T, "thinking_effort": "high"},
                {"thinking": T, "thinking_effort": "high"}),
    "apriel-1.6": ({}, {}, {}, {}, {}),
    "apriel-1.5": ({}, {}, {}, {}, {}),
    "gemma-4": ({"enable_thinking": F}, {"enable_thinking": F}, {"enable_thinking": T}, {"enable_thinking": T},
                {"enable_thinking": T}),
    "nemotron-3": ({"enable_thinking": T}, {"enable_thinking": F}, {"enable_thinking": T}, {"enable_thinking": T},
                   {"enable_thinking": T}),
    "nemotron-nano-v2": ({}, {}, {}, {}, {}),
    "lfm2.5": ({}, {}, {}, {}, {}),
    "hy3": ({"reasoning_effort": "no_think"}, {"reasoning_effort": "no_think"}, {"reasoning_effort": "low"},
            {"reasoning_effort": "high"}, {"reasoning_effort": "high"}),
    "laguna-s": ({"enable_thinking": T}, {"enable_thinking": F}, {"enable_thinking": T}, {"enable_thinking": T},
                 {"enable_thinking": T}),
    "laguna-xs": ({"enable_thinking": F}, {"enable_thinking": F}, {"enable_thinking": T}, {"enable_thinking": T},
                  {"enable_thinking": T}),
    "ling": ({"enable_thinking": T}, {"enable_thinking": F}, {"enable_thinking": T}, {"enable_thinking": T},
             {"enable_thinking": T}),
    "solar-open": ({"reasoning_effort": "high"}, {"reasoning_effort": "minimal"}, {"reasoning_effort": "low"},
                   {"reasoning_effort": "high"}, {"reasoning_effort": "high"}),
    "spark": ({"enable_thinking": T}, {"enable_thinking": F}, {"enable_thinking": T}, {"enable_thinking": T},
              {"enable_thinking": T}),
    "stepfun": ({}, {}, {}, {}, {}),
    "mimo": ({}, {}, {}, {}, {}),
    "minicpm5": ({"enable_thinking": None}, {"enable_thinking": F}, {"enable_thinking": T}, {"enable_thinking": T},
                 {"enable_thinking": T}),
    "reka": ({"enable_thinking": F}, {"enable_thinking": F}, {"enable_thinking": T}, {"enable_thinking": T},
             {"enable_thinking": T}),
    "bielik": ({"enable_thinking": F}, {"enable_thinking": F}, {"enable_thinking": T}, {"enable_thinking": T},
               {"enable_thinking": T}),
    "apertus": ({"enable_thinking": F}, {"enable_thinking": F}, {"enable_thinking": T}, {"enable_thinking": T},
                {"enable_thinking": T}),
    "rwkv-world": ({"enable_thinking": None}, {"enable_thinking": F}, {"enable_thinking": T},
                   {"enable_thinking": T}, {"enable_thinking": T}),
}
EFFORTS = (None, "none", "low", "high", 2048)
MESSAGES = [{"role": "user", "content": "What is 2+2?"}]


def test_variables_table_covers_every_reasoning_family() -> None:
    assert sorted(VARIABLES) == sorted(f.name for f in REASONING_FAMILIES)


@pytest.mark.parametrize("name", sorted(VARIABLES))
@pytest.mark.parametrize("position", range(len(EFFORTS)))
def test_variables(name: str, position: int) -> None:
    family, expected = family_named(name), VARIABLES[name][position]
    wanted = request(EFFORTS[position])
    if isinstance(expected, str):
        with pytest.raises(ReasoningError, match=expected) as caught:
            family.prepare(MESSAGES, wanted)
        assert caught.value.param == "reasoning_effort"
    else:
        assert family.prepare(MESSAGES, wanted)[1] == expected


@pytest.mark.parametrize(("name", "effort", "expected"), [
    ("deepseek-v4", "medium", {"thinking": T, "reasoning_effort": "high"}),
    ("deepseek-v4", "xhigh", {"thinking": T, "reasoning_effort": "max"}),
    ("deepseek-v4", "max", {"thinking": T, "reasoning_effort": "max"}),
    ("kimi-k3", "medium", {"thinking": T, "thinking_effort": "high"}),
    ("kimi-k3", "xhigh", {"thinking": T, "thinking_effort": "max"}),
    ("hy3", "medium", {"reasoning_effort": "high"}),
    ("gpt-oss", "medium", {"reasoning_effort": "medium"}),
    ("gpt-oss", True, {"reasoning_effort": "medium"}),
    ("qwen3", False, {"enable_thinking": F}),
    ("solar-open", "medium", {"reasoning_effort": "high"}),
])
def test_more_efforts(name: str, effort: object, expected: dict[str, Any]) -> None:
    assert family_named(name).prepare(MESSAGES, request(effort))[1] == expected


@pytest.mark.parametrize("family", REASONING_FAMILIES, ids=lambda f: f.name)
def test_adaptive_is_refused_by_every_family_here(family: ChatFamily) -> None:
    with pytest.raises(ReasoningError, match="Invalid reasoning effort: adaptive") as caught:
        family.prepare(MESSAGES, request(None, type="adaptive"))
    assert caught.value.param == "thinking"


@pytest.mark.parametrize(("name", "wanted", "message", "param"), [
    ("gpt-oss", request(False), "Invalid reasoning effort: none", "reasoning_effort"),
    ("gpt-oss", request("xhigh"), "Invalid reasoning effort: xhigh", "reasoning_effort"),
    ("gpt-oss", request("max"), "Invalid reasoning effort: max", "reasoning_effort"),
    ("gpt-oss", request(None, type="disabled"), "Invalid reasoning effort: none", "thinking"),
    ("gpt-oss", request(None, budget_tokens=2048), "thinking.budget_tokens is not supported", "thinking"),
    ("minimax-m2", request(False), "Invalid reasoning effort: none", "reasoning_effort"),
    ("minimax-m2", request(True), "Invalid reasoning effort: true; this model accepts only 'low', 'medium', 'high'",
     "reasoning_effort"),
    ("minimax-m2", request("max"), "Invalid reasoning effort: max", "reasoning_effort"),
    ("minimax-m2", request(4096), "Invalid reasoning effort: 4096", "reasoning_effort"),
    ("qwen3", request("high", history="preserved"), "reasoning_history 'preserved' is not supported",
     "reasoning_history"),
    ("gpt-oss", request(None, keep="all"), "reasoning_history 'preserved' is not supported", "reasoning_history"),
])
def test_model_specific_errors(name: str, wanted: ReasoningRequest, message: str, param: str) -> None:
    with pytest.raises(ReasoningError, match=message) as caught:
        family_named(name).prepare(MESSAGES, wanted)
    assert caught.value.param == param


def test_minimax_m2_takes_thinking_enabled_and_string_efforts() -> None:
    family = family_named("minimax-m2")
    assert family.prepare(MESSAGES, request(None, type="enabled"))[1] == {}
    assert family.prepare(MESSAGES, request("low"))[1] == {}


def test_generic_family_ignores_reasoning_controls() -> None:
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello", "reasoning_content": "x"}]
    for wanted in (request("none"), request("high"), request(None, type="adaptive"), request(2048),
                   request("high", history="preserved")):
        prepared, variables = GENERIC.prepare(messages, wanted)
        assert variables == {}
        assert [m["content"] for m in prepared] == ["Hi", "Hello"]
    assert GENERIC.budget_close is None and GENERIC.reasoning_start is None and not GENERIC.special_markers
    assert not family_named("kimi-k2").special_markers and family_named("gpt-oss").special_markers
    assert GENERIC.finish_prompt("prompt", request("none")) == "prompt"


# ---------------------------------------------------------------------------------------------- history

CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!", "reasoning_content": "OLD-REASONING"},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "reasoning_content": "CURRENT-REASONING",
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
]


def reasoning_of(messages: list[dict[str, Any]]) -> list[Any]:
    return [m.get("reasoning_content") for m in messages]


@pytest.mark.parametrize(("history", "expected"), [
    (None, [None, None, "OLD-REASONING", None, "CURRENT-REASONING", None]),
    ("preserved", [None, None, "OLD-REASONING", None, "CURRENT-REASONING", None]),
    ("interleaved", [None, None, None, None, "CURRENT-REASONING", None]),
    ("disabled", [None, None, None, None, None, None]),
])
def test_strip_reasoning(history: str | None, expected: list[Any]) -> None:
    before = json.dumps(CONVERSATION)
    assert reasoning_of(strip_reasoning(CONVERSATION, history)) == expected
    assert json.dumps(CONVERSATION) == before


@pytest.mark.parametrize(("name", "history", "expected"), [
    ("deepseek-v4", "preserved", {"drop_thinking": F}),
    ("deepseek-v4", "interleaved", {"drop_thinking": T}),
    ("nemotron-3", "preserved", {"truncate_history_thinking": F}),
    ("nemotron-3", "disabled", {"truncate_history_thinking": T}),
    ("lfm2.5", "preserved", {"preserve_thinking": T}),
    ("lfm2.5", "interleaved", {"preserve_thinking": F}),
    ("hy3", "preserved", {"preserved_thinking": T}),
    ("laguna-s", "preserved", {"preserve_thinking": T}),
    ("solar-open", "preserved", {"think_render_option": "all"}),
    ("solar-open", "interleaved", {"think_render_option": "lastthink"}),
    ("cohere2", "disabled", {"skip_thinking": T}),
    ("cohere2", "preserved", {"skip_thinking": F}),
])
def test_history_variables(name: str, history: str, expected: dict[str, Any]) -> None:
    family = family_named(name)
    variables = family.prepare(CONVERSATION, request("high", history=history))[1]
    assert {k: variables[k] for k in expected} == expected
    # Without reasoning_history the template keeps its own default.
    assert not set(expected) & set(family.prepare(CONVERSATION, request("high"))[1])


@pytest.mark.parametrize(("name", "field"), [
    ("gpt-oss", "thinking"), ("solar-open", "reasoning"), ("lfm2.5", "thinking"), ("qwen3", "reasoning_content")])
def test_past_reasoning_moves_to_the_field_the_template_reads(name: str, field: str) -> None:
    messages = family_named(name).prepare(CONVERSATION, request("high"))[0]
    assert messages[4][field] == "CURRENT-REASONING"
    assert field == "reasoning_content" or "reasoning_content" not in messages[4]
    assert not any(k in messages[1] for k in ("reasoning_content", "thinking", "reasoning"))


def test_empty_past_reasoning_is_dropped() -> None:
    messages = [{"role": "assistant", "content": "Hi", "reasoning_content": None},
                {"role": "assistant", "content": "Hi", "reasoning_content": ""}]
    assert family_named("gpt-oss").prepare(messages, request("high"))[0] == [
        {"role": "assistant", "content": "Hi"}, {"role": "assistant", "content": "Hi"}]


def test_mistral_reads_past_reasoning_as_a_thinking_chunk() -> None:
    messages = family_named("ministral-reasoning").prepare(CONVERSATION, request("high"))[0]
    assert messages[2]["content"] == [{"type": "thinking", "thinking": "OLD-REASONING"},
                                      {"type": "text", "text": "Hello!"}]
    assert messages[4]["content"] == [{"type": "thinking", "thinking": "CURRENT-REASONING"}]


HISTORY_CONVERSATION = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!", "reasoning_content": "OLD-REASONING"},
    {"role": "user", "content": "What is 2+2?"},
]


@pytest.mark.parametrize("family", REASONING_FAMILIES, ids=lambda f: f.name)
def test_history_in_the_rendered_prompt(family: ChatFamily) -> None:
    fixture = next(f for f, name in sorted(FIXTURE_FAMILIES.items()) if name == family.name)

    def shown(history: str) -> bool:
        return "OLD-REASONING" in render(fixture, family, HISTORY_CONVERSATION, request("high", history=history))

    assert not shown("interleaved") and not shown("disabled")
    if family.keeps_history:
        assert shown("preserved")
    else:
        with pytest.raises(ReasoningError):
            family.prepare(HISTORY_CONVERSATION, request("high", history="preserved"))


# ---------------------------------------------------------------------------------------------- text switches


def test_smollm3_request_beats_flags_in_the_system_text() -> None:
    family = family_named("smollm3")
    messages = [{"role": "system", "content": "Be brief. /think"}, {"role": "user", "content": "Hi"}]
    prepared, variables = family.prepare(messages, request("none"))
    assert prepared[0]["content"] == "Be brief." and variables == {"enable_thinking": F}
    prompt = render("HuggingFaceTB-SmolLM3-3B.jinja", family, messages, request("none"))
    assert "Reasoning Mode: /no_think" in prompt and prompt.endswith("<think>\n\n</think>\n")
    # Without an effort in the request, the user's own flag decides.
    assert family.prepare(messages, request())[0] == messages


def test_nemotron_v2_switch_words() -> None:
    family = family_named("nemotron-nano-v2")
    messages = [{"role": "system", "content": "You are terse. /no_think"}, {"role": "user", "content": "Hi /no_think"}]
    prepared = family.prepare(messages, request("high"))[0]
    assert [m["content"] for m in prepared] == ["You are terse.", "Hi /think"]
    prompt = render("NVIDIA-Nemotron-Nano-v2.jinja", family, messages, request("high"))
    assert prompt.endswith("<think>\n") and "/think" not in prompt
    prompt = render("NVIDIA-Nemotron-Nano-v2.jinja", family, [{"role": "user", "content": "Hi"}], request("none"))
    assert prompt.endswith("<think></think>")
    assert family.prepare(messages, request())[0] == messages


def test_mimo_no_think() -> None:
    family = family_named("mimo")
    messages = [{"role": "user", "content": "Describe it."}, {"role": "assistant", "content": "An apple."},
                {"role": "user", "content": "Color? /no_think"}]
    assert [m["content"] for m in family.prepare(messages, request("none"))[0]] == [
        "Describe it.", "An apple.", "Color? /no_think"]
    assert family.prepare(messages, request("high"))[0][2]["content"] == "Color?"


def test_ling_detailed_thinking() -> None:
    family = family_named("ling")
    messages = [{"role": "system", "content": "Be brief. detailed thinking off"}, {"role": "user", "content": "Hi"}]
    prompt = render("inclusionai-ling-3.0-flash.jinja", family, messages, request("high"))
    assert "detailed thinking on" in prompt and "detailed thinking off" not in prompt
    assert prompt.endswith("<role>ASSISTANT</role>\n<think>")


# ---------------------------------------------------------------------------------------------- rendering

Render = tuple[str, str | None, str, bool, tuple[str, ...], tuple[str, ...]]
# fixture, prompt end for effort "none" (None: refused), prompt end for "high", whether "high" opens the
# block, text only the "high" prompt has, text only the "none" prompt has.
RENDERS: list[Render] = [
    ("Qwen-Qwen3-0.6B.jinja", "<|im_start|>assistant\n<think>\n\n</think>\n\n", "<|im_start|>assistant\n", F, (), ()),
    ("Qwen-QwQ-32B.jinja", "<|im_start|>assistant\n<think>\n</think>", "<|im_start|>assistant\n<think>\n", T, (), ()),
    ("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "<｜Assistant｜><think>\n</think>\n\n",
     "<｜Assistant｜><think>\n", T, (), ()),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "<｜Assistant｜><think>\n</think>", "<｜Assistant｜><think>\n",
     T, (), ()),
    ("llama-cpp-deepseek-r1.jinja", "<｜Assistant｜><think>\n</think>\n\n", "<｜Assistant｜><think>\n", T, (), ()),
    ("deepseek-ai-DeepSeek-V3.1.jinja", "<｜Assistant｜><think></think>", "<｜Assistant｜><think>", T, (), ()),
    ("deepseek-ai-DeepSeek-V4.jinja", "<｜Assistant｜></think>", "<｜Assistant｜><think>", T, (), ()),
    ("openai-gpt-oss-120b.jinja", None, "<|start|>assistant", F, ("Reasoning: high",), ()),
    ("muse-glimmer.jinja", "<|start|>assistant to=user<|message|>", "<|start|>assistant", F,
     ("Reasoning strength: high.",), ("Reasoning strength: low.",)),
    ("GLM-4.6.jinja", "<|assistant|>\n<think></think>", "<|assistant|>", F, (), ("/nothink",)),
    ("ibm-granite-granite-3.3-2B-Instruct.jinja", "<|start_of_role|>assistant<|end_of_role|>",
     "<|start_of_role|>assistant<|end_of_role|>", F, ("Write your thoughts between <think></think>",), ()),
    ("HuggingFaceTB-SmolLM3-3B.jinja", "<|im_start|>assistant\n<think>\n\n</think>\n", "<|im_start|>assistant\n", F,
     ("Reasoning Mode: /think",), ("Reasoning Mode: /no_think",)),
    ("mistralai-Ministral-3-14B-Reasoning-2512.jinja", "[/INST][THINK][/THINK]", "[/INST]", F, (), ()),
    ("ByteDance-Seed-OSS.jinja", "</seed:cot_budget_reflect>\n</seed:think>", "<seed:bos>assistant\n", F, (),
     ("your thinking budget is 0",)),
    ("Cohere2MoE.jinja", "<|CHATBOT_TOKEN|><|START_THINKING|><|END_THINKING|>", "<|CHATBOT_TOKEN|><|START_THINKING|>",
     T, (), ()),
    ("CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", "<|CHATBOT_TOKEN|><|START_THINKING|><|END_THINKING|>",
     "<|CHATBOT_TOKEN|>", F, (), ()),
    ("MiniMax-M2.jinja", None, "]~b]ai\n<think>\n", T, (), ()),
    ("MiniMax-M1.jinja", "ai name=assistant\n<think>\n</think>\n\n", "ai name=assistant\n", F, (), ()),
    ("Kimi-K3.jinja", "<|open|>response<|sep|>", "<|open|>think<|sep|>", T, ("thinking_effort=high",), ()),
    ("Apriel-1.6-15b-Thinker-fixed.jinja", "Here are my reasoning steps:\n[BEGIN FINAL RESPONSE]\n",
     "<|begin_assistant|>\nHere are my reasoning steps:\n", T, (), ()),
    ("unsloth-Apriel-1.5.jinja", "<|assistant|>\n[BEGIN FINAL RESPONSE]\n", "<|assistant|>\n", T, (), ()),
    ("google-gemma-4-31B-it.jinja", "<|turn>model\n<|channel>thought\n<channel|>", "<|turn>model\n", F,
     ("<|think|>",), ()),
    ("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", "<|im_start|>assistant\n<think></think>",
     "<|im_start|>assistant\n<think>\n", T, (), ()),
    ("NVIDIA-Nemotron-Nano-v2.jinja", "<SPECIAL_11>Assistant\n<think></think>", "<SPECIAL_11>Assistant\n<think>\n", T,
     (), ()),
    ("LFM2.5-8B-A1B.jinja", "<|im_start|>assistant\n<think></think>", "<|im_start|>assistant\n", F, (), ()),
    ("tencent-Hy3.jinja", "<think:opensource></think:opensource>", "<｜hy_Assistant:opensource｜><think:opensource>",
     T, ("reasoning_effort:high",), ("reasoning_effort:no_think",)),
    ("poolside-Laguna-S-2.1.jinja", "<assistant></think>", "<assistant><think>", T, (), ()),
    ("poolside-Laguna-XS.2.jinja", "<assistant>\n</think>", "<assistant>\n<think>", T, (), ()),
    ("inclusionai-ling-3.0-flash.jinja", "<role>ASSISTANT</role>\n<think></think>", "<role>ASSISTANT</role>\n<think>",
     T, ("detailed thinking on",), ("detailed thinking off",)),
    ("upstage-Solar-Open-100B.jinja", "<|begin|>assistant<|think|><|end|><|begin|>assistant", "<|begin|>assistant",
     F, (), ()),
    ("Spark2.5.jinja", "<|Bot|></think>", "<|Bot|><think>", T, (), ()),
    ("StepFun3.5-Flash.jinja", "<|im_start|>assistant\n<think>\n</think>\n", "<|im_start|>assistant\n<think>\n", T,
     (), ()),
    ("MiMo-VL.jinja", "What is 2+2? /no_think<|im_end|>\n<|im_start|>assistant\n", "<|im_start|>assistant\n", F, (),
     ()),
    ("openbmb-MiniCPM5-1B.jinja", "<|im_start|>assistant\n<think>\n\n</think>\n\n", "<|im_start|>assistant\n<think>\n",
     T, (), ()),
    ("Reka-Edge.jinja", "<sep>assistant:", "<sep>assistant: <think>\n", T, (), ()),
    ("Bielik-11B-v3.0-Instruct.jinja", "<|im_start|>assistant\n", "<|im_start|>assistant\n<think>\n", T, (), ()),
    ("Apertus-8B-Instruct.jinja", "<|assistant_start|>", "<|assistant_start|>", F, ("Deliberation: enabled",),
     ("Deliberation: disabled",)),
    ("llama-cpp-rwkv-world.jinja", "Assistant: <think>\n</think>", "Assistant: <think>", T, (), ()),
]


def render(fixture: str, family: ChatFamily, messages: list[dict[str, Any]], wanted: ReasoningRequest) -> str:
    """The prompt as the server builds it: family variables, the template, then `finish_prompt`."""
    prepared, variables = family.prepare(messages, wanted)
    template = ChatTemplate(source(fixture), bos_token="<s>", eos_token="</s>")
    try:
        prompt = template.render(prepared, add_generation_prompt=True, **variables)
    except TemplateRenderError as error:  # templates.chat_template is being extended in parallel
        pytest.skip(f"{fixture} does not render with the current templates.chat_template: {error}")
    return family.finish_prompt(prompt, wanted)


def test_render_table_covers_every_reasoning_family() -> None:
    assert {FIXTURE_FAMILIES[r[0]] for r in RENDERS} == {f.name for f in REASONING_FAMILIES}


@pytest.mark.parametrize(("fixture", "none_end", "high_end", "high_opens", "high_only", "none_only"), RENDERS,
                         ids=[r[0].removesuffix(".jinja") for r in RENDERS])
def test_rendered_prompt(fixture: str, none_end: str | None, high_end: str, high_opens: bool,
                         high_only: tuple[str, ...], none_only: tuple[str, ...]) -> None:
    family = family_for(source(fixture))
    high = render(fixture, family, MESSAGES, request("high"))
    assert high.endswith(high_end), high[-80:]
    assert family.opens_reasoning(high) is high_opens
    starts_inside(family, high, high_opens)
    render(fixture, family, MESSAGES, request())  # the model's default renders too
    if none_end is None:
        with pytest.raises(ReasoningError, match="Invalid reasoning effort: none"):
            family.prepare(MESSAGES, request("none"))
        return
    none = render(fixture, family, MESSAGES, request("none"))
    assert none.endswith(none_end), none[-80:]
    assert family.opens_reasoning(none) is False
    starts_inside(family, none, False)
    for text in high_only:
        assert text in high and text not in none
    for text in none_only:
        assert text in none and text not in high


def starts_inside(family: ChatFamily, prompt: str, expected: bool) -> None:
    """The parser for `prompt` reads the first generated text as reasoning exactly when the prompt opened it."""
    parser = family.parser(prompt)
    kinds = {kind for kind, _ in parser.feed("word") + parser.finish()}
    assert kinds == {"reasoning" if expected else "content"}


def test_finish_prompt_leaves_switched_templates_alone() -> None:
    family = family_named("deepseek-r1")
    closed = "<｜Assistant｜><think>\n</think>"
    assert family.finish_prompt(closed, request("none")) == closed
    assert family.finish_prompt("<｜Assistant｜><think>\n", request("none")) == "<｜Assistant｜><think>\n</think>\n\n"
    assert family.finish_prompt("<｜Assistant｜><think>\n", request("high")) == "<｜Assistant｜><think>\n"
    assert family_named("qwen3").finish_prompt("x", request("none")) == "x"


# ---------------------------------------------------------------------------------------------- output parsing


def output_cases() -> Iterator[Any]:
    for path in sorted(OUTPUTS.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        for case in data["cases"]:
            yield pytest.param(data["family"], case, id=f"{data['family']}: {case['name']}")


def splits(text: str) -> Iterator[list[str]]:
    """The text whole, in pieces of 1, 2 and 3 characters at every offset, and in random 1-3 character pieces."""
    yield [text]
    for size in (1, 2, 3):
        for offset in range(size):
            head, rest = text[:offset], text[offset:]
            yield ([head] if head else []) + [rest[i:i + size] for i in range(0, len(rest), size)]
    rng = random.Random(text)
    for _ in range(25):
        pieces, i = [], 0
        while i < len(text):
            size = rng.randint(1, 3)
            pieces.append(text[i:i + size])
            i += size
        yield pieces


def parse(make: Callable[[], ReasoningParser], pieces: list[str]) -> tuple[str, str, list[tuple[str, str]]]:
    parser = make()
    out: list[tuple[str, str]] = []
    for piece in pieces:
        out += parser.feed(piece)
    out += parser.finish()
    reasoning = "".join(text for kind, text in out if kind == "reasoning")
    content = "".join(text for kind, text in out if kind == "content")
    return reasoning, content, out


@pytest.mark.parametrize(("name", "case"), list(output_cases()))
def test_parser_on_captured_outputs(name: str, case: dict[str, str]) -> None:
    family = family_named(name)
    for pieces in splits(case["output"]):
        reasoning, content, out = parse(lambda: family.parser(case["prompt"]), pieces)
        assert (reasoning, content) == (case["reasoning"], case["content"]), pieces
        assert all(text and kind in ("reasoning", "content") for kind, text in out)


@pytest.mark.parametrize("family", REASONING_FAMILIES, ids=lambda f: f.name)
def test_budget_close_ends_reasoning(family: ChatFamily) -> None:
    """What the engine forces when the budget runs out: the phrase, then `budget_close`, then the answer."""
    cases = json.loads((OUTPUTS / f"{family.name}.json").read_text(encoding="utf-8"))["cases"]
    prompt = cases[0]["prompt"]
    opener = "" if family.opens_reasoning(prompt) else family.reasoning_start
    assert opener is not None
    output = f"{opener}Let me count: 1, 2, 3.{DEFAULT_BUDGET_END}{family.budget_close}The answer is 3."
    for pieces in splits(output):
        reasoning, content, _ = parse(lambda: family.parser(prompt), pieces)
        assert reasoning.strip() == f"Let me count: 1, 2, 3.{DEFAULT_BUDGET_END}".strip()
        assert content == "The answer is 3."


def test_parser_holds_back_only_a_possible_marker() -> None:
    parser = ReasoningParser("<think>", "</think>", in_reasoning=True)
    assert parser.feed("abc </th") == [("reasoning", "abc")]
    assert parser.feed("ink>\n\nAnswer") == [("content", "Answer")]
    assert parser.finish() == []
    parser = ReasoningParser("<think>", "</think>")
    assert parser.feed("<thi") == []
    assert parser.feed("s is not a tag") == [("content", "<this is not a tag")]


def test_parser_keeps_trailing_whitespace_of_the_answer() -> None:
    parser = ReasoningParser("<think>", "</think>")
    assert parser.feed("<think>x</think>Line\n") == [("reasoning", "x"), ("content", "Line")]
    assert parser.finish() == [("content", "\n")]


def test_parser_without_markers_passes_everything() -> None:
    parser = ReasoningParser()
    assert parser.feed(" a <think> ") == [("content", " a <think> ")]
    assert parser.feed("") == [] and parser.finish() == []
