"""`prompt_truncate_len` on chat over real HTTP with the real model: the earliest turns go first,
the system prompt and the latest user message stay, the system prompt is cut only as a last
resort."""

from __future__ import annotations

from tests.fireworks_shapes import (
    CHAT,
    IM_START,
    choice_chunks,
    refused,
    stream,
    stream_text,
    whole,
)

SYSTEM = "You are Zed, a pirate assistant who always answers in rhymes."
LAST = "Final question: what is your name?"


def _turns(count: int) -> list[dict]:
    turns = []
    for i in range(count):
        turns.append({"role": "user", "content": f"Question number {i}: tell me a fact about the number {i}."})
        turns.append({"role": "assistant", "content": f"The number {i} comes after {i - 1} and it is nice."})
    return turns


def _conversation(turns: int, system: bool = True) -> list[dict]:
    head = [{"role": "system", "content": SYSTEM}] if system else []
    return head + _turns(turns) + [{"role": "user", "content": LAST}]


def _texts(answer: dict) -> list[str]:
    return [f for f in answer["choices"][0]["raw_output"]["prompt_fragments"] if isinstance(f, str)]


def _kept_questions(answer: dict) -> list[int]:
    return [i for i in range(200) if any(f"Question number {i}:" in text for text in _texts(answer))]


def _ask(http, server, messages: list[dict], **extra) -> dict:
    return whole(http, CHAT, server.model, messages=messages, max_tokens=2, temperature=0, raw_output=True, **extra)


def test_earliest_turns_go_first(http, server):
    messages = _conversation(8)
    full = _ask(http, server, messages)
    assert full["usage"]["prompt_tokens"] > 300
    assert _kept_questions(full) == list(range(8))
    answer = _ask(http, server, messages, prompt_truncate_len=150)
    assert answer["usage"]["prompt_tokens"] <= 150
    texts = _texts(answer)
    assert any(text.endswith(SYSTEM) for text in texts)  # the system prompt whole
    assert any(text.endswith(LAST) for text in texts)  # the latest user message whole
    kept = _kept_questions(answer)
    assert kept and kept == list(range(8 - len(kept), 8))  # a suffix of the turns: the earliest went
    assert len(kept) < 8
    # assistant answers of evicted turns went too
    assert not any("The number 0 comes after" in text for text in texts)
    # what the model saw is what the usage counts
    assert len(answer["choices"][0]["raw_output"]["prompt_token_ids"]) == answer["usage"]["prompt_tokens"]


def test_echo_shows_the_truncated_prompt(http, server):
    answer = whole(http, CHAT, server.model, messages=_conversation(8), max_tokens=1, temperature=0, echo=True,
                   prompt_truncate_len=100)
    content = answer["choices"][0]["message"]["content"]
    assert content.startswith(f"<|im_start|>system\n{SYSTEM}<|im_end|>")
    assert f"<|im_start|>user\n{LAST}<|im_end|>\n<|im_start|>assistant\n" in content
    assert "Question number 0:" not in content


def test_a_limit_above_the_prompt_changes_nothing(http, server):
    messages = _conversation(2)
    full = _ask(http, server, messages)
    roomy = _ask(http, server, messages, prompt_truncate_len=full["usage"]["prompt_tokens"] + 50)
    assert roomy["choices"][0]["raw_output"]["prompt_token_ids"] == full["choices"][0]["raw_output"]["prompt_token_ids"]


def test_the_system_prompt_is_cut_as_a_last_resort(http, server):
    messages = _conversation(1)
    bare = _ask(http, server, [{"role": "system", "content": ""}, {"role": "user", "content": LAST}])
    whole_system = _ask(http, server, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": LAST}])
    floor, ceiling = bare["usage"]["prompt_tokens"], whole_system["usage"]["prompt_tokens"]
    assert ceiling - floor >= 8
    limit = (floor + ceiling) // 2
    answer = _ask(http, server, messages, prompt_truncate_len=limit)
    assert answer["usage"]["prompt_tokens"] <= limit
    texts = _texts(answer)
    assert _kept_questions(answer) == []  # every earlier turn went before the system prompt was touched
    assert any(text.endswith(LAST) for text in texts)
    fragments = answer["choices"][0]["raw_output"]["prompt_fragments"]
    assert fragments[0] == IM_START and isinstance(fragments[1], str) and fragments[1].startswith("system\n")
    kept_system = fragments[1][len("system\n"):]
    assert kept_system and SYSTEM.startswith(kept_system) and len(kept_system) < len(SYSTEM)


def test_truncation_rescues_a_conversation_longer_than_the_context(http, server):
    messages = _conversation(150)  # about 4,700 tokens: more than the server's whole KV pool (4 x 1024)
    error = refused(http, CHAT, server.model, messages=messages, max_tokens=2)
    assert error["code"] == "context_length_exceeded"
    answer = _ask(http, server, messages, prompt_truncate_len=200)
    assert answer["usage"]["prompt_tokens"] <= 200
    kept = _kept_questions(answer)
    assert kept and kept[-1] == 149 and 0 not in kept


def test_truncation_without_a_system_prompt(http, server):
    answer = _ask(http, server, _conversation(6, system=False), prompt_truncate_len=120)
    assert answer["usage"]["prompt_tokens"] <= 120
    kept = _kept_questions(answer)
    assert kept and kept == list(range(6 - len(kept), 6)) and len(kept) < 6
    assert any(text.endswith(LAST) for text in _texts(answer))


def test_truncation_in_a_stream(http, server):
    messages = _conversation(8)
    expected = _ask(http, server, messages, prompt_truncate_len=120)
    chunks = stream(http, CHAT, server.model, messages=messages, max_tokens=2, temperature=0, raw_output=True,
                    prompt_truncate_len=120)
    [raw] = [choice["raw_output"] for choice in choice_chunks(chunks) if "raw_output" in choice]
    assert raw["prompt_token_ids"] == expected["choices"][0]["raw_output"]["prompt_token_ids"]
    assert raw["prompt_fragments"] == expected["choices"][0]["raw_output"]["prompt_fragments"]
    assert chunks[-1]["usage"]["prompt_tokens"] == expected["usage"]["prompt_tokens"] <= 120
    assert stream_text(chunks) == expected["choices"][0]["message"]["content"]
