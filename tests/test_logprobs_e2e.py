"""Log-probabilities and sampling masks over real HTTP with the real model, in both of the spec's
shapes (legacy `LogProbs` for `logprobs: N`, `NewLogProbs` for `logprobs: true`), checked
against the spec's schemas and against what the values must mean."""

from __future__ import annotations

import base64
import math
import struct

import httpx
import pytest

from tests.conftest import ONE_SMALL_SLOT, POOL
from tests.fireworks_shapes import (
    CHAT,
    COMPLETIONS,
    FRANCE,
    IM_END,
    IM_START,
    VOCAB_SIZE,
    refused,
    stream,
    stream_legacy_logprobs,
    stream_logprob_content,
    stream_text,
    validate,
    whole,
)

GREETING = [{"role": "user", "content": "Hi"}]
STORY = [{"role": "user", "content": "Tell me a story"}]
LONDON = 4528  # " London": far from the top choice after FRANCE (" Paris")
TOL = 1e-4


def _legacy(answer: dict) -> dict:
    return answer["choices"][0]["logprobs"]


def _content(answer: dict) -> list[dict]:
    return answer["choices"][0]["logprobs"]["content"]


def _logsumexp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def test_markup_token_ids_of_the_vocabulary(http, server):
    answer = whole(http, COMPLETIONS, server.model, prompt="<|im_start|><|im_end|>", max_tokens=0,
                   return_token_ids=True)
    assert answer["choices"][0]["prompt_token_ids"] == [IM_START, IM_END]


# ---- legacy shape (logprobs: N) -------------------------------------------------------------------


def test_completion_legacy_logprobs(http, server):
    answer = whole(http, COMPLETIONS, server.model, prompt=FRANCE, max_tokens=6, temperature=0, logprobs=3,
                   return_token_ids=True, ignore_eos=True)
    choice = answer["choices"][0]
    logprobs = choice["logprobs"]
    validate("LogProbs", logprobs)
    count = answer["usage"]["completion_tokens"]
    assert count == 6
    for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset", "token_ids"):
        assert len(logprobs[key]) == count, key
    assert "".join(logprobs["tokens"]) == choice["text"]
    assert logprobs["token_ids"] == choice["token_ids"]
    assert logprobs["text_offset"] == [len("".join(logprobs["tokens"][:i])) for i in range(count)]
    # the first token is the one-token greedy answer (this machine's; which token it is is the model's)
    first = whole(http, COMPLETIONS, server.model, prompt=FRANCE, max_tokens=1, temperature=0, ignore_eos=True)
    assert logprobs["tokens"][0] == first["choices"][0]["text"]
    for token, logprob, top in zip(logprobs["tokens"], logprobs["token_logprobs"], logprobs["top_logprobs"],
                                   strict=True):
        assert logprob <= 0
        assert len(top) == 3  # greedy: the sampled token is the most likely one, so N entries
        assert top[token] == logprob
        assert logprob == max(top.values())
        assert all(value <= 0 for value in top.values())
        assert sum(math.exp(value) for value in top.values()) <= 1 + 1e-6


def test_legacy_top_holds_the_sampled_token_beyond_n(http, server):
    """The sampled token is always in the dict: up to N+1 entries."""
    answer = whole(http, COMPLETIONS, server.model, prompt=FRANCE, max_tokens=1, temperature=1, seed=1,
                   logprobs=2, logit_bias={str(LONDON): 100})
    logprobs = _legacy(answer)
    assert logprobs["tokens"] == [" London"] and logprobs["token_ids"] == [LONDON]
    [top] = logprobs["top_logprobs"]
    assert len(top) == 3
    assert top[" London"] == logprobs["token_logprobs"][0]
    # logprob is under the model's distribution, not the biased one: below the N likeliest tokens'
    assert all(value > top[" London"] for token, value in top.items() if token != " London") and top[" London"] < -1


