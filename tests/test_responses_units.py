"""The Responses adapter's parts without a model: decoding, items to chat messages, the output
items and events built from parsed output, the store."""

from __future__ import annotations

import json
import re

import pytest

from app.api.responses.items import (
    as_items,
    conversation_turns,
    seal_reasoning,
    stored_item,
)
from app.api.responses.plan import check_request, responses_plan
from app.api.responses.requests import (
    FunctionCall,
    InputMessage,
    ItemReference,
    decode_request,
)
from app.api.responses.shaper import ItemBuilder
from app.api.responses.store import ResponseStore
from app.pipeline.errors import BadRequest, RequestValidationError
from app.server.openapi import openapi_document
from templates.chat_output import OutputEvent


def decode(**body) -> object:
    return decode_request(json.dumps({"model": "m", **body}).encode())


def test_items_without_a_type_are_messages_or_references() -> None:
    request = decode(input=[{"role": "user", "content": "Hi"}, {"id": "msg_1"},
                            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}])
    assert [type(item) for item in request.input] == [InputMessage, ItemReference, FunctionCall]
    with pytest.raises(RequestValidationError) as caught:
        decode(input=[{"role": "user", "content": "Hi", "colour": 1}])
    assert caught.value.items[0].loc == ["body", "input", 0, "colour"]


