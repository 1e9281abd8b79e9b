"""`stream_options.buffer_tokens` / `buffer_ms` / `buffer_mode`: streamed deltas coalesced into
fewer chunks, with the same text, token ids and logprobs, over real HTTP with the real model."""

from __future__ import annotations

import math

import httpx
import pytest

from tests.fireworks_shapes import (
    CHAT,
    COMPLETIONS,
    choice_chunks,
    stream,
    stream_logprob_content,
    stream_text,
    stream_token_ids,
)

TOKENS = 16
PROMPT = "Once upon a time"
STORY = [{"role": "user", "content": "Tell me a story about a dragon."}]
FOREVER_MS = 600_000  # longer than any test: only the token threshold (or the end) flushes


def _body(path: str, **extra) -> dict:
    body = {"messages": STORY} if path == CHAT else {"prompt": PROMPT}
    return {**body, "max_tokens": TOKENS, "temperature": 0, "ignore_eos": True, **extra}


def _text_chunks(chunks: list[dict], index: int = 0) -> list[dict]:
    parts = choice_chunks(chunks, index)
    return [p for p in parts if (p["delta"].get("content") if "delta" in p else p["text"])]


def _finish_position(chunks: list[dict], index: int = 0) -> int:
    parts = choice_chunks(chunks, index)
    return next(i for i, part in enumerate(parts) if part.get("finish_reason"))


@pytest.fixture(scope="module")
def unbuffered(http_module, server):
    return {path: stream(http_module, path, server.model, **_body(path)) for path in (CHAT, COMPLETIONS)}


@pytest.fixture(scope="module")
def http_module(server):
    with httpx.Client(base_url=server.base_url, timeout=120) as client:
        yield client


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_buffer_tokens_cuts_the_chunks(http, server, unbuffered, path):
    plain = unbuffered[path]
    assert len(_text_chunks(plain)) >= TOKENS - 2  # about one chunk per token without buffering
    chunks = stream(http, path, server.model, **_body(path), stream_options={"buffer_tokens": 4})
    assert stream_text(chunks) == stream_text(plain)
    count = len(_text_chunks(chunks))
    assert 2 <= count <= math.ceil(TOKENS / 4) + 1  # about 4x fewer than the ~16 unbuffered ones


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_buffer_ms_holds_everything_until_the_end(http, server, unbuffered, path):
    chunks = stream(http, path, server.model, **_body(path), stream_options={"buffer_ms": FOREVER_MS,
                                                                               "buffer_tokens": 0})
    texts = _text_chunks(chunks)
    assert len(texts) == 1
    assert stream_text(chunks) == stream_text(unbuffered[path])
    parts = choice_chunks(chunks)
    assert parts.index(texts[0]) < _finish_position(chunks)  # the text comes before the finish chunk


def test_buffer_mode_all_needs_both_thresholds(http, server, unbuffered):
    chunks = stream(http, COMPLETIONS, server.model, **_body(COMPLETIONS),
                    stream_options={"buffer_tokens": 4, "buffer_ms": FOREVER_MS, "buffer_mode": "all"})
    assert len(_text_chunks(chunks)) == 1  # the time threshold is never reached
    assert stream_text(chunks) == stream_text(unbuffered[COMPLETIONS])
    chunks = stream(http, COMPLETIONS, server.model, **_body(COMPLETIONS),
                    stream_options={"buffer_tokens": 4, "buffer_ms": 1, "buffer_mode": "all"})
    assert 2 <= len(_text_chunks(chunks)) <= math.ceil(TOKENS / 4) + 1
    assert stream_text(chunks) == stream_text(unbuffered[COMPLETIONS])


def test_buffer_mode_any_flushes_at_either_threshold(http, server, unbuffered):
    chunks = stream(http, COMPLETIONS, server.model, **_body(COMPLETIONS),
                    stream_options={"buffer_tokens": 4, "buffer_ms": FOREVER_MS, "buffer_mode": "any"})
    assert 2 <= len(_text_chunks(chunks)) <= math.ceil(TOKENS / 4) + 1
    assert stream_text(chunks) == stream_text(unbuffered[COMPLETIONS])


def test_buffered_chunks_keep_token_ids_and_logprobs(http, server):
    body = _body(CHAT, logprobs=True, top_logprobs=1, return_token_ids=True)
    plain = stream(http, CHAT, server.model, **body)
    chunks = stream(http, CHAT, server.model, **body, stream_options={"buffer_tokens": 4,
                                                                     "include_internal_content": True})
    assert stream_text(chunks) == stream_text(plain)
    assert stream_token_ids(chunks) == stream_token_ids(plain)
    assert len(stream_token_ids(chunks)) == TOKENS
    buffered_entries = stream_logprob_content(chunks)
    assert [e["token_id"] for e in buffered_entries] == stream_token_ids(plain)
    assert [e["text_offset"] for e in buffered_entries] == [e["text_offset"] for e in stream_logprob_content(plain)]
    for part in _text_chunks(chunks):
        # each merged chunk carries the ids and logprobs of exactly the tokens behind its text
        assert part["delta"]["internal_content"]["token_id"] == part["token_ids"]
        assert [e["token_id"] for e in part["logprobs"]["content"]] == part["token_ids"]
        assert "".join(e["token"] for e in part["logprobs"]["content"]) == part["delta"]["content"]


def test_buffering_each_choice(http, server):
    body = {"prompt": ["Once upon a time", "The best way to cook rice is"], "max_tokens": 8, "temperature": 0,
                "ignore_eos": True}
    plain = stream(http, COMPLETIONS, server.model, **body)
    chunks = stream(http, COMPLETIONS, server.model, **body, stream_options={"buffer_tokens": 4})
    for index in (0, 1):
        assert stream_text(chunks, index) == stream_text(plain, index)
        assert 1 <= len(_text_chunks(chunks, index)) <= 3
    assert chunks[-1]["usage"]["completion_tokens"] == 16