def test_legacy_logprobs_zero_gives_the_sampled_token_only(http, server):
    logprobs = _legacy(whole(http, COMPLETIONS, server.model, prompt=FRANCE, max_tokens=3, temperature=0,
                             logprobs=0))
    assert [list(top) for top in logprobs["top_logprobs"]] == [[token] for token in logprobs["tokens"]]


def test_legacy_top_logprobs_overrides_n(http, server):
    logprobs = _legacy(whole(http, COMPLETIONS, server.model, prompt=FRANCE, max_tokens=3, temperature=0,
                             logprobs=1, top_logprobs=3))
    assert [len(top) for top in logprobs["top_logprobs"]] == [3, 3, 3]


def test_chat_legacy_logprobs(http, server):
    answer = whole(http, CHAT, server.model, messages=GREETING, max_tokens=4, temperature=0, logprobs=2,
                   return_token_ids=True, ignore_eos=True)  # 4 tokens, wherever the model would end
    choice = answer["choices"][0]
    logprobs = choice["logprobs"]
    validate("LogProbs", logprobs)
    assert "".join(logprobs["tokens"]) == choice["message"]["content"]
    assert logprobs["token_ids"] == choice["token_ids"]
    assert [len(top) for top in logprobs["top_logprobs"]] == [2] * 4


def test_offsets_and_bytes_of_multibyte_text(http, server):
    """A character split over tokens counts once in text offsets (at the token completing it);
    `bytes` carries each token's exact bytes, whatever its text shows."""
    prompt = "I love 😀 and café!"
    content = _content(whole(http, COMPLETIONS, server.model, check_schema=False, prompt=prompt, echo=True,
                             max_tokens=0, logprobs=True))
    assert b"".join(bytes(entry["bytes"]) for entry in content) == prompt.encode()
    offsets = [entry["text_offset"] for entry in content]
    assert offsets == sorted(offsets) and offsets[-1] == len(prompt) - 1
    for entry in content:
        if "\ufffd" not in entry["token"]:
            assert prompt[entry["text_offset"]:entry["text_offset"] + len(entry["token"])] == entry["token"]
    legacy = _legacy(whole(http, COMPLETIONS, server.model, check_schema=False, prompt=prompt, echo=True,
                           max_tokens=0, logprobs=0))
    assert legacy["text_offset"] == offsets


# ---- OpenAI shape (logprobs: true) ------------------------------------------------------------------


def _check_new_entry(entry: dict, top: int) -> None:
    assert set(entry) >= {"token", "logprob", "sampling_logprob", "bytes", "top_logprobs", "token_id",
                          "text_offset"}
    assert entry["logprob"] <= 0
    assert entry["bytes"] == list(entry["token"].encode())
    assert len(entry["top_logprobs"]) == top
    for alternative in entry["top_logprobs"]:
        assert set(alternative) == {"token", "logprob", "token_id", "bytes"}
        assert alternative["bytes"] == list(alternative["token"].encode())
        assert 0 <= alternative["token_id"] < VOCAB_SIZE and alternative["logprob"] <= 0
    values = [alternative["logprob"] for alternative in entry["top_logprobs"]]
    assert values == sorted(values, reverse=True)


def test_chat_new_logprobs_greedy(http, server):
    answer = whole(http, CHAT, server.model, messages=GREETING, max_tokens=6, temperature=0, logprobs=True,
                   top_logprobs=3, return_token_ids=True)
    choice = answer["choices"][0]
    validate("NewLogProbs", choice["logprobs"])
    content = choice["logprobs"]["content"]
    assert len(content) == answer["usage"]["completion_tokens"] == len(choice["token_ids"])
    assert [entry["token_id"] for entry in content] == choice["token_ids"]
    assert "".join(entry["token"] for entry in content) == choice["message"]["content"]
    offset = 0
    for entry in content:
        _check_new_entry(entry, top=3)
        assert entry["text_offset"] == offset
        offset += len(entry["token"])
        best = entry["top_logprobs"][0]
        assert best["token_id"] == entry["token_id"] and best["token"] == entry["token"]
        assert best["logprob"] == pytest.approx(entry["logprob"], abs=1e-6)
        assert entry["sampling_logprob"] == 0  # greedy: the one token that could be drawn