def test_the_conversation_groups_calls_and_carries_reasoning_forward() -> None:
    request = decode(instructions="Be brief.", input=[
        {"role": "user", "content": [{"type": "input_text", "text": "Weather?"},
                                     {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"}]},
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "Two cities."}]},
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call", "call_id": "c2", "name": "weather", "arguments": '{"city": "Rome"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "Sunny"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "Rain"}]},
        {"type": "reasoning", "summary": [], "encrypted_content": seal_reasoning("Sealed.")},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Sunny and rain."}]},
    ])
    turns = conversation_turns(as_items(request.input), request.instructions)
    messages, images = turns.messages, turns.images
    assert [message["role"] for message in messages] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert messages[0]["content"] == "Be brief." and messages[1]["content"].startswith("Weather?\n<__image_")
    assert [(image.where, image.max_side) for image in images] == [("input[0].content[1]", 512)]
    calls = messages[2]
    assert calls["reasoning_content"] == "Two cities." and calls["content"] == ""
    assert [(c["id"], c["function"]["name"]) for c in calls["tool_calls"]] == [("c1", "weather"), ("c2", "weather")]
    # OpenAI-shaped, `type` included: some templates (Apertus) refuse a call without it
    assert calls["tool_calls"][0] == {"id": "c1", "type": "function",
                                      "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}
    assert (messages[4]["tool_call_id"], messages[4]["content"]) == ("c2", "Rain")
    assert messages[5] == {"role": "assistant", "content": "Sunny and rain.", "reasoning_content": "Sealed."}


def test_a_changed_seal_is_refused() -> None:
    sealed = seal_reasoning("Mine.")
    forged = seal_reasoning("Yours.").split(".")[0] + "." + sealed.split(".")[1]
    request = decode(input=[{"type": "reasoning", "summary": [], "encrypted_content": forged},
                            {"role": "user", "content": "Hi"}])
    with pytest.raises(BadRequest) as caught:
        conversation_turns(as_items(request.input), None)
    assert caught.value.param == "input[0].encrypted_content"


def test_the_plan_takes_tools_format_and_effort() -> None:
    request = decode(input="Hi", tools=[{"type": "function", "name": "f", "parameters": {"type": "object"}}],
                     tool_choice={"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "f"}]},
                     text={"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}, "strict": True}},
                     reasoning={"effort": "minimal"}, max_output_tokens=7, prompt_cache_key="k", service_tier="priority")
    check_request(request, 5)
    plan = responses_plan(request, as_items(request.input), 0)
    assert plan.input.tools.mode == "required" and plan.input.tools.allowed == ("f",)
    assert plan.input.tools.tools == [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    assert plan.response_format.json_schema == {"name": "x", "schema": {"type": "object"}, "strict": True}
    assert (plan.reasoning.effort, plan.reasoning.param) == ("low", "reasoning.effort")
    assert (plan.max_tokens, plan.cache.affinity, plan.priority, plan.stream) == (7, "k", True, None)


def _events(builder: ItemBuilder, *events: OutputEvent) -> list[str]:
    return [event.type for event in builder.feed(list(events))]


def test_the_builder_opens_and_closes_one_item_per_kind() -> None:
    builder = ItemBuilder(seal=False)
    names = _events(builder, OutputEvent("reasoning", "Think"), OutputEvent("content", "\n\n"),
                    OutputEvent("call", '{"a":', 0, "f", "call_x"), OutputEvent("call", "1}", 0),
                    OutputEvent("content", " "), OutputEvent("content", "Done"))
    names += [event.type for event in builder.close("completed")]
    assert names == [
        "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
        "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done"]
    reasoning, call, message = builder.items
    assert reasoning.content[0].text == "Think" and (call.call_id, call.arguments) == ("call_x", '{"a":1}')
    assert message.content[0].text == " Done" and builder.sequence == len(names)


def test_the_store_keeps_chains_and_forgets_deleted_responses(tmp_path) -> None:
    store = ResponseStore(tmp_path / "r.sqlite3")
    first_in = [stored_item(InputMessage(role="user", content="Hi"))]
    first_out = {"type": "message", "id": "msg_out", "role": "assistant", "status": "completed",
                 "content": [{"type": "output_text", "text": "Hello", "annotations": []}]}
    store.save({"id": "resp_1", "created_at": 1, "output": [first_out]}, first_in)
    second_in = [stored_item(InputMessage(role="user", content="More"))]
    store.save({"id": "resp_2", "created_at": 2, "previous_response_id": "resp_1", "output": []}, second_in)
    assert [item["id"] for item in store.conversation("resp_2")] == [first_in[0]["id"], "msg_out", second_in[0]["id"]]
    assert first_in[0]["content"] == [{"type": "input_text", "text": "Hi"}]
    assert store.items(["msg_out", "nope"]) == {"msg_out": first_out}
    reopened = ResponseStore(tmp_path / "r.sqlite3")
    assert reopened.get("resp_2")["previous_response_id"] == "resp_1"
    assert reopened.delete("resp_1") and not reopened.delete("resp_1")
    assert reopened.conversation("resp_1") is None and reopened.input_items("resp_1") is None
    assert [item["id"] for item in reopened.conversation("resp_2")] == [second_in[0]["id"]]


def test_the_openapi_document_describes_the_responses_api() -> None:
    document = openapi_document()
    paths = document["paths"]
    assert set(paths["/v1/responses/{response_id}"]) == {"get", "delete"}
    assert "get" in paths["/v1/responses/{response_id}/input_items"]
    body = paths["/v1/responses"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    schema = document["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]
    assert schema["additionalProperties"] is False and {"input", "previous_response_id", "store"} <= set(schema["properties"])
    refs = set(re.findall(r'"#/components/schemas/([^"]+)"', json.dumps(document)))
    assert refs <= set(document["components"]["schemas"])  # every reference resolves


def test_a_message_takes_the_log_probabilities_of_its_own_tokens() -> None:
    def entry(token: str) -> dict:
        return {"token": token, "bytes": list(token.encode()), "logprob": -0.5, "top_logprobs": []}

    builder = ItemBuilder(seal=False)
    builder.pending = [entry("<think>"), entry("Hmm")]
    builder.feed([OutputEvent("reasoning", "Hmm")])
    builder.pending = [entry("</think>"), entry("Hi")]
    [*_, delta] = builder.feed([OutputEvent("content", "Hi")])
    builder.pending = [entry("<|im_end|>")]  # markup the parser swallowed
    builder.close("completed")
    assert delta.logprobs == [{"token": "Hi", "logprob": -0.5, "top_logprobs": []}]
    assert builder.items[1].content[0].logprobs == [entry("Hi")]
    # text the parser held back comes out with its tokens; a character split over two tokens too
    builder = ItemBuilder(seal=False)
    builder.pending = [entry("<"), {**entry("é"), "bytes": [0xC3]}, {**entry("é"), "bytes": [0xA9]}]
    [*_, delta] = builder.feed([OutputEvent("content", "<é")])
    assert [entry["token"] for entry in delta.logprobs] == ["<", "é", "é"]
