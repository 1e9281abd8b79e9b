"""Response bodies and stream chunks of both endpoints, as the spec shapes them.

Optional extras that a request did not ask for default to `UNSET` and stay out of the JSON, the
way Fireworks answers; every other field is always written.
"""

from __future__ import annotations

from typing import Any, Literal

from msgspec import UNSET, UnsetType

from app.api.common.outputs import ChoiceLogprobs, RawOutput, ResponseStruct, UsageInfo
from app.api.common.timings import Timings
from app.pipeline.answer_check import SchemaViolation

FinishReason = Literal["stop", "length", "error"]


class InternalContent(ResponseStruct):
    token_id: list[int] | None = None


class CompletionChoice(ResponseStruct):
    # `finish_reason` and `logprobs` have no default so they are always written (null in most
    # stream chunks), as OpenAI clients expect; extras below are written only when set.
    index: int
    text: str
    finish_reason: FinishReason | None
    logprobs: ChoiceLogprobs
    raw_output: RawOutput | UnsetType = UNSET
    prompt_token_ids: list[int] | UnsetType = UNSET
    token_ids: list[int] | UnsetType = UNSET
    schema_violations: list[SchemaViolation] | UnsetType = UNSET  # the answer breaks its schema


class CompletionResponse(ResponseStruct):
    id: str
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: UsageInfo
    object: str = "text_completion"
    perf_metrics: dict[str, Any] | UnsetType = UNSET
    timings: Timings | UnsetType = UNSET  # llama.cpp's (`timings_per_token`)


class CompletionStreamResponse(ResponseStruct):
    id: str
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: UsageInfo | UnsetType = UNSET
    object: str = "text_completion"
    perf_metrics: dict[str, Any] | UnsetType = UNSET
    timings: Timings | UnsetType = UNSET  # llama.cpp's (`timings_per_token`)


class FunctionCall(ResponseStruct):
    name: str
    arguments: str


class ToolCallOut(ResponseStruct):
    id: str
    function: FunctionCall
    type: str = "function"


class AssistantMessage(ResponseStruct):
    role: str
    content: str | None
    reasoning_content: str | UnsetType = UNSET
    tool_calls: list[ToolCallOut] | UnsetType = UNSET


class FunctionCallDelta(ResponseStruct):
    arguments: str
    name: str | UnsetType = UNSET


class ToolCallDelta(ResponseStruct):
    index: int
    function: FunctionCallDelta
    id: str | UnsetType = UNSET
    type: str | UnsetType = UNSET


class ChatChoice(ResponseStruct):
    index: int
    message: AssistantMessage
    finish_reason: str | None
    logprobs: ChoiceLogprobs
    raw_output: RawOutput | UnsetType = UNSET
    token_ids: list[int] | UnsetType = UNSET
    schema_violations: list[SchemaViolation] | UnsetType = UNSET  # the answer breaks its schema


class ChatCompletionResponse(ResponseStruct):
    id: str
    created: int
    model: str
    choices: list[ChatChoice]
    usage: UsageInfo | None = None
    object: str = "chat.completion"
    perf_metrics: dict[str, Any] | UnsetType = UNSET
    timings: Timings | UnsetType = UNSET  # llama.cpp's (`timings_per_token`)
    prompt_token_ids: list[int] | UnsetType = UNSET


class DeltaMessage(ResponseStruct):
    role: str | UnsetType = UNSET
    content: str | UnsetType = UNSET
    reasoning_content: str | UnsetType = UNSET
    tool_calls: list[ToolCallDelta] | UnsetType = UNSET
    internal_content: InternalContent | UnsetType = UNSET


class ChatStreamChoice(ResponseStruct):
    index: int
    delta: DeltaMessage
    finish_reason: str | None
    logprobs: ChoiceLogprobs
    raw_output: RawOutput | UnsetType = UNSET
    token_ids: list[int] | UnsetType = UNSET
    schema_violations: list[SchemaViolation] | UnsetType = UNSET  # the answer breaks its schema


class ChatCompletionStreamResponse(ResponseStruct):
    id: str
    created: int
    model: str
    choices: list[ChatStreamChoice]
    usage: UsageInfo | UnsetType = UNSET
    object: str = "chat.completion.chunk"
    perf_metrics: dict[str, Any] | UnsetType = UNSET
    timings: Timings | UnsetType = UNSET  # llama.cpp's (`timings_per_token`)
    prompt_token_ids: list[int] | UnsetType = UNSET


class ModelCard(ResponseStruct):
    id: str
    created: int
    owned_by: str = "fireside"
    object: str = "model"
    context_length: int | UnsetType = UNSET
    loaded: bool | UnsetType = UNSET  # in memory now (models load on first use and unload when idle)
    # what the model serves (a loaded model's): "completion", "chat", "embedding", "rerank"
    capabilities: list[str] | UnsetType = UNSET
    upstream: str | UnsetType = UNSET  # where it runs, for a model forwarded to another server
    parent: str | UnsetType = UNSET  # a LoRA adapter's base model, which it is served on (vLLM's field)


class ModelList(ResponseStruct):
    data: list[ModelCard]
    object: str = "list"
