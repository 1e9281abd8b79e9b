"""What `/v1/responses` answers: the response object, its output items, the stream's events, the
input-item list and the deletion record, field for field as the `openai` SDK's types have them.

Nullable fields are written as null (OpenAI writes them so); UNSET fields are left out.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from app.pipeline.answer_check import SchemaViolation

ItemStatus = Literal["in_progress", "completed", "incomplete"]


class Out(msgspec.Struct):
    """Base of what the server writes."""


# ---- output items ------------------------------------------------------------------------------

class OutputTextPart(Out, tag_field="type", tag="output_text"):
    text: str
    annotations: list[dict[str, Any]] = msgspec.field(default_factory=list)
    logprobs: list[dict[str, Any]] = msgspec.field(default_factory=list)


class ReasoningTextPart(Out, tag_field="type", tag="reasoning_text"):
    text: str


class SummaryTextPart(Out, tag_field="type", tag="summary_text"):
    text: str


class MessageItem(Out, tag_field="type", tag="message"):
    id: str
    status: ItemStatus
    content: list[OutputTextPart]
    role: Literal["assistant"] = "assistant"


class FunctionCallItem(Out, tag_field="type", tag="function_call"):
    id: str
    call_id: str
    name: str
    arguments: str
    status: ItemStatus


class ReasoningItem(Out, tag_field="type", tag="reasoning"):
    id: str
    summary: list[SummaryTextPart]
    content: list[ReasoningTextPart]
    status: ItemStatus
    encrypted_content: str | UnsetType = UNSET


OutputItem = MessageItem | FunctionCallItem | ReasoningItem


# ---- the response ------------------------------------------------------------------------------

class InputTokensDetails(Out):
    cached_tokens: int
    cache_write_tokens: int  # the prompt tokens this request prefilled, which a later one may reuse


class OutputTokensDetails(Out):
    reasoning_tokens: int


class ResponseUsage(Out):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class IncompleteDetails(Out):
    reason: Literal["max_output_tokens", "content_filter"]


class ResponseError(Out):
    code: str
    message: str


class ReasoningEcho(Out):
    effort: str | None = None
    summary: str | None = None


class Response(Out, kw_only=True):
    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: Literal["completed", "failed", "in_progress", "incomplete"]
    background: bool = False
    completed_at: int | None = None
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    model: str
    output: list[OutputItem] = msgspec.field(default_factory=list)
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    reasoning: ReasoningEcho = msgspec.field(default_factory=ReasoningEcho)
    safety_identifier: str | None = None
    service_tier: str = "default"
    store: bool = True
    temperature: float | None = None
    text: dict[str, Any] = msgspec.field(default_factory=dict)
    tool_choice: str | dict[str, Any] = "auto"
    tools: list[dict[str, Any]] = msgspec.field(default_factory=list)
    top_logprobs: int | None = None
    top_p: float | None = None
    truncation: str = "disabled"
    usage: ResponseUsage | None = None
    user: str | None = None
    metadata: dict[str, str] = msgspec.field(default_factory=dict)
    # Fireside's: how the answer breaks the schema it was asked to follow (left out when it does not)
    schema_violations: list[SchemaViolation] | UnsetType = UNSET


class DeletedResponse(Out):
    id: str
    object: Literal["response"] = "response"
    deleted: bool = True


class InputItemList(Out):
    """`GET /v1/responses/{id}/input_items`: the items as they were given (with their ids)."""

    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool
    object: Literal["list"] = "list"


# ---- stream events (each one's `type` is its server-sent event name) ------------------------------

class ResponseEvent(Out, kw_only=True):
    """`response.created`, `.in_progress`, `.completed`, `.incomplete`, `.failed`."""

    type: str
    sequence_number: int
    response: Response


class OutputItemEvent(Out, kw_only=True):
    """`response.output_item.added` / `.done`."""

    type: str
    sequence_number: int
    output_index: int
    item: OutputItem


class ContentPartEvent(Out, kw_only=True):
    """`response.content_part.added` / `.done`."""

    type: str
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    part: OutputTextPart | ReasoningTextPart


class TextDeltaEvent(Out, kw_only=True):
    """`response.output_text.delta` (with `logprobs`) and `response.reasoning_text.delta` (without)."""

    type: str
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[dict[str, Any]] | UnsetType = UNSET


class TextDoneEvent(Out, kw_only=True):
    """`response.output_text.done` (with `logprobs`) and `response.reasoning_text.done` (without)."""

    type: str
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[dict[str, Any]] | UnsetType = UNSET


class ArgumentsDeltaEvent(Out, kw_only=True):
    type: Literal["response.function_call_arguments.delta"] = "response.function_call_arguments.delta"
    sequence_number: int
    item_id: str
    output_index: int
    delta: str


class ArgumentsDoneEvent(Out, kw_only=True):
    type: Literal["response.function_call_arguments.done"] = "response.function_call_arguments.done"
    sequence_number: int
    item_id: str
    output_index: int
    name: str
    arguments: str


StreamEvent = (ResponseEvent | OutputItemEvent | ContentPartEvent | TextDeltaEvent | TextDoneEvent
               | ArgumentsDeltaEvent | ArgumentsDoneEvent)
