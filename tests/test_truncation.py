"""`prompt_truncate_len` with the real SmolLM2 tokenizer and chat templates: the oldest turns go
first, the system prompt and the last message stay, tool results go with their calls, and the
system prompt is cut only when nothing else is left to evict."""

from __future__ import annotations

import math
from typing import Any

import pytest

from app.pipeline.prompts import special_vocab
from backends.llama_model import LlamaModel, ModelOptions
from backends.registry import default_model_path
from templates.chat_format import ChatFormat
from templates.prompt_fragments import fragment_tokens
from templates.safe_prompt import prompt_from_render
from templates.truncation import Truncation, eviction_levels, truncate_conversation
from tests.conftest import FIXTURES

Messages = list[dict[str, Any]]

SYSTEM = {"role": "system", "content": "You are a careful assistant. Answer in one short sentence."}


def turn(i: int) -> Messages:
    return [{"role": "user", "content": f"Question {i}: what is {i} times {i}?"},
            {"role": "assistant", "content": f"{i} times {i} is {i * i}."}]


def history(turns: int, *, system: bool = True) -> Messages:
    messages = [dict(SYSTEM)] if system else []
    for i in range(1, turns + 1):
        messages += turn(i)
    return [*messages, {"role": "user", "content": "And 7 times 8?"}]


def tool_turn(i: int) -> Messages:
    call_id = f"call_{i}"
    return [
        {"role": "user", "content": f"Weather in city {i}?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": f'{{"city": "c{i}"}}'}}]},
        {"role": "tool", "tool_call_id": call_id, "content": f'{{"temp": {i}}}'},
        {"role": "assistant", "content": f"It is {i} degrees."},
    ]


@pytest.fixture(scope="module")
def model() -> LlamaModel:
    return LlamaModel(default_model_path(), ModelOptions(vocab_only=True))


class Counter:
    """Renders and tokenizes a conversation as the server does, counting the calls."""

    def __init__(self, model: LlamaModel, template: str = "own"):
        source = model.chat_template() if template == "own" else (FIXTURES / f"{template}.jinja").read_text()
        assert source
        self.model = model
        self.chat = ChatFormat(source, bos_token="", eos_token="")
        self.calls = 0

    def tokens(self, messages: Messages) -> list[int]:
        render = lambda m, t: self.chat.render(m, tools=t)
        prompt = prompt_from_render(render, messages, None, special_vocab(self.model), safe=False)
        return fragment_tokens(self.model, prompt.fragments)

    def __call__(self, messages: Messages) -> int:
        self.calls += 1
        return len(self.tokens(messages))


def truncate(model: LlamaModel, messages: Messages, limit: int, template: str = "own") -> tuple[Truncation, Counter]:
    count = Counter(model, template)
    return truncate_conversation(messages, count, limit, model), count


def test_a_conversation_that_fits_is_unchanged(model: LlamaModel):
    messages = history(3)
    result, count = truncate(model, messages, 10_000)
    assert result.messages is messages
    assert (result.evicted, result.system_tokens_cut, result.fits, result.changed) == (0, 0, True, False)
    assert result.prompt_tokens == count(messages)
    assert count.calls == 2  # one in truncate_conversation, one just now


@pytest.mark.parametrize("template", ["own", "Qwen-Qwen2.5-7B-Instruct", "meta-llama-Llama-3.1-8B-Instruct", "google-gemma-4-31B-it"])
def test_the_oldest_turns_go_first_and_as_few_as_needed(model: LlamaModel, template: str):
    messages = history(20)
    full = Counter(model, template)
    limit = (full(messages) + full([messages[0], messages[-1]])) // 2
    result, count = truncate(model, messages, limit, template)

    assert result.fits and result.prompt_tokens <= limit
    assert result.prompt_tokens == count(result.messages)
    assert result.system_tokens_cut == 0
    assert result.messages[0] is messages[0]  # the system prompt, untouched
    assert result.messages[-1] is messages[-1]
    assert result.messages[1]["role"] == "user"
    kept = len(result.messages)
    assert result.evicted == len(messages) - kept > 0
    assert result.messages[1:] == messages[-(kept - 1):]  # a suffix: the newest turns stay
    one_more = [messages[0], *messages[-(kept + 1):]]  # one more turn back does not fit
    assert count(one_more) > limit
    # binary search: the full and the shortest conversation, then about log2(levels) candidates
    assert count.calls - 2 <= 2 + math.ceil(math.log2(len(eviction_levels(messages))))


