"""Request bodies of both endpoints, mirroring `fireworks-openapi.yaml` field by field.

Types, enums and ranges come from the spec (ranges from its "Required range" lines). Every
Struct forbids unknown fields because the spec sets `additionalProperties: false`. Checks that
msgspec cannot express (a union of several array shapes, cross-field rules) live in
`app.api.fireworks.plan`, which turns these Structs into the request plan.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from app.api.common.wire import (
    ChoiceCount,
    Penalty,
    Probability,
    RepetitionPenalty,
    Temperature,
    TopK,
    WireStruct,
)

ReasoningEffortLevel = Literal["low", "medium", "high", "xhigh", "max", "none", "adaptive"]
ReasoningEffort = ReasoningEffortLevel | int | bool
SamplingMaskMode = Literal["count", "non_zero_list", "non_zero_buffer"]
ServiceTier = Literal["auto", "default", "flex", "priority"]


class StreamOptions(WireStruct):
    include_usage: bool | None = None
    include_internal_content: bool | None = False
    buffer_tokens: Annotated[int, Meta(ge=0)] | None = None
    buffer_ms: Annotated[float, Meta(ge=0)] | None = None
    buffer_mode: Literal["any", "all"] | None = None


class ResponseFormat(WireStruct):
    type: Literal["json_object", "json_schema", "grammar", "text"]
    schema: dict[str, Any] | str | None = None
    grammar: str | None = None
    json_schema: dict[str, Any] | str | None = None


class ChatMessageContentImageURL(WireStruct):
    url: str
    detail: str | None = None
    max_long_side_pixel: int | None = None


class ChatMessageContentVideoURL(WireStruct):
    url: str
    detail: str | None = None
    max_frames: int | None = None
    spatial_limit: int | None = None
    sample_fps: float | None = None
    fps: float | None = None
    max_long_side_pixel: int | None = None


class ChatMessageContentInputAudio(WireStruct):
    data: str  # base64
    format: str


class ChatMessageContent(WireStruct):
    type: str
    text: str | None = None
    image_url: ChatMessageContentImageURL | None = None
    video_url: ChatMessageContentVideoURL | None = None
    input_audio: ChatMessageContentInputAudio | None = None


class PredictedOutput(WireStruct):
    content: str | list[ChatMessageContent]
    type: Literal["content"] = "content"


class ThinkingConfig(WireStruct):
    """`ThinkingConfigEnabled | ThinkingConfigDisabled | ThinkingConfigAdaptive` in one Struct.

    The enabled variant's `type` is optional (default `enabled`), so the variants cannot be told
    apart by a msgspec tag; `app.api.fireworks.plan` rejects fields that the chosen variant lacks.
    """

    type: Literal["enabled", "disabled", "adaptive"] = "enabled"
    budget_tokens: int | None = None
    keep: Literal["all"] | None = None
    budget_end_str: str | None = None
    effort: ReasoningEffort | None = None


class ToolCallFunction(WireStruct):
    name: str | None = None
    arguments: str | dict[str, Any] | None = None


class ToolCall(WireStruct):
    function: ToolCallFunction | str
    id: str | None = None
    type: str = "function"


class ChatMessage(WireStruct):
    role: str
    content: str | list[ChatMessageContent] | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None


class FunctionDefinition(WireStruct):
    name: str
    description: str | None = None
    parameters: dict[str, Any] = msgspec.field(default_factory=dict)
    strict: bool | None = None


class ChatCompletionTool(WireStruct):
    type: Literal["function"]
    function: FunctionDefinition | None = None


class FunctionNameSpec(WireStruct):
    name: str


class FunctionSelection(WireStruct, tag_field="type", tag="function"):
    function: FunctionNameSpec | None = None
    # The spec's prose also accepts the flat form `{"type": "function", "name": ...}`.
    name: str | None = None


class AllowedToolsConfig(WireStruct):
    mode: Literal["auto", "required"]
    tools: list[dict[str, Any]]


class AllowedToolsSelection(WireStruct, tag_field="type", tag="allowed_tools"):
    allowed_tools: AllowedToolsConfig | None = None
    # OpenAI Responses-style flat form, accepted per the spec's prose.
    mode: Literal["auto", "required"] | None = None
    tools: list[dict[str, Any]] | None = None


ToolChoice = Literal["auto", "none", "any", "required"] | FunctionSelection | AllowedToolsSelection


class GenerationFields(WireStruct, kw_only=True):
    """Fields that both request bodies share, in the spec's order."""

    model: str
    user: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_isolation_key: str | None = None
    raw_output: bool | None = False
    perf_metrics_in_response: bool | None = False
    timings_per_token: bool | None = False  # llama-server's: its `timings` object on the answer
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: ChoiceCount = 1
    service_tier: ServiceTier = "default"
    stop: str | list[str] | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: Temperature | None = None
    top_k: TopK | None = None
    top_p: Probability | None = None
    min_p: Probability | None = None
    typical_p: Probability | None = None
    frequency_penalty: Penalty | None = None
    presence_penalty: Penalty | None = None
    repetition_penalty: RepetitionPenalty | None = None
    mirostat_target: float | None = None
    mirostat_lr: float | None = None
    seed: int | None = None
    logprobs: int | bool | None = None
    top_logprobs: int | None = None
    sampling_mask: SamplingMaskMode | None = None
    echo: bool | None = False
    echo_last: int | None = None
    ignore_eos: bool = False
    context_length_exceeded_behavior: Literal["error", "truncate"] = "truncate"
    response_format: ResponseFormat | None = None
    logit_bias: dict[str, float] | None = None
    speculation: str | list[int] | None = None
    prediction: PredictedOutput | str | None = None
    metadata: dict[str, str] | None = None
    reasoning_effort: ReasoningEffort | None = None
    reasoning_history: Literal["disabled", "interleaved", "preserved"] | None = None
    thinking: ThinkingConfig | None = None
    return_token_ids: bool | None = False


class CompletionRequest(GenerationFields, kw_only=True):
    # string | string[] | int[] | int[][]: msgspec allows one array type in a union, so the
    # element kinds are checked for consistency in `app.api.fireworks.plan`.
    prompt: str | list[str | int | list[int]]
    images: list[str | list[str]] | None = None


class ChatCompletionRequest(GenerationFields, kw_only=True):
    messages: list[ChatMessage] | None = None
    tools: list[ChatCompletionTool] | None = None
    tool_choice: ToolChoice = "auto"
    prompt_token_ids: list[int] | None = None
    functions: list[FunctionDefinition] | None = None
    prompt_truncate_len: int | None = None
    parallel_tool_calls: bool | None = None
    safe_tokenization: bool | None = None
    function_call: Literal["auto", "none"] | FunctionNameSpec | None = None
