"""Anthropic's Messages API end to end on the default model, through the real `anthropic` SDK and
plain HTTP: whole and streamed messages, stop reasons, a tool-use round trip, count_tokens,
errors in Anthropic's shape, and the prompt cache across the turns of an agent conversation whose
system prompt opens with Claude Code's per-request billing line.

The SDK's `messages.create` has no `temperature` any more: it travels in `extra_body`."""

from __future__ import annotations

import base64
import json

import anthropic
import httpx
import pytest

from tests.conftest import FAMILY_KEY
from tests.fixtures.make_tiny_vlm import IMAGE_TOKENS
from tests.images import noise, png

GREEDY = {"temperature": 0}
WEATHER = {"name": "get_weather", "description": "The weather now in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                            "required": ["city"], "additionalProperties": False}}
# A request for a long answer: no greedy path ends it within the 12 tokens the tests ask for (a short
# one, "Say hello", may end sooner on some CPU), so each answer stops at max_tokens on any machine.
ASK = [{"role": "user", "content": "Tell me a long story about a dragon."}]
# A forced get_weather call is at most 359 bytes (its grammar's `longest_sentence`): it ends within
# this budget whatever whitespace the model picks (its choice differs between CPUs).
CALL_BUDGET = 384


@pytest.fixture
def client(server):
    # the SDK appends /v1/messages to its base URL
    with anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0) as sdk:
        yield sdk


def post(server, body: dict, path: str = "/v1/messages") -> httpx.Response:
    return httpx.post(server.base_url + path, json=body, timeout=120)


def test_create_answers_a_message(client, server) -> None:
    message = client.messages.create(model=server.model, max_tokens=8, messages=ASK, extra_body=GREEDY)
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert message.model == server.model
    assert [block.type for block in message.content] == ["text"] and message.content[0].text
    assert message.stop_reason == "max_tokens" and message.stop_sequence is None
    usage = message.usage
    assert usage.output_tokens == 8 and usage.cache_creation_input_tokens == 0
    assert usage.input_tokens + usage.cache_read_input_tokens > 5
    again = client.messages.create(model=server.model, max_tokens=8, messages=ASK, extra_body=GREEDY)
    assert again.content[0].text == message.content[0].text  # greedy


