"""The Messages API's adapter without a server: blocks to template messages, tools to a ToolPlan,
thinking to the reasoning request, output events to content blocks and stream events, errors."""

from __future__ import annotations

import json

import msgspec
import pytest

from app.api.anthropic.errors import (
    EXCEPTION_HANDLERS,
    error_type,
    from_api_error,
    validation_message,
)
from app.api.anthropic.messages import conversation_turns, sign_thinking, system_text
from app.api.anthropic.plan import messages_plan
from app.api.anthropic.responses import Ping
from app.api.anthropic.shaper import BlockWriter
from app.api.anthropic.tools import tool_plan
from app.api.anthropic.wire import (
    Message,
    MessagesRequest,
    TextBlock,
    ToolChoiceAny,
    ToolChoiceNone,
    ToolChoiceTool,
)
from app.api.common.decode import decode_body
from app.api.common.streams import sse_named
from app.pipeline.errors import (
    ApiError,
    BadRequest,
    EngineFailure,
    RequestValidationError,
    TooManyRequests,
)
from app.pipeline.plan import IMAGE_MARKER, ImageRef
from backends.stops import StopMatcher
from templates.chat_output import OutputEvent

TOOL = {"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}


def request(**fields) -> MessagesRequest:
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}], **fields}
    return decode_body(json.dumps(body).encode(), MessagesRequest)


def messages(*items: dict) -> list[Message]:
    return msgspec.convert(list(items), list[Message])


def test_the_billing_line_is_dropped_from_the_system_prompt() -> None:
    line = "x-anthropic-billing-header: cc_version=2.1.37.0d9; cc_entrypoint=cli; cch=fa690;"
    assert system_text(f"{line}\nYou are Claude Code.\nBe brief.") == "You are Claude Code.\nBe brief."
    blocks = [TextBlock(line), TextBlock("You are Claude Code."), TextBlock("Be brief.")]
    assert system_text(blocks) == "You are Claude Code.\nBe brief."
    assert system_text("Quote: x-anthropic-billing-header: is fine mid-line") == (
        "Quote: x-anthropic-billing-header: is fine mid-line")


def test_blocks_become_the_conversations_turns() -> None:
    thinking = "Let me think."
    turns = conversation_turns([TextBlock("Sys.")], messages(
        {"role": "user", "content": [{"type": "text", "text": "Look:"},
                                     {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                  "data": "QUJD"}}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": thinking, "signature": sign_thinking(thinking)},
            {"type": "text", "text": "Calling."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny", "cache_control": {"type": "ephemeral"}},
            {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
             "content": [{"type": "text", "text": "timeout"}]},
            {"type": "text", "text": "Thanks"},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]},
    ))
    rendered, images = turns.messages, turns.images
    assert rendered == [
        {"role": "system", "content": "Sys."},
        {"role": "user", "content": f"Look:\n{IMAGE_MARKER}"},
        {"role": "assistant", "content": "Calling.", "reasoning_content": thinking, "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "Sunny"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: timeout"},
        {"role": "user", "content": f"Thanks\n{IMAGE_MARKER}"},
    ]
    assert images == [ImageRef("data:image/png;base64,QUJD", "messages[0].content[1]"),
                      ImageRef("https://example.com/a.png", "messages[2].content[3]")]


