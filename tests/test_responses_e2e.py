"""OpenAI's Responses API end to end: the real `openai` SDK against the session's SmolLM2 server."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from pydantic import BaseModel

# The city's length bounded, so that a forced call is at most 359 bytes (its grammar's
# `longest_sentence`) and ends within CALL_BUDGET whatever whitespace and name the model picks (its
# choices differ between CPUs; unbounded, a call took 34 of 40 tokens here).
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                          "required": ["city"], "additionalProperties": False}, "strict": True}
CALL_BUDGET = 384
# A request for a long answer: no greedy path ends it within 6 tokens (a short one, "Say hello.", may
# end sooner on some CPU), so the answers below are cut at max_output_tokens on any machine.
LONG = "Tell me a long story about a dragon."
RESPONSE_KEYS = {
    "id", "object", "created_at", "status", "background", "completed_at", "error", "incomplete_details",
    "instructions", "max_output_tokens", "max_tool_calls", "model", "output", "parallel_tool_calls",
    "previous_response_id", "prompt_cache_key", "prompt_cache_retention", "reasoning", "safety_identifier", "service_tier", "store",
    "temperature", "text", "tool_choice", "tools", "top_logprobs", "top_p", "truncation", "usage", "user", "metadata",
}


class Verdict(BaseModel):
    wet: bool


def create(server, **fields) -> httpx.Response:
    body = {"model": server.model, "temperature": 0, **fields}
    return httpx.post(f"{server.v1}/responses", json=body, timeout=120)


def test_a_string_input_gets_a_response_cut_at_max_output_tokens(server, openai_client) -> None:
    body = create(server, input=LONG, max_output_tokens=6, metadata={"run": "1"}).json()
    assert set(body) == RESPONSE_KEYS
    assert body["id"].startswith("resp_") and body["object"] == "response" and body["model"] == server.model
    assert (body["status"], body["incomplete_details"], body["completed_at"]) == \
        ("incomplete", {"reason": "max_output_tokens"}, None)
    [message] = body["output"]
    assert set(message) == {"id", "type", "role", "status", "content"} and message["id"].startswith("msg_")
    assert (message["type"], message["role"], message["status"]) == ("message", "assistant", "incomplete")
    [part] = message["content"]
    assert part["type"] == "output_text" and part["text"] and part["annotations"] == [] and part["logprobs"] == []
    usage = body["usage"]
    assert usage["output_tokens"] == 6 and usage["output_tokens_details"] == {"reasoning_tokens": 0}
    assert usage["total_tokens"] == usage["input_tokens"] + 6
    assert 0 <= usage["input_tokens_details"]["cached_tokens"] < usage["input_tokens"]
    assert (body["max_output_tokens"], body["temperature"], body["metadata"], body["store"]) == (6, 0, {"run": "1"}, True)
    assert body["text"] == {"format": {"type": "text"}, "verbosity": "medium"}
    assert (body["tool_choice"], body["tools"], body["parallel_tool_calls"]) == ("auto", [], True)
    # the SDK reads the same answer, and its output_text helper works
    sdk = openai_client.responses.create(model=server.model, input=LONG, max_output_tokens=6, temperature=0)
    assert sdk.output_text == part["text"] and sdk.status == "incomplete"


def test_instructions_are_a_system_message_not_carried_over(server, openai_client) -> None:
    first = openai_client.responses.create(model=server.model, input="Hi", instructions="Answer in French, always.",
                                           max_output_tokens=2, temperature=0)
    assert first.instructions == "Answer in French, always."
    as_system = openai_client.responses.create(
        model=server.model, max_output_tokens=2, temperature=0,
        input=[{"role": "system", "content": "Answer in French, always."}, {"role": "user", "content": "Hi"}])
    assert as_system.instructions is None
    assert (first.usage.input_tokens, first.output_text) == (as_system.usage.input_tokens, as_system.output_text)
    follow = openai_client.responses.create(model=server.model, input="And?", previous_response_id=first.id,
                                            max_output_tokens=2, temperature=0)
    assert follow.instructions is None and follow.previous_response_id == first.id
    # the chain is the earlier input and output, without the earlier instructions
    by_hand = openai_client.responses.create(
        model=server.model, max_output_tokens=2, temperature=0,
        input=[{"role": "user", "content": "Hi"}, first.output[0].model_dump(), {"role": "user", "content": "And?"}])
    assert follow.usage.input_tokens == by_hand.usage.input_tokens
    assert follow.output_text == by_hand.output_text


def _events(server, **fields) -> list[tuple[str, dict]]:
    """The raw stream: (event name, data) pairs, checked to agree and to end without [DONE]."""
    body = {"model": server.model, "temperature": 0, "stream": True, **fields}
    with httpx.stream("POST", f"{server.v1}/responses", json=body, timeout=120) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        text = response.read().decode()
    assert "[DONE]" not in text and text.endswith("\n\n")
    events = []
    for block in text.strip().split("\n\n"):
        name_line, data_line = block.split("\n")
        name, data = name_line.removeprefix("event: "), json.loads(data_line.removeprefix("data: "))
        assert data["type"] == name
        events.append((name, data))
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    return events


def test_a_stream_has_the_events_in_order_and_ends_as_the_whole_answer(server, openai_client) -> None:
    events = _events(server, input=LONG, max_output_tokens=6)
    names = [name for name, _ in events]
    deltas = names.count("response.output_text.delta")
    assert deltas >= 1 and names == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        *["response.output_text.delta"] * deltas, "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.incomplete"]
    created = events[0][1]["response"]
    assert created["status"] == "in_progress" and created["output"] == [] and created["usage"] is None
    item_id = events[2][1]["item"]["id"]
    assert events[2][1]["item"] == {"id": item_id, "type": "message", "status": "in_progress", "content": [],
                                    "role": "assistant"}
    assert events[3][1]["part"] == {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    text = "".join(data["delta"] for name, data in events if name == "response.output_text.delta")
    delta = events[4][1]
    assert (delta["item_id"], delta["output_index"], delta["content_index"], delta["logprobs"]) == (item_id, 0, 0, [])
    assert events[-4][1]["text"] == text
    final = events[-1][1]["response"]
    assert final["id"] == created["id"] and final["status"] == "incomplete"
    assert final["output"] == [events[-2][1]["item"]] and final["output"][0]["content"][0]["text"] == text
    whole = openai_client.responses.create(model=server.model, input=LONG, max_output_tokens=6, temperature=0)
    assert whole.output_text == text
    stored = openai_client.responses.retrieve(final["id"])  # kept before the stream ended
    assert stored.status == "incomplete" and stored.output_text == text


def test_output_text_logprobs_whole_and_streamed(server) -> None:
    fields = {"input": LONG, "max_output_tokens": 5, "include": ["message.output_text.logprobs"],
              "top_logprobs": 2}
    body = create(server, **fields).json()
    assert body["top_logprobs"] == 2
    part = body["output"][0]["content"][0]
    logprobs = part["logprobs"]
    assert len(logprobs) == 5 and "".join(entry["token"] for entry in logprobs) == part["text"]
    for entry in logprobs:
        assert set(entry) == {"token", "bytes", "logprob", "top_logprobs"} and entry["logprob"] <= 0
        assert entry["bytes"] == list(entry["token"].encode()) and len(entry["top_logprobs"]) == 2
        assert all(set(top) == {"token", "bytes", "logprob"} for top in entry["top_logprobs"])
    events = _events(server, **fields)
    streamed = [entry for name, data in events if name == "response.output_text.delta" for entry in data["logprobs"]]
    assert [entry["token"] for entry in streamed] == [entry["token"] for entry in logprobs]
    assert [entry["logprob"] for entry in streamed] == pytest.approx([entry["logprob"] for entry in logprobs], abs=1e-3)
    assert set(streamed[0]) == {"token", "logprob", "top_logprobs"} and set(streamed[0]["top_logprobs"][0]) == \
        {"token", "logprob"}
    done = next(data for name, data in events if name == "response.output_text.done")
    assert done["logprobs"] == streamed
    final = events[-1][1]["response"]["output"][0]["content"][0]["logprobs"]
    assert [entry["token"] for entry in final] == [entry["token"] for entry in logprobs]


def test_the_sdk_stream_helper_and_parse_with_a_pydantic_model(server, openai_client) -> None:
    # a Verdict is at most 76 bytes as JSON: 96 tokens end it whatever whitespace the model picks
    with openai_client.responses.stream(model=server.model, input="Is water wet? Answer in JSON.", text_format=Verdict,
                                        temperature=0, max_output_tokens=96) as stream:
        names = [event.type for event in stream]
        final = stream.get_final_response()
    assert names[0] == "response.created" and names[-1] == "response.completed"
    assert isinstance(final.output_parsed, Verdict)
    parsed = openai_client.responses.parse(model=server.model, input="Is water wet? Answer in JSON.",
                                           text_format=Verdict, temperature=0, max_output_tokens=96)
    assert parsed.status == "completed" and parsed.output_parsed == final.output_parsed
    assert parsed.text.format.type == "json_schema" and parsed.text.format.name == "Verdict"


def test_a_function_call_round_trip(server, openai_client) -> None:
    first = openai_client.responses.create(model=server.model, input="What is the weather in Paris?",
                                           tools=[WEATHER], tool_choice={"type": "function", "name": "get_weather"},
                                           temperature=0, max_output_tokens=CALL_BUDGET)
    assert first.status == "completed" and [item.type for item in first.output] == ["function_call"]
    call = first.output[0]
    assert call.name == "get_weather" and call.status == "completed"
    assert call.call_id.startswith("call_") and call.id.startswith("fc_")
    assert set(json.loads(call.arguments)) == {"city"}
    assert first.tool_choice.type == "function" and first.tools[0].name == "get_weather"
    second = openai_client.responses.create(
        model=server.model, previous_response_id=first.id, tools=[WEATHER], temperature=0, max_output_tokens=8,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C"}])
    assert [item.type for item in second.output] == ["message"] and second.output_text


def test_a_streamed_function_call(server) -> None:
    events = _events(server, input="What is the weather in Paris?", tools=[WEATHER], max_output_tokens=CALL_BUDGET,
                     tool_choice="required", parallel_tool_calls=False)
    names = [name for name, _ in events]
    deltas = names.count("response.function_call_arguments.delta")
    assert deltas >= 1 and names == [
        "response.created", "response.in_progress", "response.output_item.added",
        *["response.function_call_arguments.delta"] * deltas, "response.function_call_arguments.done",
        "response.output_item.done", "response.completed"]
    added, done = events[2][1]["item"], events[-2][1]["item"]
    assert (added["type"], added["arguments"], added["status"], added["name"]) == \
        ("function_call", "", "in_progress", "get_weather")
    arguments = "".join(data["delta"] for name, data in events if name == "response.function_call_arguments.delta")
    assert events[-3][1]["arguments"] == done["arguments"] == arguments and json.loads(arguments)["city"]
    assert done["call_id"] == added["call_id"] and done["status"] == "completed"


def test_stored_responses_get_delete_and_input_items(server, openai_client) -> None:
    given = [{"role": "developer", "content": "Be brief."},
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]}]
    response = openai_client.responses.create(model=server.model, input=given, max_output_tokens=2, temperature=0)
    assert openai_client.responses.retrieve(response.id).output_text == response.output_text
    items = openai_client.responses.input_items.list(response.id)
    assert [(item.role, item.content[0].text) for item in items.data] == [("user", "Hi"), ("developer", "Be brief.")]
    page = httpx.get(f"{server.v1}/responses/{response.id}/input_items", params={"order": "asc", "limit": 1}).json()
    first_id = page["data"][0]["id"]
    assert page == {"object": "list", "data": [{"id": first_id, "type": "message", "role": "developer",
                                                "status": "completed",
                                                "content": [{"type": "input_text", "text": "Be brief."}]}],
                    "first_id": first_id, "last_id": first_id, "has_more": True}
    rest = httpx.get(f"{server.v1}/responses/{response.id}/input_items",
                     params={"order": "asc", "after": first_id}).json()
    assert [item["role"] for item in rest["data"]] == ["user"] and rest["has_more"] is False
    # an item reference stands for the stored item
    referred = openai_client.responses.create(model=server.model, max_output_tokens=2, temperature=0,
                                              input=[{"type": "item_reference", "id": first_id},
                                                     {"role": "user", "content": "Hi"}])
    assert referred.usage.input_tokens == response.usage.input_tokens
    deleted = httpx.delete(f"{server.v1}/responses/{response.id}")
    assert deleted.json() == {"id": response.id, "object": "response", "deleted": True}
    for missing in (httpx.get(f"{server.v1}/responses/{response.id}"), httpx.delete(f"{server.v1}/responses/{response.id}"),
                    httpx.get(f"{server.v1}/responses/{response.id}/input_items")):
        assert missing.status_code == 404 and missing.json()["error"]["type"] == "invalid_request_error"


def test_a_streamed_response_is_kept_before_its_last_event_goes_out(server, openai_client) -> None:
    """The final-answer hook stores the response before the stream's last event is sent: it is
    found while the stream is still open, as the last event has it; `store: false` keeps none."""
    for store in (True, False):
        body = {"model": server.model, "temperature": 0, "stream": True, "input": LONG, "max_output_tokens": 4,
                "store": store}
        with httpx.stream("POST", f"{server.v1}/responses", json=body, timeout=120) as response:
            for line in response.iter_lines():
                if not line.startswith("data: "):
                    continue
                event = json.loads(line.removeprefix("data: "))
                if event["type"] in ("response.completed", "response.incomplete"):
                    final = event["response"]
                    found = httpx.get(f"{server.v1}/responses/{final['id']}", timeout=120)  # the stream still open
                    break
        if store:
            assert found.status_code == 200 and found.json() == final
            assert openai_client.responses.retrieve(final["id"]).output_text == final["output"][0]["content"][0]["text"]
        else:
            assert found.status_code == 404


def test_store_false_keeps_nothing(server, openai_client) -> None:
    response = openai_client.responses.create(model=server.model, input="Hi", store=False, max_output_tokens=2)
    assert response.store is False
    with pytest.raises(openai.NotFoundError):
        openai_client.responses.retrieve(response.id)
    later = create(server, input="More", previous_response_id=response.id)
    assert later.status_code == 404 and later.json()["error"]["param"] == "previous_response_id"


@pytest.mark.parametrize(("fields", "param", "words"), [
    ({"tools": [{"type": "web_search"}]}, "tools[0].type", "'web_search'"),
    ({"tools": [WEATHER, {"type": "code_interpreter", "container": {"type": "auto"}}]}, "tools[1].type",
     "'code_interpreter'"),
    ({"tools": [{"type": "mcp", "server_label": "x"}]}, "tools[0].type", "'mcp'"),
    ({"tool_choice": {"type": "file_search"}}, "tool_choice", "'file_search'"),
    ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input[0]", "'web_search_call'"),
    ({"include": ["file_search_call.results"]}, "include", "'file_search_call.results'"),
    ({"top_logprobs": 2}, "top_logprobs", "needs include"),
    ({"top_logprobs": 20, "include": ["message.output_text.logprobs"]}, "top_logprobs", "--max-logprobs"),
    ({"background": True}, "background", "background"),
    ({"reasoning": {"summary": "detailed"}}, "reasoning.summary", "no summarizer"),
    ({"truncation": "auto"}, "truncation", "'auto'"),
    ({"conversation": "conv_1"}, "conversation", "conversations"),
    ({"input": [{"role": "user", "content": [{"type": "input_text", "text": "What is it?"},
                                             {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=",
                                              "detail": "auto"}]}]}, "input", "input[0].content[1]"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file-1", "detail": "auto"}]}]},
     "input[0].content[0].file_id", "Files API"),
    ({"input": [{"type": "reasoning", "summary": [], "encrypted_content": "Zm9v.forged"},
                {"role": "user", "content": "Hi"}]}, "input[0].encrypted_content", "not made by this server"),
])
def test_what_cannot_be_honoured_is_a_400_naming_it(server, fields, param, words) -> None:
    response = create(server, **{"input": "Hi", **fields})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param and words in error["message"]


def test_the_sdk_reads_a_schema_error_as_openai_sends_it(server, openai_client) -> None:
    """A wrong type through the SDK: a 400 BadRequestError whose body is OpenAI's error, naming the parameter."""
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client.responses.create(model=server.model, input="Hi", extra_body={"temperature": "hot"})
    assert caught.value.body["param"] == "temperature" and caught.value.body["code"] == "invalid_type"
    assert caught.value.body["type"] == "invalid_request_error"


def test_unknown_ids_models_and_bad_bodies(server, openai_client) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        openai_client.responses.create(model=server.model, input="Hi", previous_response_id="resp_unknown")
    assert caught.value.body == {"message": "Previous response with id 'resp_unknown' not found.",
                                 "type": "invalid_request_error", "param": "previous_response_id",
                                 "code": "previous_response_not_found"}
    unknown = create(server, input="Hi", model="no-such-model")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    # schema errors as OpenAI answers them: a 400 in its error body, naming the parameter
    for body, param, code in (({"input": "Hi", "colour": "blue"}, "colour", "unknown_parameter"),
                              ({"input": "Hi", "temperature": "hot"}, "temperature", "invalid_type"),
                              ({"input": [{"role": "robot", "content": "Hi"}]}, "input[0].role", "invalid_value")):
        response = create(server, **body)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param, code), error
        assert error["message"].startswith(f"{param}: ")