def test_system_blocks_are_joined_and_the_billing_line_dropped(client, server) -> None:
    system = "You answer in French."
    as_string = client.messages.create(model=server.model, max_tokens=6, system=system, messages=ASK,
                                       extra_body=GREEDY)
    as_blocks = client.messages.create(
        model=server.model, max_tokens=6, messages=ASK, extra_body=GREEDY,
        system=[{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.37.0d9; cc_entrypoint=cli; "
                                         "cch=fa690;"},
                {"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}])
    assert as_blocks.content[0].text == as_string.content[0].text
    total = lambda m: m.usage.input_tokens + m.usage.cache_read_input_tokens
    assert total(as_blocks) == total(as_string)  # the billing line is not in the prompt


def test_stop_sequence_names_the_string_that_matched(client, server) -> None:
    plain = client.messages.create(model=server.model, max_tokens=12, messages=ASK, extra_body=GREEDY)
    text = plain.content[0].text
    word = text.split()[1]  # a word the greedy answer writes
    stopped = client.messages.create(model=server.model, max_tokens=12, messages=ASK, extra_body=GREEDY,
                                     stop_sequences=["never-written", word])
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == word
    assert stopped.content[0].text == text[:text.index(word)]


def test_stream_helpers_and_the_raw_event_order(client, server) -> None:
    whole = client.messages.create(model=server.model, max_tokens=8, messages=ASK, extra_body=GREEDY)
    with client.messages.stream(model=server.model, max_tokens=8, messages=ASK, extra_body=GREEDY) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == whole.content[0].text == final.content[0].text
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 8
    assert final.usage.input_tokens + final.usage.cache_read_input_tokens == (
        whole.usage.input_tokens + whole.usage.cache_read_input_tokens)

    body = {"model": server.model, "max_tokens": 3, "messages": ASK, "stream": True, **GREEDY}
    with httpx.stream("POST", f"{server.base_url}/v1/messages", json=body, timeout=120) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = response.read().decode()
    events = [chunk.split("\n") for chunk in raw.strip().split("\n\n")]
    names = [lines[0].removeprefix("event: ") for lines in events]
    payloads = [json.loads(lines[1].removeprefix("data: ")) for lines in events]
    assert [p["type"] for p in payloads] == names  # each event is named by its payload's type
    assert names == ["message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta",
                     "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    start = payloads[0]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["usage"]["output_tokens"] == 0
    assert payloads[2] == {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    assert all(p["delta"]["type"] == "text_delta" and p["index"] == 0 for p in payloads[3:6])
    assert payloads[7]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert payloads[7]["usage"]["output_tokens"] == 3
    assert "[DONE]" not in raw


def test_tool_use_round_trip(client, server) -> None:
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    for choice in ({"type": "any", "disable_parallel_tool_use": True},
                   {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}):
        called = client.messages.create(model=server.model, max_tokens=CALL_BUDGET, messages=ask, tools=[WEATHER],
                                        tool_choice=choice, extra_body=GREEDY)
        assert called.stop_reason == "tool_use", called
        [use] = [block for block in called.content if block.type == "tool_use"]
        assert use.name == "get_weather" and use.id.startswith("toolu_")
        assert isinstance(use.input, dict) and set(use.input) == {"city"} and isinstance(use.input["city"], str)
    answered = client.messages.create(
        model=server.model, max_tokens=3, tools=[WEATHER], extra_body=GREEDY,
        messages=[*ask, {"role": "assistant", "content": called.content},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                "content": [{"type": "text", "text": "Sunny, 21 C"}]}]}])
    assert [block.type for block in answered.content] == ["text"] and answered.stop_reason == "max_tokens"
    # `none` shows no tools and allows no call
    plain = client.messages.create(model=server.model, max_tokens=3, messages=ask, tools=[WEATHER],
                                   tool_choice={"type": "none"}, extra_body=GREEDY)
    assert [block.type for block in plain.content] == ["text"]


def test_streamed_tool_call_carries_its_input_as_json_deltas(client, server) -> None:
    with client.messages.stream(model=server.model, max_tokens=CALL_BUDGET, tools=[WEATHER], extra_body=GREEDY,
                                tool_choice={"type": "any", "disable_parallel_tool_use": True},
                                messages=[{"role": "user", "content": "Weather in Rome?"}]) as stream:
        kinds = [(event.type, getattr(getattr(event, "delta", None), "type", None)) for event in stream]
        final = stream.get_final_message()
    assert ("content_block_delta", "input_json_delta") in kinds
    assert final.stop_reason == "tool_use"
    [use] = [block for block in final.content if block.type == "tool_use"]
    assert set(use.input) == {"city"}


def test_count_tokens_equals_the_prompt_a_create_reads(client, server) -> None:
    fields = {"model": server.model, "messages": [{"role": "user", "content": "Count these words, please"}],
              "system": "Be brief.", "tools": [WEATHER]}
    counted = client.messages.count_tokens(**fields)
    created = client.messages.create(max_tokens=1, extra_body=GREEDY, **fields)
    assert counted.input_tokens == created.usage.input_tokens + created.usage.cache_read_input_tokens
    assert counted.input_tokens > 40  # the tool's definition is in the prompt
    response = post(server, fields, "/v1/messages/count_tokens")
    assert response.json() == {"input_tokens": counted.input_tokens}


def test_count_tokens_renders_and_tokenizes_only(client, server) -> None:
    """No grammar is made for a count: a schema whose grammar cannot be made refuses a create but
    is counted as the same prompt without it (the schema is not part of the prompt)."""
    fields = {"model": server.model, "messages": [{"role": "user", "content": "Answer in JSON, please"}]}
    broken = {"output_config": {"format": {"type": "json_schema", "schema": {"$ref": "#/$defs/missing"}}}}
    refused = post(server, {**fields, **broken, "max_tokens": 1})
    assert refused.status_code == 400 and "points to nothing" in refused.json()["error"]["message"]
    counted = post(server, {**fields, **broken}, "/v1/messages/count_tokens")
    assert counted.status_code == 200, counted.text
    assert counted.json() == {"input_tokens": client.messages.count_tokens(**fields).input_tokens}


def test_count_tokens_of_images_equals_the_prompt_a_create_reads(keyed_family) -> None:
    def image(seed: int) -> dict:
        data = base64.b64encode(png(noise(seed))).decode()
        return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}

    question = "What differs between these pictures?"
    fields = {"model": "vlm", "messages": [{"role": "user", "content": [{"type": "text", "text": question},
                                                                        image(3), image(4)]}]}
    with anthropic.Anthropic(base_url=keyed_family.base_url, api_key=FAMILY_KEY, max_retries=0) as sdk:
        counted = sdk.messages.count_tokens(**fields).input_tokens
        created = sdk.messages.create(max_tokens=1, extra_body=GREEDY, **fields)
        text_only = sdk.messages.count_tokens(model="vlm", messages=[{"role": "user", "content": question}])
    assert counted == created.usage.input_tokens + created.usage.cache_read_input_tokens
    assert counted >= text_only.input_tokens + 2 * IMAGE_TOKENS


def test_count_tokens_of_an_image_on_a_model_without_a_projector_is_refused_as_a_create_is(server) -> None:
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": base64.b64encode(b"not even an image").decode()}}
    fields = {"model": server.model, "messages": [{"role": "user", "content": [block]}]}
    created, counted = post(server, {**fields, "max_tokens": 1}), post(server, fields, "/v1/messages/count_tokens")
    assert created.status_code == counted.status_code == 400
    assert counted.json()["error"]["message"] == created.json()["error"]["message"]
    assert "does not accept images" in counted.json()["error"]["message"]


def _error(response: httpx.Response, status: int, kind: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == kind and set(body) == {"type", "error"}
    return body["error"]["message"]


def test_errors_in_anthropics_shape(client, server) -> None:
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.create(model="no-such-model", max_tokens=5, messages=ASK)
    assert missing.value.body["error"]["type"] == "not_found_error"

    body = {"model": server.model, "max_tokens": 5, "messages": ASK}
    assert "unknown field `bogus`" in _error(post(server, {**body, "bogus": 1}), 400, "invalid_request_error")
    assert _error(post(server, {"model": server.model, "messages": ASK}), 400,
                  "invalid_request_error").startswith("max_tokens:")
    assert _error(post(server, {**body, "max_tokens": "5"}), 400, "invalid_request_error").startswith("max_tokens:")
    assert _error(post(server, {**body, "temperature": 1.5}), 400, "invalid_request_error").startswith("temperature")
    message = _error(post(server, {**body, "tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
                     400, "invalid_request_error")
    assert "web_search_20250305" in message
    message = _error(post(server, {**body, "messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}]}]}),
        400, "invalid_request_error")
    assert message.startswith("messages[0].content[0]") and "'document'" in message
    assert "mcp_servers" in _error(post(server, {**body, "mcp_servers": []}), 400, "invalid_request_error")
    assert "prefill" in _error(post(server, {**body, "messages": [*ASK, {"role": "assistant", "content": "Hi"}]}),
                               400, "invalid_request_error")
    assert "tool_choice" in _error(post(server, {**body, "tool_choice": {"type": "tool", "name": "x"}}), 400,
                                   "invalid_request_error")
    tampered = {"type": "thinking", "thinking": "I reason.", "signature": "forged"}
    message = _error(post(server, {**body, "messages": [*ASK, {"role": "assistant", "content": [tampered]}, *ASK]}),
                     400, "invalid_request_error")
    assert message.startswith("messages[1].content[0]") and "signature" in message


def test_hostile_bodies_get_4xx_in_anthropics_shape(server) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    response = httpx.post(f"{server.base_url}/v1/messages", content=f'{{"model": {deep}}}', timeout=60,
                          headers={"content-type": "application/json"})
    _error(response, 400, "invalid_request_error")
    nested: dict = {}
    for _ in range(200):
        nested = {"a": nested}
    body = {"model": server.model, "max_tokens": 5, "messages": ASK,
            "tools": [{"name": "t", "input_schema": {"type": "object", "properties": {"x": nested}}}]}
    assert "nested more than" in _error(post(server, body), 400, "invalid_request_error")
    for wrong in ({"messages": "hi"}, {"messages": [{"role": "robot", "content": "x"}]},
                  {"messages": [{"role": "user", "content": [{"type": "nope"}]}]},
                  {"system": 5}, {"stream": "yes"}, {"tool_choice": {"type": "sometimes"}},
                  {"thinking": {"type": "enabled"}}):
        _error(post(server, {"model": server.model, "max_tokens": 5, "messages": ASK, **wrong}), 400,
               "invalid_request_error")
    _error(httpx.post(f"{server.base_url}/v1/messages", content=b"\xff\x00", timeout=60), 400,
           "invalid_request_error")


def test_second_turn_of_an_agent_conversation_reads_the_cache(server) -> None:
    """Claude Code's system prompt starts with a billing line whose `cch` changes per request;
    with it dropped, turn 2 (the call, its result) reads turn 1's whole prompt from the cache. The
    control, a first line that changes and is not that header, shows the cache lost."""
    instructions = "You are a coding agent. " + " ".join(f"Rule {i}: keep answers short and exact." for i in range(12))

    def turn(first_line: str, messages: list[dict]) -> dict:
        body = {"model": server.model, "max_tokens": CALL_BUDGET if len(messages) == 1 else 2, "tools": [WEATHER],
                "metadata": {"user_id": "agent-1"},
                "system": [{"type": "text", "text": first_line}, {"type": "text", "text": instructions}],
                "messages": messages, **GREEDY}
        if len(messages) == 1:
            body["tool_choice"] = {"type": "any", "disable_parallel_tool_use": True}
        response = post(server, body)
        assert response.status_code == 200, response.text
        return response.json()

    def billing(nonce: str) -> str:
        return f"x-anthropic-billing-header: cc_version=2.1.37.0d9; cc_entrypoint=cli; cch={nonce};"

    ask = [{"role": "user", "content": "Weather in Oslo?"}]
    first = turn(billing("fa690"), ask)
    [use] = [block for block in first["content"] if block["type"] == "tool_use"]
    prompt = first["usage"]["input_tokens"] + first["usage"]["cache_read_input_tokens"]
    assert prompt > 150
    history = [*ask, {"role": "assistant", "content": first["content"]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": "Rain, 8 C"}]}]
    second = turn(billing("0aaa9"), history)
    assert second["usage"]["cache_read_input_tokens"] >= prompt - 2, (first["usage"], second["usage"])
    assert second["usage"]["input_tokens"] < 60

    changed = turn("session-nonce: 5e2b1", history)
    assert changed["usage"]["cache_read_input_tokens"] < 20, changed["usage"]


def test_openapi_describes_the_messages_api(server) -> None:
    document = httpx.get(f"{server.base_url}/openapi.json", timeout=30).json()
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        assert set(document["paths"][path]["post"]["responses"]) == {"200", "400", "401", "404", "429"}
    schemas = document["components"]["schemas"]
    request = schemas["MessagesRequest"]
    assert request["additionalProperties"] is False and {"model", "max_tokens", "messages"} <= set(request["required"])
    assert {"system", "stop_sequences", "thinking", "tool_choice", "metadata"} <= set(request["properties"])
    assert schemas["CustomTool"]["required"] == ["name", "input_schema"]
