"""The one request plan, built from Fireworks bodies on its own (no model, no server): every field
lands where the engine and the shapers read it, aliases resolved, defaults left to the model."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.api.common.decode import decode_body
from app.api.fireworks.plan import DEFAULT_COMPLETION_TOKENS, chat_plan, completion_plan
from app.api.fireworks.requests import ChatCompletionRequest, CompletionRequest
from app.pipeline.errors import BadRequest
from app.pipeline.plan import (
    ECHO_ALL,
    Caller,
    Conversation,
    Prompts,
    RequestPlan,
    ResponseFormat,
    Sampling,
    StreamPlan,
)
from app.pipeline.prepare import sampling_params, stop_sequences
from app.pipeline.stream_buffer import BufferPolicy
from backends.jobs import CacheKeys, LogprobOptions, SamplingParams
from templates.reasoning import ReasoningRequest

MAX_LOGPROBS = 5


def chat(**body: Any) -> RequestPlan:
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], **body}
    return chat_plan(decode_body(json.dumps(body).encode(), ChatCompletionRequest), MAX_LOGPROBS)


def complete(**body: Any) -> RequestPlan:
    body = {"model": "m", "prompt": "Hi", **body}
    return completion_plan(decode_body(json.dumps(body).encode(), CompletionRequest), MAX_LOGPROBS)


def test_a_bare_chat_leaves_every_default_to_the_model():
    plan = chat()
    assert plan == RequestPlan(
        model="m", input=Conversation([{"role": "user", "content": "Hi"}]),
        reasoning=ReasoningRequest())
    assert plan.max_tokens is None and plan.default_max_tokens is None and plan.stop is None
    assert plan.sampling == Sampling() and plan.stream is None and not plan.priority


def test_a_bare_completion_gets_the_legacy_default_of_16_tokens_and_no_reasoning():
    plan = complete()
    assert plan.input == Prompts(("Hi",))
    assert plan.default_max_tokens == DEFAULT_COMPLETION_TOKENS == 16
    assert plan.reasoning is None


@pytest.mark.parametrize(("prompt", "prompts"), [
    ("a", ("a",)),
    (["a", "b"], ("a", "b")),
    ([1, 2, 3], ((1, 2, 3),)),
    ([[1, 2], [3]], ((1, 2), (3,))),
])
def test_every_prompt_shape_becomes_a_tuple_of_prompts(prompt: Any, prompts: tuple):
    assert complete(prompt=prompt).input == Prompts(prompts)


def test_chat_messages_become_what_templates_read():
    plan = chat(messages=[
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ])
    assert isinstance(plan.input, Conversation)
    messages = plan.input.messages
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]
    assert messages[1]["content"] == "one\ntwo"
    assert messages[2]["content"] == "" and messages[2]["tool_calls"][0]["function"]["name"] == "f"
    assert messages[3]["tool_call_id"] == "c1"


def test_prompt_token_ids_replace_the_messages():
    body = {"model": "m", "prompt_token_ids": [1, 2, 3]}
    plan = chat_plan(decode_body(json.dumps(body).encode(), ChatCompletionRequest), MAX_LOGPROBS)
    assert plan.input == Conversation(None, token_ids=(1, 2, 3))


def test_sampling_fields_and_aliases():
    plan = chat(temperature=0.5, top_k=40, top_p=0.9, min_p=0.05, typical_p=0.8, frequency_penalty=0.1,
                presence_penalty=-0.1, repetition_penalty=1.1, mirostat_target=5.0, mirostat_lr=0.2, seed=7,
                logit_bias={"15": -100, "16": 2.5}, ignore_eos=True, max_completion_tokens=12, stop="END", n=3)
    assert plan.sampling == Sampling(0.5, 40, 0.9, 0.05, 0.8, 0.1, -0.1, 1.1, 5.0, 0.2, 7,
                                     ((15, -100.0), (16, 2.5)), True)
    assert plan.max_tokens == 12 and plan.stop == ("END",) and plan.n == 3


def test_the_model_defaults_fill_what_the_plan_leaves_out():
    defaults = {"temperature": 0.2, "top_k": 20, "stop": ["###"]}
    params = sampling_params(Sampling(top_k=5), 100, defaults)
    assert params == SamplingParams(temperature=0.2, top_k=5)
    assert stop_sequences(None, defaults) == ("###",)
    assert stop_sequences(("a", ""), defaults) == ("a",)
    with pytest.raises(BadRequest, match="outside the vocabulary"):
        sampling_params(Sampling(logit_bias=((100, 1.0),)), 100, {})


def test_output_options_streaming_and_routing():
    plan = chat(logprobs=True, top_logprobs=3, sampling_mask="non_zero_list", echo=True, return_token_ids=True,
                raw_output=True, perf_metrics_in_response=True, stream=True,
                stream_options={"include_usage": False, "buffer_tokens": 4, "include_internal_content": True},
                user="alice", metadata={"team": "a"}, prompt_cache_isolation_key="iso", service_tier="priority")
    output = plan.output
    assert output.logprobs == LogprobOptions(top=3, sampling=True, active_ids=True, prompt_last=1 << 30)
    assert (output.echo, output.token_ids, output.raw_output, output.perf_in_body, output.internal_content) == (
        ECHO_ALL, True, True, True, True)
    assert plan.stream == StreamPlan(include_usage=False, buffer=BufferPolicy(tokens=4))
    assert plan.cache == CacheKeys(isolation="iso", affinity="alice")  # `user` steers without prompt_cache_key
    assert plan.caller == Caller("alice", {"team": "a"}) and plan.priority


def test_legacy_logprobs_and_echo_last():
    output = complete(logprobs=2, echo_last=3).output
    assert output.legacy_logprobs and output.top_logprobs == 2 and output.echo == 3
    assert output.logprobs == LogprobOptions(top=2, sampling=False, active_ids=False, prompt_last=3)


def test_predicted_output_and_response_formats():
    assert chat(prediction={"type": "content", "content": [{"type": "text", "text": "ab"}]}).draft == "ab"
    assert chat(speculation=[5, 6]).draft == (5, 6)
    assert chat(response_format={"type": "text"}).response_format is None
    schema = {"type": "object"}
    assert chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}).response_format \
        == ResponseFormat("json_schema", json_schema={"name": "x", "schema": schema})


def test_tools_and_reasoning_in_the_plan():
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    plan = chat(tools=[tool], tool_choice="required", reasoning_effort="low")
    assert isinstance(plan.input, Conversation)
    tools = plan.input.tools
    assert tools is not None and tools.mode == "required" and tools.callable == frozenset({"get_weather"})
    assert plan.reasoning == ReasoningRequest(effort="low", given="low")
    none = chat(tools=[tool], tool_choice="none").input
    assert isinstance(none, Conversation) and none.shown_tools is None


def test_every_thinking_field_reaches_the_reasoning_request():
    """Chat's `thinking` Struct becomes the templates' own `ThinkingControl` field for field."""
    plan = chat(thinking={"type": "enabled", "budget_tokens": 2048, "keep": "all", "budget_end_str": "Stop.",
                          "effort": "high"})
    assert plan.reasoning == ReasoningRequest(effort="high", budget_tokens=2048, history="preserved",
                                              budget_end="Stop.", given="high", param="thinking")
    with pytest.raises(BadRequest) as refused:
        chat(reasoning_effort=0)
    assert refused.value.param == "reasoning_effort"
    with pytest.raises(BadRequest) as refused:
        chat(thinking={"budget_tokens": 10})
    assert refused.value.param == "thinking" and "budget_tokens must be >= 1024" in refused.value.message


@pytest.mark.parametrize(("body", "message"), [
    ({"response_format": {"type": "text", "schema": {}}}, "does not go with type `text`"),
    ({"logit_bias": {"x": 1}}, "is not a token id"),
    ({"logit_bias": {"1": 101}}, "outside -100..100"),
    ({"speculation": "a", "prediction": "a"}, "not both"),
    ({"safe_tokenization": True, "prompt_token_ids": [1], "messages": None}, "safe_tokenization"),
    ({"prompt_truncate_len": 0}, "prompt_truncate_len must be 1 or more"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "is not one of"),
])
def test_meaning_errors_are_found_without_a_model(body: dict[str, Any], message: str):
    with pytest.raises(BadRequest, match=message):
        chat(**body)


def test_completions_refuse_what_only_chat_templates_can_honour():
    with pytest.raises(BadRequest, match="reasoning_history chooses how chat messages are rendered"):
        complete(reasoning_history="preserved")
    assert complete(reasoning_effort=2048).reasoning == ReasoningRequest(effort="medium", budget_tokens=2048, given=2048)
