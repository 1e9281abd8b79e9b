"""`POST /v1/responses` request bodies, as the `openai` SDK's `response_create_params` has them.

Every Struct forbids unknown fields (422, as the other endpoints do). Input items and content
parts are tagged unions on `type`; a message may leave its `type` out (the SDK's
`EasyInputMessage`), and an item reference too, so `decode_request` fills those in before the
schema is applied. Item and tool types that OpenAI has but this server cannot serve (web search,
computer use, MCP, ...) are 400s naming them, not schema errors.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from app.api.common.decode import decode_body, from_msgspec
from app.api.common.wire import Probability, Temperature, WireStruct
from app.pipeline.errors import BadRequest

ItemStatus = Literal["in_progress", "completed", "incomplete"]


# ---- content parts ---------------------------------------------------------------------------

class InputText(WireStruct, tag_field="type", tag="input_text"):
    text: str
    # An explicit cache breakpoint holds trivially: every prompt prefix is cached here.
    prompt_cache_breakpoint: dict[str, Any] | None = None


class InputImage(WireStruct, tag_field="type", tag="input_image"):
    detail: Literal["low", "high", "auto", "original"] | None = None
    image_url: str | None = None
    file_id: str | None = None
    prompt_cache_breakpoint: dict[str, Any] | None = None


class InputAudioData(WireStruct):
    data: str  # base64
    format: str


class InputAudio(WireStruct, tag_field="type", tag="input_audio"):
    input_audio: InputAudioData


class InputFile(WireStruct, tag_field="type", tag="input_file"):
    file_id: str | None = None
    file_data: str | None = None
    file_url: str | None = None
    filename: str | None = None
    detail: str | None = None


class OutputText(WireStruct, tag_field="type", tag="output_text"):
    """An earlier answer's text, sent back (or stored)."""

    text: str
    annotations: list[dict[str, Any]] | None = None
    logprobs: list[dict[str, Any]] | None = None


class Refusal(WireStruct, tag_field="type", tag="refusal"):
    refusal: str


ContentPart = InputText | InputImage | InputAudio | InputFile | OutputText | Refusal


# ---- input items -------------------------------------------------------------------------------

class InputMessage(WireStruct, tag_field="type", tag="message"):
    """A message from the user, the system or developer, or an earlier assistant answer."""

    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[ContentPart]
    id: str | None = None
    status: ItemStatus | None = None
    phase: Literal["commentary", "final_answer"] | None = None


class FunctionCall(WireStruct, tag_field="type", tag="function_call"):
    call_id: str
    name: str
    arguments: str
    id: str | None = None
    status: ItemStatus | None = None


class FunctionCallOutput(WireStruct, tag_field="type", tag="function_call_output"):
    call_id: str
    output: str | list[ContentPart]
    id: str | None = None
    status: ItemStatus | None = None


class SummaryText(WireStruct):
    text: str
    type: Literal["summary_text"] = "summary_text"


class ReasoningText(WireStruct):
    text: str
    type: Literal["reasoning_text"] = "reasoning_text"


class ReasoningInput(WireStruct, tag_field="type", tag="reasoning"):
    """An earlier answer's reasoning, sent back: its `content` (or, signed by this server,
    its `encrypted_content`) becomes the reasoning of the assistant message after it."""

    summary: list[SummaryText]
    id: str | None = None
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None
    status: ItemStatus | None = None


class ItemReference(WireStruct, tag_field="type", tag="item_reference"):
    id: str


InputItem = InputMessage | FunctionCall | FunctionCallOutput | ReasoningInput | ItemReference
ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning", "item_reference")


# ---- tools, formats, reasoning -----------------------------------------------------------------

class FunctionTool(WireStruct, tag_field="type", tag="function"):
    name: str
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    description: str | None = None


class ToolChoiceFunction(WireStruct, tag_field="type", tag="function"):
    name: str


class ToolChoiceAllowed(WireStruct, tag_field="type", tag="allowed_tools"):
    mode: Literal["auto", "required"]
    tools: list[dict[str, Any]]


