"""The official `openai` and `fireworks-ai` SDKs against the local server, unchanged."""

from __future__ import annotations

import fireworks
import openai
import pytest

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]




def test_openai_completion(openai_client, server, http):
    result = openai_client.completions.create(model=server.model, prompt="The capital of France is",
                                              max_tokens=6, temperature=0)
    assert result.object == "text_completion"
    wire = http.post("/v1/completions", json={"model": server.model, "prompt": "The capital of France is",
                                              "max_tokens": 6, "temperature": 0}).json()
    [choice] = wire["choices"]
    assert result.choices[0].text == choice["text"] and choice["text"]
    assert result.choices[0].finish_reason == choice["finish_reason"]
    assert result.usage.completion_tokens == wire["usage"]["completion_tokens"]


def test_openai_completion_stream(openai_client, server):
    chunks = list(openai_client.completions.create(model=server.model, prompt="The capital of France is",
                                                   max_tokens=6, temperature=0, stream=True))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    whole = openai_client.completions.create(model=server.model, prompt="The capital of France is",
                                             max_tokens=6, temperature=0)
    assert text == whole.choices[0].text
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_openai_chat(openai_client, server, http):
    result = openai_client.chat.completions.create(model=server.model, messages=QUESTION, max_tokens=12, temperature=0)
    assert result.object == "chat.completion"
    wire = http.post("/v1/chat/completions", json={"model": server.model, "messages": QUESTION, "max_tokens": 12,
                                                   "temperature": 0}).json()
    [choice] = wire["choices"]
    assert result.choices[0].message.role == "assistant"
    assert result.choices[0].message.content == choice["message"]["content"] and choice["message"]["content"]
    assert result.choices[0].finish_reason == choice["finish_reason"]
    assert result.usage.completion_tokens == wire["usage"]["completion_tokens"]
    assert result.usage.prompt_tokens == wire["usage"]["prompt_tokens"]


def test_openai_chat_stream_with_usage(openai_client, server):
    stream = openai_client.chat.completions.create(
        model=server.model, messages=QUESTION, max_tokens=12, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    whole = openai_client.chat.completions.create(model=server.model, messages=QUESTION, max_tokens=12, temperature=0)
    assert text == whole.choices[0].message.content
    assert chunks[-1].usage.total_tokens == whole.usage.total_tokens


def test_openai_errors_map_to_sdk_exceptions(openai_client, server):
    with pytest.raises(openai.NotFoundError):
        openai_client.chat.completions.create(model="missing", messages=QUESTION)
    with pytest.raises(openai.UnprocessableEntityError):
        openai_client.chat.completions.create(model=server.model, messages=QUESTION, temperature=9)
    with pytest.raises(openai.BadRequestError, match="top_logprobs must be between 0 and 5"):
        openai_client.chat.completions.create(model=server.model, messages=QUESTION, logprobs=True, top_logprobs=9)


def test_openai_models_list(openai_client, server):
    assert [m.id for m in openai_client.models.list()] == [server.model]


def test_fireworks_completion_and_stream(fireworks_client, server):
    result = fireworks_client.completions.create(model=f"accounts/fireworks/models/{server.model}",
                                                 prompt="The capital of France is", max_tokens=6, temperature=0)
    assert result.choices[0].text and result.usage.prompt_tokens == 5
    chunks = list(fireworks_client.completions.create(model=server.model, prompt="The capital of France is",
                                                      max_tokens=6, temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == result.choices[0].text
    assert chunks[-1].usage.completion_tokens == result.usage.completion_tokens


def test_fireworks_chat_and_stream(fireworks_client, server):
    result = fireworks_client.chat.completions.create(model=server.model, messages=QUESTION, max_tokens=12,
                                                      temperature=0, top_k=40, min_p=0.05, repetition_penalty=1.1)
    content = result.choices[0].message.content
    assert content and result.choices[0].message.role == "assistant"
    chunks = list(fireworks_client.chat.completions.create(
        model=server.model, messages=QUESTION, max_tokens=12, temperature=0, top_k=40, min_p=0.05,
        repetition_penalty=1.1, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == content
    assert chunks[-1].usage is not None and chunks[-1].choices == []


def test_fireworks_context_error(fireworks_client, server):
    with pytest.raises(fireworks.BadRequestError, match="maximum context length"):
        fireworks_client.completions.create(model=server.model, prompt=[504] * 1000, max_tokens=4000,
                                            context_length_exceeded_behavior="error")
