"""`raw_output` (what the model saw and wrote) and `perf_metrics` (headers always on whole answers,
the body when asked, the final stream chunk) over real HTTP with the real model; plus the
informational request fields and the text-only model's refusal of images."""

from __future__ import annotations

import uuid

import pytest

from tests.fireworks_shapes import (
    CHAT,
    COMPLETIONS,
    FRANCE,
    IM_END,
    IM_START,
    choice_chunks,
    finish_chunks,
    refused,
    send,
    stream,
    validate,
    whole,
)
from tests.grammar_support import longest_sentence

GREETING = [{"role": "user", "content": "Hi"}]
BASIC_METRICS = ("prompt-tokens", "cached-prompt-tokens", "server-time-to-first-token", "server-processing-time")
HEADERS = tuple(f"fireworks-{name}" for name in BASIC_METRICS)
NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
PNG = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9a"
       "wAAAABJRU5ErkJggg==")


# ---- raw_output ---------------------------------------------------------------------------------------


def test_chat_raw_output(http, server):
    answer = whole(http, CHAT, server.model, messages=GREETING, max_tokens=5, temperature=0, raw_output=True,
                   return_token_ids=True)
    choice = answer["choices"][0]
    raw = choice["raw_output"]
    validate("RawOutput", raw)
    fragments = raw["prompt_fragments"]
    assert fragments[0] == IM_START and fragments[-1] == "assistant\n"
    assert {f for f in fragments if isinstance(f, int)} == {IM_START, IM_END}  # the markup's special tokens
    assert any(isinstance(f, str) and f.endswith("Hi") for f in fragments)  # the user's text, as text
    ids = raw["prompt_token_ids"]
    assert ids == answer["prompt_token_ids"] and len(ids) == answer["usage"]["prompt_tokens"]
    # every special token of the prompt is one of the fragments' tokens, in the same order
    assert [t for t in ids if t in (IM_START, IM_END)] == [f for f in fragments if isinstance(f, int)]
    assert raw["completion"] == choice["message"]["content"]
    assert raw["completion_token_ids"] == choice["token_ids"]
    assert len(raw["completion_token_ids"]) == answer["usage"]["completion_tokens"]
    assert raw.get("completion_logprobs") is None  # only with logprobs
    assert raw.get("grammar") is None


def test_raw_output_absent_unless_asked(http, server):
    for path, body in ((CHAT, {"messages": GREETING}), (COMPLETIONS, {"prompt": FRANCE})):
        choice = whole(http, path, server.model, **body, max_tokens=2, temperature=0)["choices"][0]
        assert "raw_output" not in choice


def test_raw_output_completion_logprobs(http, server):
    answer = whole(http, CHAT, server.model, messages=GREETING, max_tokens=4, temperature=0, raw_output=True,
                   logprobs=True, top_logprobs=2)
    choice = answer["choices"][0]
    raw_logprobs = choice["raw_output"]["completion_logprobs"]
    validate("NewLogProbs", raw_logprobs)
    assert raw_logprobs == choice["logprobs"]
    # legacy logprobs on the choice; the raw output's are always the OpenAI shape
    answer = whole(http, COMPLETIONS, server.model, prompt=FRANCE, max_tokens=3, temperature=0, raw_output=True,
                   logprobs=2)
    choice = answer["choices"][0]
    raw_logprobs = choice["raw_output"]["completion_logprobs"]
    validate("NewLogProbs", raw_logprobs)
    assert [e["token"] for e in raw_logprobs["content"]] == choice["logprobs"]["tokens"]
    assert [e["token_id"] for e in raw_logprobs["content"]] == choice["logprobs"]["token_ids"]
    assert [len(e["top_logprobs"]) for e in raw_logprobs["content"]] == [2, 2, 2]


def test_completion_raw_output(http, server):
    answer = whole(http, COMPLETIONS, server.model, prompt=FRANCE, max_tokens=3, temperature=0, raw_output=True,
                   return_token_ids=True)
    choice = answer["choices"][0]
    raw = choice["raw_output"]
    assert raw["prompt_fragments"] == [FRANCE]
    assert raw["prompt_token_ids"] == choice["prompt_token_ids"]
    assert raw["completion"] == choice["text"]
    assert raw["completion_token_ids"] == choice["token_ids"]
    # a token-id prompt: its tokens are the fragments
    ids = choice["prompt_token_ids"]
    raw = whole(http, COMPLETIONS, server.model, prompt=ids, max_tokens=1, temperature=0,
                raw_output=True)["choices"][0]["raw_output"]
    assert raw["prompt_fragments"] == ids and raw["prompt_token_ids"] == ids