ToolChoice = Literal["auto", "none", "required"] | ToolChoiceFunction | ToolChoiceAllowed


class FormatText(WireStruct, tag_field="type", tag="text"):
    pass


class FormatJsonObject(WireStruct, tag_field="type", tag="json_object"):
    pass


class FormatJsonSchema(WireStruct, tag_field="type", tag="json_schema"):
    name: str
    schema: dict[str, Any]
    description: str | None = None
    strict: bool | None = None


TextFormat = FormatText | FormatJsonObject | FormatJsonSchema


class TextConfig(WireStruct):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ReasoningConfig(WireStruct):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None  # the deprecated name of `summary`
    context: Literal["auto", "current_turn", "all_turns"] | None = None
    mode: str | None = None


class StreamOptions(WireStruct):
    include_obfuscation: bool | None = None


Includable = Literal[
    "file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
    "message.input_image.image_url", "computer_call_output.output.image_url", "code_interpreter_call.outputs",
    "reasoning.encrypted_content", "message.output_text.logprobs",
]


class ResponsesRequest(WireStruct, kw_only=True):
    model: str
    input: str | list[InputItem] = msgspec.field(default_factory=list)
    instructions: str | None = None
    max_output_tokens: Annotated[int, Meta(ge=1)] | None = None
    temperature: Temperature | None = None
    top_p: Probability | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    store: bool | None = None
    previous_response_id: str | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    include: list[Includable] | None = None
    top_logprobs: Annotated[int, Meta(ge=0, le=20)] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    max_tool_calls: Annotated[int, Meta(ge=0)] | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] | None = None
    background: bool | None = None
    # OpenAI's server-side features that this server does not have: a 400 names them when set
    conversation: str | dict[str, Any] | None = None
    prompt: dict[str, Any] | None = None
    context_management: list[dict[str, Any]] | None = None
    moderation: dict[str, Any] | None = None
    prompt_cache_options: dict[str, Any] | None = None


def decode_request(body: bytes) -> ResponsesRequest:
    """The body as a `ResponsesRequest`: 422 where it breaks the schema, 400 for an item or tool
    type this server does not serve."""
    raw = decode_body(body, Any)  # as every body is decoded: bad or too deep JSON is a 422
    if isinstance(raw, dict):
        _fill_item_types(raw.get("input"))
        _check_kinds(raw)
    try:
        return msgspec.convert(raw, ResponsesRequest)
    except msgspec.ValidationError as error:
        raise from_msgspec(error) from None


def _fill_item_types(items: Any) -> None:
    """A message may leave out `type` (`{"role": ..., "content": ...}`), as may an item reference."""
    if not isinstance(items, list):
        return
    for item in items:
        if isinstance(item, dict) and "type" not in item:
            if "role" in item:
                item["type"] = "message"
            elif set(item) == {"id"}:
                item["type"] = "item_reference"


def _check_kinds(raw: dict[str, Any]) -> None:
    items = raw.get("input")
    for i, item in enumerate(items if isinstance(items, list) else []):
        kind = item.get("type") if isinstance(item, dict) else None
        if isinstance(kind, str) and kind not in ITEM_TYPES:
            raise BadRequest(f"input[{i}] is a {kind!r} item; this server takes {', '.join(ITEM_TYPES)} items "
                             "(it runs no built-in tools)", param=f"input[{i}]")
    tools = raw.get("tools")
    for i, tool in enumerate(tools if isinstance(tools, list) else []):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if isinstance(kind, str) and kind != "function":
            raise BadRequest(f"tools[{i}] is a {kind!r} tool; this server runs no built-in tools and takes "
                             "function tools only", param=f"tools[{i}].type")
    choice = raw.get("tool_choice")
    if isinstance(choice, dict) and isinstance(choice.get("type"), str) \
            and choice["type"] not in ("function", "allowed_tools"):
        raise BadRequest(f"tool_choice of type {choice['type']!r} names a tool this server does not have; "
                         "use auto, none, required, a function or allowed_tools", param="tool_choice")