def test_completion_new_logprobs_shape(http, server):
    answer = whole(http, COMPLETIONS, server.model, prompt=FRANCE, max_tokens=4, temperature=0, logprobs=True,
                   top_logprobs=2)
    content = _content(answer)
    assert content and "".join(entry["token"] for entry in content) == answer["choices"][0]["text"]
    for entry in content:
        _check_new_entry(entry, top=2)


def test_top_logprobs_default_is_none_listed(http, server):
    content = _content(whole(http, CHAT, server.model, messages=GREETING, max_tokens=3, temperature=0,
                             logprobs=True))
    assert content and all(entry["top_logprobs"] == [] for entry in content)
    assert all("sampling_mask_count" not in entry and "sampling_mask" not in entry for entry in content)


def test_no_logprobs_unless_asked(http, server):
    answer = whole(http, CHAT, server.model, messages=GREETING, max_tokens=3, temperature=0)
    assert answer["choices"][0]["logprobs"] is None
    answer = whole(http, COMPLETIONS, server.model, prompt=FRANCE, max_tokens=3, temperature=0, logprobs=False)
    assert answer["choices"][0]["logprobs"] is None


def test_top_k_1_samples_with_certainty(http, server):
    content = _content(whole(http, CHAT, server.model, messages=STORY, max_tokens=6, temperature=1, top_k=1,
                             seed=3, logprobs=True, top_logprobs=1))
    for entry in content:
        assert entry["sampling_logprob"] == pytest.approx(0, abs=1e-6)
        assert entry["top_logprobs"][0]["token_id"] == entry["token_id"]
        assert entry["logprob"] < 0


def test_sampling_logprob_is_under_the_filtered_distribution(http, server):
    """top_k 5 at temperature 1: the sampler draws from the 5 best renormalized, so the sampled
    token's sampling_logprob is its logprob minus the log of the 5 best's total probability."""
    content = _content(whole(http, CHAT, server.model, messages=STORY, max_tokens=8, temperature=1, top_k=5,
                             seed=7, logprobs=True, top_logprobs=5))
    assert len(content) == 8
    for entry in content:
        top_ids = [alternative["token_id"] for alternative in entry["top_logprobs"]]
        assert entry["token_id"] in top_ids
        assert entry["sampling_logprob"] >= entry["logprob"] - 1e-6
        mass = _logsumexp([alternative["logprob"] for alternative in entry["top_logprobs"]])
        assert entry["sampling_logprob"] == pytest.approx(entry["logprob"] - mass, abs=TOL)


def test_sampling_logprob_sees_the_logit_bias(http, server):
    [entry] = _content(whole(http, COMPLETIONS, server.model, prompt=FRANCE, max_tokens=1, temperature=1, seed=1,
                             logprobs=True, top_logprobs=2, logit_bias={str(LONDON): 100}))
    assert entry["token_id"] == LONDON
    assert entry["logprob"] < -1  # the model's own view
    assert entry["sampling_logprob"] == pytest.approx(0, abs=1e-4)  # what the sampler drew from
    # the alternatives are the model's own two best, as an unbiased request lists them
    [unbiased] = _content(whole(http, COMPLETIONS, server.model, prompt=FRANCE, max_tokens=1, temperature=0,
                                logprobs=True, top_logprobs=2))
    assert [a["token_id"] for a in entry["top_logprobs"]] == [a["token_id"] for a in unbiased["top_logprobs"]]


# ---- limits -----------------------------------------------------------------------------------------


