"""What `/v1/messages` answers: the message, its stream events and errors, in Anthropic's shapes."""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from app.pipeline.answer_check import SchemaViolation


class OutStruct(msgspec.Struct, tag_field="type"):
    pass


class TextOut(OutStruct, tag="text"):
    text: str


class ThinkingOut(OutStruct, tag="thinking"):
    thinking: str
    signature: str


class ToolUseOut(OutStruct, tag="tool_use"):
    id: str
    name: str
    input: dict[str, Any]


ContentOut = TextOut | ThinkingOut | ToolUseOut
StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]


class Usage(msgspec.Struct):
    input_tokens: int  # the prompt's tokens that were not read from the prefix cache
    output_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int = 0  # nothing is billed for writing the cache here


class MessageResponse(OutStruct, tag="message"):
    id: str
    model: str
    content: list[ContentOut]
    stop_reason: StopReason | None
    stop_sequence: str | None
    usage: Usage
    role: Literal["assistant"] = "assistant"
    # Fireside's: how the answer breaks the schema it was asked to follow (left out when it does not)
    schema_violations: list[SchemaViolation] | UnsetType = UNSET


class CountTokensResponse(msgspec.Struct):
    input_tokens: int


# ---- stream events ---------------------------------------------------------------------------

class MessageStart(OutStruct, tag="message_start"):
    message: MessageResponse


class Ping(OutStruct, tag="ping"):
    pass


class ContentBlockStart(OutStruct, tag="content_block_start"):
    index: int
    content_block: ContentOut


class TextDelta(OutStruct, tag="text_delta"):
    text: str


class ThinkingDelta(OutStruct, tag="thinking_delta"):
    thinking: str


class SignatureDelta(OutStruct, tag="signature_delta"):
    signature: str


class InputJsonDelta(OutStruct, tag="input_json_delta"):
    partial_json: str


class ContentBlockDelta(OutStruct, tag="content_block_delta"):
    index: int
    delta: TextDelta | ThinkingDelta | SignatureDelta | InputJsonDelta


class ContentBlockStop(OutStruct, tag="content_block_stop"):
    index: int


class MessageDeltaBody(msgspec.Struct):
    stop_reason: StopReason | None
    stop_sequence: str | None


class MessageDelta(OutStruct, tag="message_delta"):
    delta: MessageDeltaBody
    usage: Usage  # cumulative: the SDKs overwrite message_start's counts with these
    schema_violations: list[SchemaViolation] | UnsetType = UNSET  # as on the whole message


class MessageStop(OutStruct, tag="message_stop"):
    pass


# ---- errors ----------------------------------------------------------------------------------

ErrorType = Literal["invalid_request_error", "authentication_error", "permission_error", "not_found_error",
                    "request_too_large", "rate_limit_error", "api_error", "overloaded_error"]


class ErrorDetail(msgspec.Struct):
    type: ErrorType
    message: str


class ErrorEvent(OutStruct, tag="error"):
    """The error body, which is also the `error` event of a stream."""

    error: ErrorDetail


StreamEvent = MessageStart | Ping | ContentBlockStart | ContentBlockDelta | ContentBlockStop | MessageDelta | MessageStop | ErrorEvent
