"""`echo` / `echo_last` (prompt text and prompt log-probabilities before the completion) and token
ids (`return_token_ids`, `stream_options.include_internal_content`, chat `prompt_token_ids` as
input) over real HTTP with the real model."""

from __future__ import annotations

import copy

import pytest

from tests.fireworks_shapes import (
    CHAT,
    COMPLETIONS,
    FRANCE,
    IM_END,
    IM_START,
    choice_chunks,
    refused,
    stream,
    stream_legacy_logprobs,
    stream_text,
    stream_token_ids,
    validate,
    whole,
    without_echo_nulls,
)

GREETING = [{"role": "user", "content": "Hi"}]
MARKUP = {IM_START: "<|im_start|>", IM_END: "<|im_end|>"}


def _validate_echoed(answer: dict) -> None:
    """The spec's schema, apart from the echoed prompt's first position (its null logprob)."""
    trimmed = copy.deepcopy(answer)
    for choice in trimmed["choices"]:
        if choice.get("logprobs"):
            choice["logprobs"] = without_echo_nulls(choice["logprobs"])
    validate("CompletionResponse", trimmed)


def _prompt_ids(http, server, prompt: str) -> list[int]:
    answer = whole(http, COMPLETIONS, server.model, prompt=prompt, max_tokens=0, return_token_ids=True)
    return answer["choices"][0]["prompt_token_ids"]


# ---- echo on /v1/completions ----------------------------------------------------------------------


def test_score_the_prompt(http, server):
    """The classic scoring request: echo, no completion, one logprob per prompt token."""
    answer = whole(http, COMPLETIONS, server.model, check_schema=False, prompt=FRANCE, echo=True, max_tokens=0,
                   logprobs=1, return_token_ids=True)
    _validate_echoed(answer)
    choice = answer["choices"][0]
    assert choice["text"] == FRANCE
    assert answer["usage"]["completion_tokens"] == 0
    logprobs = choice["logprobs"]
    count = answer["usage"]["prompt_tokens"]
    assert len(logprobs["tokens"]) == len(logprobs["token_logprobs"]) == len(logprobs["text_offset"]) == count
    assert logprobs["token_ids"] == choice["prompt_token_ids"]
    assert "".join(logprobs["tokens"]) == FRANCE
    assert logprobs["text_offset"] == [len("".join(logprobs["tokens"][:i])) for i in range(count)]
    assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
    for token, logprob, top in zip(logprobs["tokens"][1:], logprobs["token_logprobs"][1:],
                                   logprobs["top_logprobs"][1:], strict=True):
        assert logprob is not None and logprob <= 0
        assert top[token] == logprob and 1 <= len(top) <= 2


def test_prompt_scores_match_generation(http, server):
    """A prompt token's echoed logprob is what the model gives that token when it generates it."""
    generated = whole(http, COMPLETIONS, server.model, prompt=FRANCE, max_tokens=1, temperature=0, logprobs=1)
    [token] = generated["choices"][0]["logprobs"]["tokens"]  # which token is this machine's model's
    assert token
    scored = whole(http, COMPLETIONS, server.model, check_schema=False, prompt=FRANCE + token, echo=True,
                   max_tokens=0, logprobs=1)
    logprobs = scored["choices"][0]["logprobs"]
    assert logprobs["tokens"][-1] == token
    assert logprobs["token_logprobs"][-1] == pytest.approx(
        generated["choices"][0]["logprobs"]["token_logprobs"][0], abs=1e-3)


def test_echo_with_completion(http, server):
    answer = whole(http, COMPLETIONS, server.model, check_schema=False, prompt=FRANCE, echo=True, max_tokens=3,
                   temperature=0, logprobs=2, ignore_eos=True)
    _validate_echoed(answer)
    plain = whole(http, COMPLETIONS, server.model, prompt=FRANCE, max_tokens=3, temperature=0, logprobs=2,
                  ignore_eos=True)
    choice, plain_choice = answer["choices"][0], plain["choices"][0]
    assert choice["text"] == FRANCE + plain_choice["text"]
    logprobs = choice["logprobs"]
    prompt_count = answer["usage"]["prompt_tokens"]
    assert len(logprobs["tokens"]) == prompt_count + 3
    assert logprobs["tokens"][prompt_count:] == plain_choice["logprobs"]["tokens"]
    # the completion's offsets continue after the echoed prompt
    assert logprobs["text_offset"][prompt_count:] == [len(FRANCE) + o for o in plain_choice["logprobs"]["text_offset"]]
    assert logprobs["token_logprobs"][prompt_count:] == pytest.approx(
        plain_choice["logprobs"]["token_logprobs"], abs=1e-4)