@pytest.mark.parametrize("response_format", [
    {"type": "json_object"},
    {"type": "json_object", "schema": NAME_SCHEMA},
    {"type": "json_schema", "json_schema": {"name": "person", "schema": NAME_SCHEMA}},
])
def test_raw_output_grammar(http, server, response_format):
    answer = whole(http, CHAT, server.model, messages=[{"role": "user", "content": "Give a JSON object."}],
                   max_tokens=6, temperature=0, raw_output=True, response_format=response_format)
    grammar = answer["choices"][0]["raw_output"]["grammar"]
    assert isinstance(grammar, str) and "root ::=" in grammar
    if "schema" in response_format or "json_schema" in response_format:
        assert '\\"name\\"' in grammar  # the schema's property made it into the grammar


def test_raw_output_shows_tool_call_markup_and_grammar(http, server):
    # the city's length bounded: the call is at most 359 bytes and ends within 384 tokens whatever
    # whitespace and name the model picks (its choices differ between CPUs)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"],
        "additionalProperties": False}}}]
    answer = whole(http, CHAT, server.model, messages=[{"role": "user", "content": "Weather in Paris?"}], tools=tools,
                   tool_choice="required", parallel_tool_calls=False, max_tokens=384, temperature=0, raw_output=True)
    choice = answer["choices"][0]
    raw = choice["raw_output"]
    assert "root ::=" in raw["grammar"] and "get_weather" in raw["grammar"]  # inferred from the template's syntax
    assert longest_sentence(raw["grammar"]) <= 384
    # the completion before the tool calls are parsed out of it
    assert raw["completion"].startswith("<tool_call>") and raw["completion"].endswith("</tool_call>")
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert any(isinstance(f, str) and "get_weather" in f for f in raw["prompt_fragments"])  # the tools, rendered


def test_raw_output_in_stream_finish_chunks(http, server):
    body = {"prompt": FRANCE, "max_tokens": 3, "temperature": 0, "raw_output": True, "n": 2, "ignore_eos": True}
    expected = whole(http, COMPLETIONS, server.model, **body)
    chunks = stream(http, COMPLETIONS, server.model, **body)
    for index in (0, 1):
        parts = choice_chunks(chunks, index)
        with_raw = [part for part in parts if "raw_output" in part]
        assert len(with_raw) == 1 and with_raw[0]["finish_reason"] == "length"
        assert with_raw[0]["raw_output"] == expected["choices"][index]["raw_output"]
    chat_chunks = stream(http, CHAT, server.model, messages=GREETING, max_tokens=4, temperature=0, raw_output=True,
                         logprobs=True, ignore_eos=True)  # 4 tokens, wherever the model would end
    parts = choice_chunks(chat_chunks)
    with_raw = [part for part in parts if "raw_output" in part]
    assert len(with_raw) == 1 and with_raw[0]["finish_reason"] is not None
    raw = with_raw[0]["raw_output"]
    assert raw["completion"] == "".join(p["delta"].get("content") or "" for p in parts)
    assert [e["token_id"] for e in raw["completion_logprobs"]["content"]] == raw["completion_token_ids"]
    assert len(raw["completion_token_ids"]) == 4


# ---- perf_metrics -------------------------------------------------------------------------------------


