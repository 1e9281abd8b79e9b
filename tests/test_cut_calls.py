"""A call cut short stays a call: when `max_tokens` ends the output inside a tool call, every front
door returns the call as its API reports one (OpenAI's chat and Responses: the arguments text as far
as it was written; Anthropic and Ollama: an object of the arguments written whole so far) with its
length finish reason, and the call's markup never reaches the content.

End to end through the real clients on the shared SmolLM2 server: a forced call (`tool_choice`
required, so its grammar makes the output a call on any CPU) cut at CUT tokens, and for Ollama,
which has no `tool_choice`, the model repeating its own call markup after two examples."""

from __future__ import annotations

import json

import anthropic
import jiter
import ollama
import pytest

from templates.tool_calls.strict_json import arguments_object

PARAMETERS = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}
CHAT_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "The weather now in a city",
                                              "parameters": PARAMETERS}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
GREEDY = {"temperature": 0}
# The forced call `<tool_call>\n{"name": "get_weather", "arguments": {"city": ...}}\n</tool_call>` takes
# 16 or 17 tokens up to the colon after "arguments" (5 for the tag, a newline the model may write or
# not, 11 more), and at least 7 to close its arguments: cut at 20, the name is whole and the
# arguments are not, whatever whitespace the grammar lets the model choose on this CPU.
CUT = 20
MARKUP = "<tool_call>"


@pytest.fixture
def anthropic_client(server):
    with anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0) as client:
        yield client


@pytest.fixture
def ollama_client(server) -> ollama.Client:
    return ollama.Client(host=server.base_url, timeout=120)


def written_arguments(raw: str) -> str:
    """What the raw output holds of the call's arguments: the text after `"arguments":`."""
    assert '"get_weather"' in raw and "</tool_call>" not in raw, raw  # the name whole, the call not
    return raw.partition('"arguments":')[2].lstrip()


# ---- the arguments object of a call cut short ----------------------------------------------------

DOCUMENTS = [
    ('{"city": "Paris", "days": -31.5e2, "ok": true, "n": null, "tags": ["a", {"b": [1, 2]}], "esc": "x\\u00e9y",'
     ' "e": {}, "f": [], "g": [[1], []]}'),
    '{ "a" : [ true , false , null , 0 , -0.5 , "s\\"q" ] , "b" : { "c" : { "d" : 1e3 } } }',
]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_arguments_object_reads_a_cut_text_as_anthropic_s_sdk_reads_the_stream(document: str) -> None:
    """Anthropic's `tool_use.input` and Ollama's `arguments` of a call cut short: the object the
    SDK builds from the streamed `input_json_delta` text (jiter's partial mode), at every cut."""
    for end in range(1, len(document) + 1):
        text = document[:end]
        assert arguments_object(text) == jiter.from_json(text.encode(), partial_mode=True), text
    assert arguments_object("") == {} and arguments_object("[1, 2") == {} and arguments_object("{1") == {}


# ---- OpenAI's chat completions -------------------------------------------------------------------


def test_chat_returns_the_cut_call_with_its_arguments_as_written(openai_client, server) -> None:
    answer = openai_client.chat.completions.create(model=server.model, messages=ASK, tools=[CHAT_TOOL],
                                                   tool_choice="required", max_tokens=CUT, logprobs=True, **GREEDY)
    [choice] = answer.choices
    raw = "".join(token.token for token in choice.logprobs.content)
    assert choice.finish_reason == "length"
    assert choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id
    assert (call.function.name, call.function.arguments) == ("get_weather", written_arguments(raw))


def test_chat_stream_sends_the_cut_call_then_the_length_finish(openai_client, server) -> None:
    chunks = list(openai_client.chat.completions.create(
        model=server.model, messages=ASK, tools=[CHAT_TOOL], tool_choice="required", max_tokens=CUT, logprobs=True,
        stream=True, **GREEDY))
    choices = [chunk.choices[0] for chunk in chunks if chunk.choices]
    raw = "".join(token.token for choice in choices if choice.logprobs for token in choice.logprobs.content or [])
    assert "".join(choice.delta.content or "" for choice in choices) == ""
    calls = [(i, call) for i, choice in enumerate(choices) for call in choice.delta.tool_calls or []]
    assert calls and calls[0][1].function.name == "get_weather" and calls[0][1].id
    assert {call.index for _, call in calls} == {0}
    assert "".join(call.function.arguments or "" for _, call in calls) == written_arguments(raw)
    finishes = [(i, choice.finish_reason) for i, choice in enumerate(choices) if choice.finish_reason]
    assert finishes == [(len(choices) - 1, "length")] and calls[-1][0] < finishes[0][0]


def test_a_cut_call_is_not_checked_against_its_schema(openai_client, server) -> None:
    """An answer cut short is incomplete by request: where the tool's schema asks for a check of
    the finished call (a keyword the grammar cannot enforce), the call cut short gets none."""
    properties = {**PARAMETERS["properties"], "note": {"type": "string", "pattern": "^a", "format": "email"}}
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {**PARAMETERS,
                                                                                   "properties": properties}}}
    answer = openai_client.chat.completions.create(model=server.model, messages=ASK, tools=[tool],
                                                   tool_choice="required", max_tokens=CUT, **GREEDY)
    [choice] = answer.choices
    [call] = choice.message.tool_calls
    assert (choice.finish_reason, call.function.name) == ("length", "get_weather")
    assert "schema_violations" not in (choice.model_extra or {})