def test_echo_without_logprobs(http, server):
    answer = whole(http, COMPLETIONS, server.model, prompt=FRANCE, echo=True, max_tokens=2, temperature=0)
    plain = whole(http, COMPLETIONS, server.model, prompt=FRANCE, max_tokens=2, temperature=0)
    assert answer["choices"][0]["text"] == FRANCE + plain["choices"][0]["text"]
    assert answer["choices"][0]["logprobs"] is None


def test_echo_last(http, server):
    ids = _prompt_ids(http, server, FRANCE)
    assert len(ids) == 5
    answer = whole(http, COMPLETIONS, server.model, prompt=FRANCE, echo_last=2, max_tokens=2, temperature=0,
                   logprobs=1, ignore_eos=True)
    plain = whole(http, COMPLETIONS, server.model, prompt=FRANCE, max_tokens=2, temperature=0, ignore_eos=True)
    choice = answer["choices"][0]
    assert choice["text"] == " France is" + plain["choices"][0]["text"]
    logprobs = choice["logprobs"]
    validate("LogProbs", logprobs)  # no null: the echoed tokens all have a token before them
    assert logprobs["tokens"][:2] == [" France", " is"]
    assert logprobs["token_ids"][:2] == ids[-2:]
    assert len(logprobs["tokens"]) == 4
    assert all(value is not None and value <= 0 for value in logprobs["token_logprobs"])
    assert logprobs["text_offset"] == [0, 7, 10, 10 + len(logprobs["tokens"][2])]


def test_echo_last_zero_and_whole_prompt(http, server):
    zero = whole(http, COMPLETIONS, server.model, prompt=FRANCE, echo_last=0, max_tokens=2, temperature=0)
    plain = whole(http, COMPLETIONS, server.model, prompt=FRANCE, max_tokens=2, temperature=0)
    assert zero["choices"][0]["text"] == plain["choices"][0]["text"]
    # echo_last = len(prompt) is the same as echo = true
    everything = whole(http, COMPLETIONS, server.model, check_schema=False, prompt=FRANCE, echo_last=5,
                       max_tokens=0, logprobs=1)
    echoed = whole(http, COMPLETIONS, server.model, check_schema=False, prompt=FRANCE, echo=True, max_tokens=0,
                   logprobs=1)
    assert everything["choices"][0]["text"] == echoed["choices"][0]["text"] == FRANCE
    assert everything["choices"][0]["logprobs"]["token_logprobs"][0] is None
    assert everything["choices"][0]["logprobs"]["tokens"] == echoed["choices"][0]["logprobs"]["tokens"]


def test_echo_new_shape_first_token_is_null(http, server):
    answer = whole(http, COMPLETIONS, server.model, check_schema=False, prompt=FRANCE, echo=True, max_tokens=2,
                   temperature=0, logprobs=True, top_logprobs=1, ignore_eos=True)  # 2 tokens on any machine
    _validate_echoed(answer)
    content = answer["choices"][0]["logprobs"]["content"]
    assert len(content) == 5 + 2
    assert content[0]["logprob"] is None and content[0]["token"] == "The"
    assert all(entry["logprob"] is not None and entry["logprob"] <= 0 for entry in content[1:])
    assert [entry["text_offset"] for entry in content[:5]] == [0, 3, 11, 14, 21]
    assert content[5]["text_offset"] == len(FRANCE)
    assert content[-1]["sampling_logprob"] == 0


def test_echo_stream(http, server):
    body = {"prompt": FRANCE, "echo": True, "max_tokens": 3, "temperature": 0, "logprobs": 1, "ignore_eos": True}
    expected = whole(http, COMPLETIONS, server.model, check_schema=False, **body)
    chunks = stream(http, COMPLETIONS, server.model, check_schema=False, **body)
    assert stream_text(chunks) == expected["choices"][0]["text"]
    assert stream_text(chunks).startswith(FRANCE)
    streamed = stream_legacy_logprobs(chunks)
    logprobs = expected["choices"][0]["logprobs"]
    assert streamed["tokens"] == logprobs["tokens"]
    assert streamed["text_offset"] == logprobs["text_offset"]
    assert streamed["token_logprobs"][0] is None
    assert streamed["token_logprobs"][1:] == pytest.approx(logprobs["token_logprobs"][1:], abs=1e-4)
    for chunk in chunks:
        trimmed = copy.deepcopy(chunk)
        for choice in trimmed["choices"]:
            if choice.get("logprobs") and choice["logprobs"]["token_logprobs"][:1] == [None]:
                choice["logprobs"] = without_echo_nulls(choice["logprobs"])
        validate("CompletionStreamResponse", trimmed)


def test_echo_stream_without_logprobs(http, server):
    chunks = stream(http, COMPLETIONS, server.model, prompt=FRANCE, echo=True, max_tokens=2, temperature=0)
    plain = whole(http, COMPLETIONS, server.model, prompt=FRANCE, max_tokens=2, temperature=0)
    assert stream_text(chunks) == FRANCE + plain["choices"][0]["text"]