def test_default_limit_is_five(http, server):
    error = refused(http, COMPLETIONS, server.model, prompt=FRANCE, max_tokens=1, logprobs=6)
    assert error["param"] == "logprobs" and "between 0 and 5" in error["message"]
    error = refused(http, CHAT, server.model, messages=GREETING, max_tokens=1, logprobs=True, top_logprobs=6)
    assert error["param"] == "top_logprobs"
    content = _content(whole(http, CHAT, server.model, messages=GREETING, max_tokens=1, temperature=0,
                             logprobs=True, top_logprobs=5))
    assert len(content[0]["top_logprobs"]) == 5
    legacy = _legacy(whole(http, COMPLETIONS, server.model, prompt=FRANCE, max_tokens=1, temperature=0,
                           logprobs=5))
    assert len(legacy["top_logprobs"][0]) == 5


def test_max_logprobs_option():
    small = POOL.get(*ONE_SMALL_SLOT, "--max-logprobs", "2")
    with httpx.Client(base_url=small.base_url, timeout=60) as client:
        error = refused(client, CHAT, small.model, messages=GREETING, max_tokens=1, logprobs=True,
                        top_logprobs=3)
        assert error["param"] == "top_logprobs" and "between 0 and 2" in error["message"]
        error = refused(client, COMPLETIONS, small.model, prompt=FRANCE, max_tokens=1, logprobs=3)
        assert error["param"] == "logprobs"
        content = _content(whole(client, CHAT, small.model, messages=GREETING, max_tokens=2, temperature=0,
                                 logprobs=True, top_logprobs=2))
        assert [len(entry["top_logprobs"]) for entry in content] == [2, 2]
        legacy = _legacy(whole(client, COMPLETIONS, small.model, prompt=FRANCE, max_tokens=2,
                               temperature=0, logprobs=2))
        assert [len(top) for top in legacy["top_logprobs"]] == [2, 2]


# ---- streams ----------------------------------------------------------------------------------------


def test_completion_stream_logprobs_equal_the_whole_ones(http, server):
    body = {"prompt": FRANCE, "max_tokens": 6, "temperature": 0, "logprobs": 2, "ignore_eos": True}
    expected = _legacy(whole(http, COMPLETIONS, server.model, **body))
    chunks = stream(http, COMPLETIONS, server.model, **body)
    for chunk in chunks:
        for choice in chunk["choices"]:
            if choice["text"]:  # every token chunk carries its own positions
                assert "".join(choice["logprobs"]["tokens"]) == choice["text"]
    streamed = stream_legacy_logprobs(chunks)
    assert streamed["tokens"] == expected["tokens"]
    assert streamed["token_ids"] == expected["token_ids"]
    assert streamed["text_offset"] == expected["text_offset"]
    assert streamed["token_logprobs"] == pytest.approx(expected["token_logprobs"], abs=TOL)
    assert [list(top) for top in streamed["top_logprobs"]] == [list(top) for top in expected["top_logprobs"]]


def test_chat_stream_logprobs_equal_the_whole_ones(http, server):
    body = {"messages": STORY, "max_tokens": 8, "temperature": 0, "logprobs": True, "top_logprobs": 2}
    expected = _content(whole(http, CHAT, server.model, **body))
    chunks = stream(http, CHAT, server.model, **body)
    streamed = stream_logprob_content(chunks)
    assert [e["token_id"] for e in streamed] == [e["token_id"] for e in expected]
    assert [e["text_offset"] for e in streamed] == [e["text_offset"] for e in expected]
    assert [e["logprob"] for e in streamed] == pytest.approx([e["logprob"] for e in expected], abs=TOL)
    assert [[a["token_id"] for a in e["top_logprobs"]] for e in streamed] == \
        [[a["token_id"] for a in e["top_logprobs"]] for e in expected]
    assert "".join(e["token"] for e in streamed) == stream_text(chunks)


# ---- sampling masks ---------------------------------------------------------------------------------


def _masked(http, server, path: str, mode: str, **body) -> list[dict]:
    prompt = {"messages": STORY} if path == CHAT else {"prompt": "Once upon a time"}
    return _content(whole(http, path, server.model, **prompt, max_tokens=5, logprobs=True, sampling_mask=mode,
                          **body))