def test_tool_results_go_with_the_call_that_asked_for_them(model: LlamaModel):
    messages = [dict(SYSTEM), *tool_turn(1), *tool_turn(2), {"role": "user", "content": "Which was warmer?"}]
    full = Counter(model)
    limit = full([messages[0], *messages[5:]]) + 1  # the second tool turn and the question fit, not the first
    result, _ = truncate(model, messages, limit)
    assert result.fits
    assert result.messages == [messages[0], *messages[5:]]
    assert [m.get("tool_call_id") for m in result.messages if m["role"] == "tool"] == ["call_2"]
    assert result.evicted == 4


def test_a_tool_result_whose_call_is_evicted_goes_even_after_a_user_message():
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [{"role": "user", "content": "u1"}, {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "user", "content": "u2"}, {"role": "tool", "tool_call_id": "c1", "content": "r"},
                {"role": "assistant", "content": "a"}, {"role": "user", "content": "u3"}]
    levels = eviction_levels(messages)
    assert levels == [[messages[2], messages[4], messages[5]], [messages[5]]]


def test_the_last_message_is_never_evicted():
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [{"role": "user", "content": "u1"}, {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "user", "content": "u2"}, {"role": "tool", "tool_call_id": "c1", "content": "r"}]
    assert eviction_levels(messages) == []  # starting at u2 would drop the tool result that ends it
    prefill = [*history(2), {"role": "assistant", "content": "7 times 8 is"}]
    assert all(level[-1] is prefill[-1] for level in eviction_levels(prefill))


def test_every_system_message_stays():
    messages = [dict(SYSTEM), *turn(1), {"role": "system", "content": "Now answer in French."}, *turn(2),
                {"role": "user", "content": "Et 7 fois 8 ?"}]
    shortest = eviction_levels(messages)[-1]
    assert shortest == [messages[0], messages[3], messages[-1]]


def test_the_system_prompt_is_cut_only_as_a_last_resort(model: LlamaModel):
    long_system = {"role": "system", "content": " ".join(f"Rule {i}: be kind to number {i}." for i in range(200))}
    messages = [long_system, *history(5, system=False)]
    full = Counter(model)
    last_turn = [long_system, messages[-1]]
    limit = full(last_turn) - 100
    result, count = truncate(model, messages, limit)

    assert result.fits and result.prompt_tokens <= limit
    assert result.messages[-1] is messages[-1] and len(result.messages) == 2  # every earlier turn went first
    assert result.evicted == len(messages) - 2
    system = result.messages[0]["content"]
    assert system and long_system["content"].startswith(system)  # its beginning is kept
    assert result.system_tokens_cut >= 100
    system_tokens = model.tokenize(long_system["content"], add_special=False, parse_special=False)
    kept = len(system_tokens) - result.system_tokens_cut
    one_more = [{"role": "system", "content": model.detokenize(system_tokens[:kept + 1])}, messages[-1]]
    assert count(one_more) > limit  # as much of it as fits


def test_when_nothing_fits_the_shortest_conversation_comes_back(model: LlamaModel):
    messages = history(3)
    result, _ = truncate(model, messages, 5)
    assert not result.fits
    assert result.messages == [{"role": "system", "content": ""}, messages[-1]]
    assert result.prompt_tokens > 5
    assert result.evicted == len(messages) - 2

    no_system = history(3, system=False)
    result, _ = truncate(model, no_system, 5)
    assert not result.fits and result.messages == [no_system[-1]] and result.system_tokens_cut == 0


def test_eviction_is_not_needed_when_the_last_turn_is_long(model: LlamaModel):
    """A long last message with a short history: evicting the history is enough, the system stays whole."""
    messages = [dict(SYSTEM), *turn(1), {"role": "user", "content": "word " * 300}]
    full = Counter(model)
    result, _ = truncate(model, messages, full([messages[0], messages[-1]]))
    assert result.fits and result.messages == [messages[0], messages[-1]] and result.system_tokens_cut == 0