# ---- echo on chat ----------------------------------------------------------------------------------


def _rendered(fragments: list) -> str:
    return "".join(MARKUP[f] if isinstance(f, int) else f for f in fragments)


def test_chat_echo_prepends_the_rendered_prompt(http, server):
    plain = whole(http, CHAT, server.model, messages=GREETING, max_tokens=4, temperature=0, raw_output=True)
    echoed = whole(http, CHAT, server.model, messages=GREETING, max_tokens=4, temperature=0, echo=True)
    prompt = _rendered(plain["choices"][0]["raw_output"]["prompt_fragments"])
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>user\nHi<|im_end|>\n"
                                                                          "<|im_start|>assistant\n")
    assert echoed["choices"][0]["message"]["content"] == prompt + plain["choices"][0]["message"]["content"]
    chunks = stream(http, CHAT, server.model, messages=GREETING, max_tokens=4, temperature=0, echo=True)
    assert stream_text(chunks) == echoed["choices"][0]["message"]["content"]


def test_chat_echo_with_logprobs(http, server):
    answer = whole(http, CHAT, server.model, check_schema=False, messages=GREETING, max_tokens=3, temperature=0,
                   echo=True, logprobs=True, top_logprobs=1)
    choice = answer["choices"][0]
    content, entries = choice["message"]["content"], choice["logprobs"]["content"]
    assert len(entries) == answer["usage"]["prompt_tokens"] + answer["usage"]["completion_tokens"]
    assert entries[0]["logprob"] is None and entries[0]["token"] == "<|im_start|>"
    assert all(entry["logprob"] is not None for entry in entries[1:])
    for entry in entries:  # the offsets index the echoed content, markup included
        assert content[entry["text_offset"]:entry["text_offset"] + len(entry["token"])] == entry["token"]
    trimmed = copy.deepcopy(answer)
    trimmed["choices"][0]["logprobs"] = without_echo_nulls(choice["logprobs"])
    validate("ChatCompletionResponse", trimmed)


def test_echo_stream_several_prompts_and_choices(http, server):
    body = {"prompt": [FRANCE, "Once upon a time"], "n": 2, "max_tokens": 2, "temperature": 0, "echo": True, "logprobs": 1}
    expected = whole(http, COMPLETIONS, server.model, check_schema=False, **body)
    chunks = stream(http, COMPLETIONS, server.model, check_schema=False, **body)
    assert len(expected["choices"]) == 4
    for choice in expected["choices"]:
        index = choice["index"]
        assert stream_text(chunks, index) == choice["text"]
        assert stream_legacy_logprobs(chunks, index)["text_offset"] == choice["logprobs"]["text_offset"]
    assert expected["choices"][2]["text"].startswith("Once upon a time")


# ---- return_token_ids -------------------------------------------------------------------------------


def test_completion_token_ids(http, server):
    answer = whole(http, COMPLETIONS, server.model, prompt=[FRANCE, "Once upon a time"], max_tokens=4,
                   temperature=0, return_token_ids=True, raw_output=True, ignore_eos=True)
    assert [c["index"] for c in answer["choices"]] == [0, 1]
    for choice in answer["choices"]:
        assert choice["prompt_token_ids"] == choice["raw_output"]["prompt_token_ids"]
        assert choice["token_ids"] == choice["raw_output"]["completion_token_ids"]
        assert len(choice["token_ids"]) == 4
    first, second = answer["choices"]
    assert first["prompt_token_ids"] == _prompt_ids(http, server, FRANCE)
    assert second["prompt_token_ids"] == _prompt_ids(http, server, "Once upon a time")
    assert answer["usage"]["prompt_tokens"] == len(first["prompt_token_ids"]) + len(second["prompt_token_ids"])
    # the ids are the text's tokens: fed back as a prompt they give the same text
    again = whole(http, COMPLETIONS, server.model, prompt=first["prompt_token_ids"] + first["token_ids"],
                  echo=True, max_tokens=0)
    assert again["choices"][0]["text"] == FRANCE + first["text"]


def test_completion_token_ids_absent_unless_asked(http, server):
    choice = whole(http, COMPLETIONS, server.model, prompt=FRANCE, max_tokens=2, temperature=0)["choices"][0]
    assert "prompt_token_ids" not in choice and "token_ids" not in choice


def test_completion_token_id_prompt_comes_back(http, server):
    ids = _prompt_ids(http, server, FRANCE)
    choice = whole(http, COMPLETIONS, server.model, prompt=ids, max_tokens=2, temperature=0,
                   return_token_ids=True)["choices"][0]
    assert choice["prompt_token_ids"] == ids