def _decode_buffer(buffer: str) -> list[int]:
    raw = base64.b64decode(buffer)
    assert len(raw) % 4 == 0
    return list(struct.unpack(f"<{len(raw) // 4}I", raw))


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_sampling_mask_top_k(http, server, path):
    body = {"temperature": 1, "top_k": 5, "seed": 11}
    listed = _masked(http, server, path, "non_zero_list", **body)
    buffered = _masked(http, server, path, "non_zero_buffer", **body)
    counted = _masked(http, server, path, "count", **body)
    assert [e["token_id"] for e in listed] == [e["token_id"] for e in buffered] == [e["token_id"] for e in counted]
    for entry, buffer_entry, count_entry in zip(listed, buffered, counted, strict=True):
        ids = entry["sampling_mask"]
        assert isinstance(ids, list) and 1 <= entry["sampling_mask_count"] <= 5
        assert len(ids) == entry["sampling_mask_count"] and ids == sorted(set(ids))
        assert entry["token_id"] in ids
        assert isinstance(buffer_entry["sampling_mask"], str)
        assert _decode_buffer(buffer_entry["sampling_mask"]) == ids
        assert buffer_entry["sampling_mask_count"] == count_entry["sampling_mask_count"] == len(ids)
        assert "sampling_mask" not in count_entry


def test_sampling_mask_greedy_is_one_token(http, server):
    for entry in _masked(http, server, CHAT, "non_zero_list", temperature=0):
        assert entry["sampling_mask_count"] == 1
        assert entry["sampling_mask"] == [entry["token_id"]]
        assert entry["sampling_logprob"] == 0


def test_sampling_mask_full_vocabulary_gives_the_count_only(http, server):
    for mode in ("non_zero_list", "non_zero_buffer"):
        for entry in _masked(http, server, COMPLETIONS, mode, temperature=1, seed=5):
            assert entry["sampling_mask_count"] > 1000
            assert entry["sampling_mask_count"] <= VOCAB_SIZE
            assert "sampling_mask" not in entry


def test_sampling_mask_alone_turns_logprobs_on(http, server):
    """`sampling_mask` rides on the new-shape entries; with logprobs left out it still has a place."""
    answer = whole(http, CHAT, server.model, messages=STORY, max_tokens=3, temperature=1, top_k=3, seed=2,
                   sampling_mask="non_zero_list")
    content = _content(answer)
    assert len(content) == 3 and all(len(e["sampling_mask"]) <= 3 for e in content)


def test_sampling_mask_in_stream(http, server):
    chunks = stream(http, CHAT, server.model, messages=STORY, max_tokens=4, temperature=1, top_k=4, seed=9,
                    logprobs=True, sampling_mask="non_zero_buffer")
    entries = stream_logprob_content(chunks)
    assert len(entries) == 4
    for entry in entries:
        ids = _decode_buffer(entry["sampling_mask"])
        assert entry["token_id"] in ids and len(ids) == entry["sampling_mask_count"] <= 4


def test_sampling_mask_and_sampling_logprob_follow_the_grammar(http, server):
    """The grammar is one of the sampling filters: the first token of a JSON object must open it."""
    content = _content(whole(http, CHAT, server.model, messages=[{"role": "user", "content": "Give a JSON object."}],
                             max_tokens=2, temperature=1, seed=5, logprobs=True, sampling_mask="non_zero_list",
                             response_format={"type": "json_object"}))
    first = content[0]
    ids = first["sampling_mask"]
    assert 1 <= first["sampling_mask_count"] == len(ids) < 20
    assert first["token_id"] in ids and first["token"].startswith("{")
    texts = whole(http, COMPLETIONS, server.model, prompt=[[token] for token in ids], max_tokens=0, echo=True)
    assert all(choice["text"].startswith("{") for choice in texts["choices"])
    # drawn from the few tokens the grammar allows: far likelier than under the model alone
    assert first["sampling_logprob"] > first["logprob"]