@pytest.mark.parametrize(("content", "words"), [
    ([{"type": "thinking", "thinking": "x", "signature": sign_thinking("y")}], "signature is not valid"),
    ([{"type": "redacted_thinking", "data": "abc"}], "redacted_thinking"),
    ([{"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}], "'server_tool_use'"),
    ([{"type": "tool_result", "tool_use_id": "t"}], "cannot hold a 'tool_result'"),
])
def test_assistant_blocks_that_are_refused(content: list[dict], words: str) -> None:
    convo = messages({"role": "user", "content": "hi"}, {"role": "assistant", "content": content},
                     {"role": "user", "content": "again"})
    with pytest.raises(BadRequest) as refused:
        conversation_turns(None, convo)
    assert refused.value.message.startswith("messages[1].content[0]") and words in refused.value.message


def test_user_blocks_that_are_refused() -> None:
    for block, words in (({"type": "image", "source": {"type": "file", "file_id": "f"}}, "Files API"),
                         ({"type": "document", "source": {}}, "'document'"),
                         ({"type": "tool_use", "id": "a", "name": "b", "input": {}}, "cannot hold a 'tool_use'")):
        with pytest.raises(BadRequest) as refused:
            conversation_turns(None, messages({"role": "user", "content": [block]}))
        assert words in refused.value.message


def test_tool_choice_becomes_a_tool_plan() -> None:
    assert tool_plan(None, None) is None
    auto = tool_plan([TOOL], None)
    assert (auto.mode, auto.allowed, auto.parallel) == ("auto", ("get_weather",), True)
    assert auto.tools == [{"type": "function", "function": {"name": "get_weather",
                                                            "parameters": TOOL["input_schema"]}}]
    forced = tool_plan([TOOL, {**TOOL, "name": "other"}], ToolChoiceTool("other", True))
    assert (forced.mode, forced.allowed, forced.parallel) == ("required", ("other",), False)
    assert tool_plan([TOOL], ToolChoiceAny()).mode == "required"
    assert tool_plan([TOOL], ToolChoiceNone()).shown is None
    for tools, choice, words in (([TOOL], ToolChoiceTool("nope"), "not among the tools"),
                                 (None, ToolChoiceAny(), "needs `tools`"),
                                 ([{"type": "bash_20250124", "name": "bash"}], None, "'bash_20250124'"),
                                 ([{"type": "text_editor_20250728", "name": "e"}], None, "server tool"),
                                 ([{**TOOL, "defer_loading": True}], None, "defer_loading"),
                                 ([{**TOOL, "name": "bad name"}], None, "must be 1 to 64")):
        with pytest.raises(BadRequest) as refused:
            tool_plan(tools, choice)
        assert words in refused.value.message
    with pytest.raises(RequestValidationError) as invalid:
        tool_plan([{"name": "x"}], None)
    assert validation_message(invalid.value) == "tools[0].input_schema: Object missing required field `input_schema`"


def test_request_fields_map_onto_the_plan() -> None:
    plan = messages_plan(request(temperature=0.5, top_k=7, top_p=0.9, stop_sequences=["END"], stream=True,
                                 metadata={"user_id": "u1"}, service_tier="standard_only",
                                 thinking={"type": "enabled", "budget_tokens": 2048}))
    assert (plan.max_tokens, plan.sampling.temperature, plan.sampling.top_k, plan.sampling.top_p) == (5, 0.5, 7, 0.9)
    assert plan.stop == ("END",) and plan.caller.user == "u1" and plan.cache.affinity == "u1"
    assert plan.stream is not None and not plan.stream.include_usage
    assert (plan.reasoning.effort, plan.reasoning.budget_tokens) == ("medium", 2048)
    assert messages_plan(request(thinking={"type": "disabled"})).reasoning.effort == "none"
    assert messages_plan(request(thinking={"type": "adaptive"})).reasoning.effort == "adaptive"
    assert messages_plan(request()).reasoning is None  # the model's own default
    effort = messages_plan(request(output_config={"effort": "high"}, thinking={"type": "enabled", "budget_tokens": 1024}))
    assert (effort.reasoning.effort, effort.reasoning.budget_tokens, effort.reasoning.param) == (
        "high", 1024, "output_config.effort")  # a model that refuses the effort names Anthropic's field
    assert messages_plan(request(output_config={"format": {"type": "json_schema", "schema": {"type": "object"}}})
                         ).response_format.schema == {"type": "object"}
    for fields, param in (({"thinking": {"type": "enabled", "budget_tokens": 10}}, "thinking"),
                          ({"thinking": {"type": "enabled", "budget_tokens": 2048, "display": "omitted"}}, "thinking"),
                          ({"container": "c"}, "container"), ({"context_management": {}}, "context_management"),
                          ({"speed": "fast"}, "speed")):
        with pytest.raises(BadRequest) as refused:
            messages_plan(request(**fields))
        assert refused.value.param == param


def test_blocks_stream_in_the_order_written_and_thinking_is_signed_before_it_stops() -> None:
    writer = BlockWriter()
    outputs = [OutputEvent("reasoning", "Hmm"), OutputEvent("reasoning", "."), OutputEvent("content", "Ok"),
               OutputEvent("call", '{"city": ', 0, "get_weather", "call_1"), OutputEvent("call", '"Oslo"}', 0)]
    events = [event for output in outputs for event in writer.add(output)] + writer.finish()
    payloads = [msgspec.to_builtins(event) for event in events]
    signature = sign_thinking("Hmm.")
    [tool_id] = [p["content_block"]["id"] for p in payloads if p["type"] == "content_block_start" and p["index"] == 2]
    assert payloads == [
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Hmm"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "."}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": signature}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Ok"}},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2,
         "content_block": {"type": "tool_use", "id": tool_id, "name": "get_weather", "input": {}}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '{"city": '}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '"Oslo"}'}},
        {"type": "content_block_stop", "index": 2},
    ]
    assert msgspec.to_builtins(writer.blocks) == [
        {"type": "thinking", "thinking": "Hmm.", "signature": signature}, {"type": "text", "text": "Ok"},
        {"type": "tool_use", "id": tool_id, "name": "get_weather", "input": {"city": "Oslo"}}]


def test_the_stop_matcher_names_the_sequence_that_matched() -> None:
    matcher = StopMatcher(("lo", "hello", "xyz"))
    assert matcher.feed("say hel") == ("say ", False) and matcher.matched is None
    assert matcher.feed("lo there") == ("say "[4:], True) and matcher.matched == "hello"  # earliest, then longest


def test_errors_and_events_on_the_wire() -> None:
    assert [error_type(s) for s in (400, 401, 404, 413, 422, 429, 500, 503, 529)] == [
        "invalid_request_error", "authentication_error", "not_found_error", "request_too_large",
        "invalid_request_error", "rate_limit_error", "api_error", "api_error", "overloaded_error"]
    assert sse_named(Ping()) == b'event: ping\ndata: {"type":"ping"}\n\n'
    assert sse_named(from_api_error(EngineFailure("boom"))) == (
        b'event: error\ndata: {"type":"error","error":{"type":"api_error","message":"boom"}}\n\n')
    busy = EXCEPTION_HANDLERS[ApiError](None, TooManyRequests("the queue is full", 3))
    assert busy.status_code == 429 and busy.headers["Retry-After"] == "3"
    assert msgspec.to_builtins(busy.content) == {"type": "error", "error": {"type": "rate_limit_error",
                                                                           "message": "the queue is full"}}


def test_consecutive_turns_of_one_role_are_combined() -> None:
    thought = sign_thinking("t2")
    rendered = conversation_turns(None, messages(
        {"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "text", "text": "b"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "1", "name": "f", "input": {}}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t2", "signature": thought},
                                          {"type": "text", "text": "x"}]},
        {"role": "user", "content": "c"})).messages
    assert rendered == [
        {"role": "user", "content": "a\nb"},
        {"role": "assistant", "content": "x", "reasoning_content": "t2",
         "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "user", "content": "c"}]