def test_completion_stream_token_ids(http, server):
    body = {"prompt": [FRANCE, "Once upon a time"], "max_tokens": 5, "temperature": 0, "return_token_ids": True,
                "ignore_eos": True}
    expected = whole(http, COMPLETIONS, server.model, **body)
    chunks = stream(http, COMPLETIONS, server.model, **body)
    for index, choice in enumerate(expected["choices"]):
        parts = choice_chunks(chunks, index)
        with_prompt = [i for i, part in enumerate(parts) if "prompt_token_ids" in part]
        assert with_prompt == [0]  # the choice's first chunk, and only that one
        assert parts[0]["prompt_token_ids"] == choice["prompt_token_ids"]
        assert stream_token_ids(chunks, index) == choice["token_ids"]
        assert stream_text(chunks, index) == choice["text"]
        for part in parts:
            if part["text"]:
                assert part["token_ids"], part  # every chunk with text carries its tokens


def test_chat_token_ids(http, server):
    answer = whole(http, CHAT, server.model, messages=GREETING, max_tokens=5, temperature=0,
                   return_token_ids=True, raw_output=True)
    choice = answer["choices"][0]
    assert answer["prompt_token_ids"] == choice["raw_output"]["prompt_token_ids"]
    assert len(answer["prompt_token_ids"]) == answer["usage"]["prompt_tokens"]
    assert answer["prompt_token_ids"][0] == IM_START
    assert choice["token_ids"] == choice["raw_output"]["completion_token_ids"]
    assert len(choice["token_ids"]) == answer["usage"]["completion_tokens"]
    assert "prompt_token_ids" not in choice  # chat puts them on the response


def test_chat_stream_token_ids_and_internal_content(http, server):
    body = {"messages": GREETING, "max_tokens": 6, "temperature": 0, "return_token_ids": True}
    expected = whole(http, CHAT, server.model, **body)
    chunks = stream(http, CHAT, server.model, **body, stream_options={"include_internal_content": True})
    assert chunks[0]["prompt_token_ids"] == expected["prompt_token_ids"]
    assert all("prompt_token_ids" not in chunk for chunk in chunks[1:])
    assert stream_token_ids(chunks) == expected["choices"][0]["token_ids"]
    internal = [token for choice in choice_chunks(chunks) for token in
                (choice["delta"].get("internal_content") or {}).get("token_id") or []]
    assert internal == expected["choices"][0]["token_ids"]
    for choice in choice_chunks(chunks):
        if choice["delta"].get("content"):
            assert choice["delta"]["internal_content"]["token_id"] == choice["token_ids"]
    assert stream_text(chunks) == expected["choices"][0]["message"]["content"]


def test_internal_content_alone(http, server):
    chunks = stream(http, CHAT, server.model, messages=GREETING, max_tokens=4, temperature=0, ignore_eos=True,
                    stream_options={"include_internal_content": True})  # 4 tokens, wherever the model would end
    ids = [token for choice in choice_chunks(chunks) for token in
           (choice["delta"].get("internal_content") or {}).get("token_id") or []]
    assert len(ids) == 4
    assert all("token_ids" not in choice for choice in choice_chunks(chunks))
    plain = stream(http, CHAT, server.model, messages=GREETING, max_tokens=4, temperature=0)
    assert all("internal_content" not in choice["delta"] for choice in choice_chunks(plain))


# ---- chat prompt_token_ids as input ------------------------------------------------------------------


def test_chat_prompt_token_ids_skip_the_template(http, server):
    messages = [{"role": "user", "content": "Name a color."}]
    templated = whole(http, CHAT, server.model, messages=messages, max_tokens=8, temperature=0,
                      return_token_ids=True)
    ids = templated["prompt_token_ids"]
    given = whole(http, CHAT, server.model, prompt_token_ids=ids, max_tokens=8, temperature=0,
                  return_token_ids=True, raw_output=True)
    assert given["choices"][0]["message"]["content"] == templated["choices"][0]["message"]["content"]
    assert given["choices"][0]["token_ids"] == templated["choices"][0]["token_ids"]
    assert given["usage"]["prompt_tokens"] == len(ids)
    assert given["prompt_token_ids"] == ids
    assert given["choices"][0]["raw_output"]["prompt_token_ids"] == ids
    # streamed the same
    chunks = stream(http, CHAT, server.model, prompt_token_ids=ids, max_tokens=8, temperature=0)
    assert stream_text(chunks) == templated["choices"][0]["message"]["content"]


def test_chat_prompt_token_ids_with_messages_is_refused(http, server):
    error = refused(http, CHAT, server.model, messages=GREETING, prompt_token_ids=[IM_START, 4093, 198],
                    max_tokens=1)
    assert "not both" in error["message"]
    error = refused(http, CHAT, server.model, prompt_token_ids=[10 ** 7], max_tokens=1)
    assert error["param"] == "prompt_token_ids"
