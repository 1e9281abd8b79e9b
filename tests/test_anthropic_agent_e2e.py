"""The Messages API on one server with an API key, the default model's weights under DeepSeek-R1's
chat template (its generation prompt opens `<think>`, so the tiny model's output is thinking) and with
the tests' tiny projector (images): signed thinking blocks, sent back verified or refused, the
key taken from `x-api-key`, a 401 in Anthropic's shape, an image block read like chat's images."""

from __future__ import annotations

import base64

import anthropic
import httpx
import pytest

from tests.conftest import FAMILY_KEY
from tests.fixtures.make_tiny_vlm import IMAGE_TOKENS
from tests.images import noise, png

KEY = FAMILY_KEY
GREEDY = {"temperature": 0}
ASK = [{"role": "user", "content": "Why is the sky blue?"}]
THINK = {"type": "enabled", "budget_tokens": 1024}


@pytest.fixture(scope="module")
def agent_server(keyed_family):
    return keyed_family


@pytest.fixture
def client(agent_server):
    with anthropic.Anthropic(base_url=agent_server.base_url, api_key=KEY, max_retries=0) as sdk:
        yield sdk


def test_thinking_comes_back_signed_and_is_verified_next_turn(client, agent_server) -> None:
    message = client.messages.create(model="r1", max_tokens=8, messages=ASK, thinking=THINK, extra_body=GREEDY)
    [block] = message.content
    assert block.type == "thinking" and block.thinking and len(block.signature) >= 40
    with client.messages.stream(model="r1", max_tokens=8, messages=ASK, thinking=THINK,
                                extra_body=GREEDY) as stream:
        # the raw events (the SDK adds its own "text", "thinking", "signature" events besides)
        kinds = [event.delta.type if event.type == "content_block_delta" else event.type for event in stream
                 if event.type not in ("text", "thinking", "signature", "input_json")]
        final = stream.get_final_message()
    assert final.content == message.content  # the same thinking, the same signature
    # the signature comes last, just before the block closes
    assert kinds[-4:] == ["signature_delta", "content_block_stop", "message_delta", "message_stop"]
    assert "thinking_delta" in kinds

    follow = [*ASK, {"role": "assistant", "content": message.content}, {"role": "user", "content": "And red?"}]
    answered = client.messages.create(model="r1", max_tokens=1, messages=follow, thinking=THINK, extra_body=GREEDY)
    assert answered.stop_reason == "max_tokens"

    tampered = {"type": "thinking", "thinking": block.thinking + " (edited)", "signature": block.signature}
    follow[1] = {"role": "assistant", "content": [tampered]}
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model="r1", max_tokens=3, messages=follow, thinking=THINK)
    error = refused.value.body
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert error["error"]["message"].startswith("messages[1].content[0]: the thinking block's signature is not valid")


def test_thinking_controls_map_as_the_chat_endpoints_do(client) -> None:
    with pytest.raises(anthropic.BadRequestError) as small:
        client.messages.create(model="r1", max_tokens=3, messages=ASK,
                               thinking={"type": "enabled", "budget_tokens": 100})
    assert "1024" in small.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as redacted:
        client.messages.create(model="r1", max_tokens=3, messages=[
            *ASK, {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "abc"}]}, *ASK])
    assert "redacted_thinking" in redacted.value.body["error"]["message"]


def test_the_key_is_read_from_x_api_key_and_a_wrong_one_is_401(agent_server) -> None:
    body = {"model": "r1", "max_tokens": 1, "messages": ASK}
    url = f"{agent_server.base_url}/v1/messages"
    assert httpx.post(url, json=body, headers={"x-api-key": KEY, "anthropic-version": "2023-06-01",
                                               "anthropic-beta": "prompt-caching-2024-07-31"},
                      timeout=60).status_code == 200
    for headers in ({"x-api-key": "wrong"}, {}):
        response = httpx.post(url, json=body, headers=headers, timeout=60)
        assert response.status_code == 401
        assert response.json()["type"] == "error" and response.json()["error"]["type"] == "authentication_error"
    counted = httpx.post(f"{url}/count_tokens", json=body, headers={"x-api-key": "wrong"}, timeout=60)
    assert counted.status_code == 401 and counted.json()["error"]["type"] == "authentication_error"
    with anthropic.Anthropic(base_url=agent_server.base_url, api_key="wrong", max_retries=0) as sdk, \
            pytest.raises(anthropic.AuthenticationError):
        sdk.messages.create(model="r1", max_tokens=1, messages=ASK)
    # the other dialects keep OpenAI's shape
    chat = httpx.post(f"{agent_server.v1}/chat/completions", json=body, headers={"x-api-key": "wrong"}, timeout=60)
    assert chat.status_code == 401 and chat.json()["error"]["code"] == "invalid_api_key"


def test_an_image_block_is_read_like_a_chat_image(client, agent_server) -> None:
    def ask(seed: int) -> anthropic.types.Message:
        data = base64.b64encode(png(noise(seed))).decode()
        return client.messages.create(model="vlm", max_tokens=6, extra_body=GREEDY, messages=[{"role": "user", "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}]}])
    a, b = ask(1), ask(2)
    text_only = client.messages.count_tokens(model="vlm", messages=[{"role": "user", "content": "What is in this picture?"}])
    assert a.usage.input_tokens + a.usage.cache_read_input_tokens >= text_only.input_tokens + IMAGE_TOKENS

    def chat(seed: int) -> dict:
        return httpx.post(f"{agent_server.v1}/chat/completions", headers={"x-api-key": KEY}, timeout=60, json={
            "model": "vlm", "max_tokens": 6, "temperature": 0, "logprobs": True, "messages": [{"role": "user", "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(
                    png(noise(seed))).decode()}}]}]}).json()["choices"][0]

    first, second = chat(1), chat(2)
    # the same answers as the chat endpoint gives for the same images (greedy, on this machine)
    assert (first["message"]["content"], second["message"]["content"]) == (a.content[0].text, b.content[0].text)
    # the image steers the model: its scores differ (whether the 6 greedy tokens do is the model's)
    assert [e["logprob"] for e in first["logprobs"]["content"]] != [e["logprob"] for e in second["logprobs"]["content"]]