def test_chat_cut_before_the_name_is_whole_gives_no_call_and_no_markup(openai_client, server) -> None:
    # 8 tokens: the tag (5), maybe a newline, then `{"name` at most: no name yet, nothing to return
    answer = openai_client.chat.completions.create(model=server.model, messages=ASK, tools=[CHAT_TOOL],
                                                   tool_choice="required", max_tokens=8, logprobs=True, **GREEDY)
    [choice] = answer.choices
    raw = "".join(token.token for token in choice.logprobs.content)
    assert raw.startswith(MARKUP) and "get_weather" not in raw
    assert (choice.message.content, choice.message.tool_calls, choice.finish_reason) == ("", None, "length")


# ---- Anthropic's Messages ------------------------------------------------------------------------

ANTHROPIC_TOOL = {"name": "get_weather", "description": "The weather now in a city", "input_schema": PARAMETERS}


def test_anthropic_returns_a_tool_use_block_and_max_tokens(anthropic_client, server) -> None:
    message = anthropic_client.messages.create(model=server.model, max_tokens=CUT, messages=ASK, tools=[ANTHROPIC_TOOL],
                                               tool_choice={"type": "any"}, extra_body=GREEDY)
    assert message.stop_reason == "max_tokens"
    [use] = message.content  # no text block: the markup is not text
    assert use.type == "tool_use" and use.name == "get_weather" and use.id.startswith("toolu_")
    assert isinstance(use.input, dict) and set(use.input) <= {"city"}


def test_anthropic_stream_carries_the_cut_input_as_json_deltas(anthropic_client, server) -> None:
    with anthropic_client.messages.stream(model=server.model, max_tokens=CUT, messages=ASK, tools=[ANTHROPIC_TOOL],
                                          tool_choice={"type": "any"}, extra_body=GREEDY) as stream:
        events = list(stream)
        final = stream.get_final_message()
    deltas = [event.delta for event in events if event.type == "content_block_delta"]
    assert {delta.type for delta in deltas} == {"input_json_delta"}
    written = "".join(delta.partial_json for delta in deltas)
    assert written.startswith("{")
    with pytest.raises(ValueError):
        json.loads(written)  # cut short
    assert final.stop_reason == "max_tokens"
    [use] = final.content
    assert use.type == "tool_use" and use.name == "get_weather"
    assert use.input == arguments_object(written)  # what a whole message's block holds for that text


# ---- OpenAI's Responses --------------------------------------------------------------------------

RESPONSES_TOOL = {"type": "function", "name": "get_weather", "description": "The weather now in a city",
                  "parameters": PARAMETERS}


def test_responses_returns_an_incomplete_function_call(openai_client, server) -> None:
    response = openai_client.responses.create(model=server.model, input=ASK[0]["content"], tools=[RESPONSES_TOOL],
                                              tool_choice="required", max_output_tokens=CUT, **GREEDY)
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    [item] = response.output  # no message item: the markup is not text
    assert item.type == "function_call" and item.name == "get_weather" and item.call_id
    assert item.status == "incomplete"
    assert item.arguments.startswith("{") and MARKUP not in item.arguments
    with pytest.raises(ValueError):
        json.loads(item.arguments)  # cut short, as written


def test_responses_stream_sends_the_cut_arguments(openai_client, server) -> None:
    events = list(openai_client.responses.create(model=server.model, input=ASK[0]["content"], tools=[RESPONSES_TOOL],
                                                 tool_choice="required", max_output_tokens=CUT, stream=True, **GREEDY))
    assert not [event for event in events if event.type == "response.output_text.delta"]
    written = "".join(event.delta for event in events if event.type == "response.function_call_arguments.delta")
    [done] = [event for event in events if event.type == "response.function_call_arguments.done"]
    assert done.arguments == written and written.startswith("{")
    final = events[-1]
    assert final.type == "response.incomplete" and final.response.incomplete_details.reason == "max_output_tokens"
    [item] = final.response.output
    assert (item.type, item.name, item.arguments, item.status) == ("function_call", "get_weather", written, "incomplete")


# ---- Ollama --------------------------------------------------------------------------------------


def said(city: str) -> dict:
    """An earlier answer that called the tool, in the model's own markup: a 135M model calls a tool
    when it has seen itself do so (Ollama has no `tool_choice`)."""
    call = json.dumps({"name": "get_weather", "arguments": {"city": city}})
    return {"role": "assistant", "content": f"{MARKUP}\n{call}\n</tool_call>"}


OLLAMA_ASK = [{"role": "user", "content": "What is the weather in Rome?"}, said("Rome"),
              {"role": "user", "content": "What is the weather in Oslo?"}, said("Oslo"), *ASK]


def test_ollama_returns_the_cut_call_and_done_reason_length(ollama_client, server) -> None:
    options = {**GREEDY, "num_predict": CUT}
    answer = ollama_client.chat(model=server.model, messages=OLLAMA_ASK, tools=[CHAT_TOOL], options=options)
    assert answer.done_reason == "length" and answer.message.content == ""
    [call] = answer.message.tool_calls
    assert call.function.name == "get_weather"
    assert isinstance(call.function.arguments, dict) and set(call.function.arguments) <= {"city"}
    parts = list(ollama_client.chat(model=server.model, messages=OLLAMA_ASK, tools=[CHAT_TOOL], options=options,
                                    stream=True))
    assert "".join(part.message.content or "" for part in parts) == ""
    calls = [call for part in parts for call in part.message.tool_calls or []]
    assert [call.function.name for call in calls] == ["get_weather"]
    assert parts[-1].done and parts[-1].done_reason == "length"