def _header_metrics(response) -> dict[str, float]:
    return {name[len("fireworks-"):]: float(response.headers[name]) for name in HEADERS}


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_perf_headers_always(http, server, path):
    body = {"messages": GREETING} if path == CHAT else {"prompt": FRANCE}
    response = send(http, path, server.model, **body, max_tokens=3, temperature=0,
                    prompt_cache_isolation_key=uuid.uuid4().hex)
    assert response.status_code == 200
    for name in HEADERS:
        assert name in response.headers, name
    metrics = _header_metrics(response)
    usage = response.json()["usage"]
    assert metrics["prompt-tokens"] == usage["prompt_tokens"]
    assert metrics["cached-prompt-tokens"] == usage["prompt_tokens_details"]["cached_tokens"] == 0
    assert 0 < metrics["server-time-to-first-token"] <= metrics["server-processing-time"]
    assert "perf_metrics" not in response.json()
    assert not any(name.startswith("fireworks-speculation") for name in response.headers)


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_perf_metrics_in_body(http, server, path):
    body = {"messages": GREETING} if path == CHAT else {"prompt": FRANCE}
    response = send(http, path, server.model, **body, max_tokens=3, temperature=0, perf_metrics_in_response=True)
    assert response.status_code == 200
    answer = response.json()
    metrics = answer["perf_metrics"]
    assert set(metrics) >= set(BASIC_METRICS)
    assert metrics == pytest.approx(_header_metrics(response))
    assert isinstance(metrics["prompt-tokens"], int) and isinstance(metrics["cached-prompt-tokens"], int)
    assert metrics["prompt-tokens"] == answer["usage"]["prompt_tokens"]
    assert metrics["cached-prompt-tokens"] == answer["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert 0 < metrics["server-time-to-first-token"] <= metrics["server-processing-time"]


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_perf_metrics_in_the_final_stream_chunk(http, server, path):
    body = {"messages": GREETING} if path == CHAT else {"prompt": FRANCE}
    chunks = stream(http, path, server.model, **body, max_tokens=3, temperature=0, n=2,
                    perf_metrics_in_response=True)
    with_perf = [i for i, chunk in enumerate(chunks) if "perf_metrics" in chunk]
    finishing = finish_chunks(chunks)
    assert len(finishing) == 2
    assert len(with_perf) == 1 and chunks[with_perf[0]] is finishing[-1]  # the last choice's finish chunk
    metrics = chunks[with_perf[0]]["perf_metrics"]
    assert set(metrics) >= set(BASIC_METRICS)
    usage = chunks[-1]["usage"]
    assert metrics["prompt-tokens"] == usage["prompt_tokens"]
    assert 0 < metrics["server-time-to-first-token"] <= metrics["server-processing-time"]
    plain = stream(http, path, server.model, **body, max_tokens=3, temperature=0)
    assert all("perf_metrics" not in chunk for chunk in plain)


def test_cached_prompt_tokens_count_the_reuse(http, server):
    key = uuid.uuid4().hex
    prompt = f"In the year {key[:6]} the village held a festival and"
    first = send(http, COMPLETIONS, server.model, prompt=prompt, max_tokens=2, temperature=0,
                 prompt_cache_isolation_key=key)
    second = send(http, COMPLETIONS, server.model, prompt=prompt, max_tokens=2, temperature=0,
                  prompt_cache_isolation_key=key)
    assert _header_metrics(first)["cached-prompt-tokens"] == 0
    reused = _header_metrics(second)["cached-prompt-tokens"]
    assert reused == second.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert 0 < reused < second.json()["usage"]["prompt_tokens"]


# ---- informational fields ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_informational_fields_are_accepted(http, server, path):
    body = {"messages": GREETING} if path == CHAT else {"prompt": FRANCE}
    plain = whole(http, path, server.model, **body, max_tokens=3, temperature=0)
    answer = whole(http, path, server.model, **body, max_tokens=3, temperature=0,
                   metadata={"team": "docs", "ticket": "42"}, user="user-1", prompt_cache_key="conversation-1",
                   service_tier="priority")
    assert answer["choices"][0] == plain["choices"][0]
    for tier in ("auto", "default", "flex"):
        whole(http, path, server.model, **body, max_tokens=1, service_tier=tier)


@pytest.mark.parametrize("part", [
    {"type": "image_url", "image_url": {"url": PNG}},
    {"type": "video_url", "video_url": {"url": "https://example.com/clip.mp4"}},
])
def test_chat_media_parts_are_refused(http, server, part):
    messages = [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, part]}]
    error = refused(http, CHAT, server.model, messages=messages, max_tokens=1)
    assert "this model does not accept images" in error["message"]
    assert error["param"] == "messages"


def test_completion_images_are_refused(http, server):
    error = refused(http, COMPLETIONS, server.model, prompt="Describe <image>", images=[PNG], max_tokens=1)
    assert "this model does not accept images" in error["message"]
    assert error["param"] == "images"
    unplaced = refused(http, COMPLETIONS, server.model, prompt="Describe the picture.", images=[PNG], max_tokens=1)
    assert "0 <image> placeholders for 1 images" in unplaced["message"] and unplaced["param"] == "images"
