"""Request bodies of Anthropic's Messages API (`POST /v1/messages`, `/v1/messages/count_tokens`),
field by field as the `anthropic` SDK's `MessageCreateParams` types declare them.

Every Struct forbids unknown fields, as the other dialects' do. Content blocks are a tagged union
on `type`; block types this server cannot honour (documents, server-tool results, ...) decode
into `Unsupported*` Structs that take any fields, so that `app.api.anthropic.messages` can refuse
them by name (400) instead of a schema error about their fields. `tools` are decoded per entry in
`app.api.anthropic.tools` for the same reason: a server tool is refused by its `type`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

import msgspec
from msgspec import Meta

from app.api.common.wire import WireStruct


class Block(WireStruct, tag_field="type"):
    """A content block (the tag is its `type`)."""


class CacheControl(WireStruct):
    # Accepted and not acted on: Fireside's prefix cache reuses every shared prefix by itself, so
    # a breakpoint adds nothing (and its absence costs nothing).
    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None


class Base64Source(WireStruct, tag_field="type", tag="base64"):
    data: str
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]


class UrlSource(WireStruct, tag_field="type", tag="url"):
    url: str


class FileSource(WireStruct, tag_field="type", tag="file"):
    file_id: str
    file_type: str | None = None


ImageSource = Base64Source | UrlSource | FileSource


class TextBlock(Block, tag="text"):
    text: str
    cache_control: CacheControl | None = None
    citations: list[dict[str, Any]] | None = None


class ImageBlock(Block, tag="image"):
    source: ImageSource
    cache_control: CacheControl | None = None
    transformations: dict[str, Any] | None = None


class ToolUseBlock(Block, tag="tool_use"):
    id: str
    name: str
    input: dict[str, Any]
    cache_control: CacheControl | None = None
    caller: dict[str, Any] | None = None
    toolset_name: str | None = None


class ThinkingBlock(Block, tag="thinking"):
    thinking: str
    signature: str


class RedactedThinkingBlock(Block, tag="redacted_thinking"):
    data: str


class Unsupported(msgspec.Struct, tag_field="type"):
    """A block type this server cannot honour: any fields, refused by name when planned."""


def _unsupported(tag: str) -> type:
    name = "Unsupported_" + tag
    return msgspec.defstruct(name, [], bases=(Unsupported,), tag=tag, tag_field="type")


# Content block types of the Messages API that need Anthropic's servers (files, search results,
# server tools and their results, containers); each one is refused by name.
UNSUPPORTED_BLOCKS = (
    "document", "search_result", "server_tool_use", "web_search_tool_result", "web_fetch_tool_result",
    "code_execution_tool_result", "bash_code_execution_tool_result", "text_editor_code_execution_tool_result",
    "tool_search_tool_result", "container_upload", "tool_reference", "browser_state", "mcp_tool_use",
    "mcp_tool_result", "compaction",
)
_UNSUPPORTED_TYPES = tuple(_unsupported(tag) for tag in UNSUPPORTED_BLOCKS)


class ToolResultBlock(Block, tag="tool_result"):
    tool_use_id: str
    content: str | list[Union[TextBlock, ImageBlock, *_UNSUPPORTED_TYPES]] | None = None  # type: ignore[valid-type]
    is_error: bool | None = None
    cache_control: CacheControl | None = None
    toolset_name: str | None = None


ContentBlock = Union[TextBlock, ImageBlock, ToolUseBlock, ToolResultBlock, ThinkingBlock,  # type: ignore[valid-type]
                     RedactedThinkingBlock, *_UNSUPPORTED_TYPES]


class Message(WireStruct):
    role: Literal["user", "assistant", "system"]
    content: str | list[ContentBlock]  # type: ignore[valid-type]


class Metadata(WireStruct):
    user_id: str | None = None


class ToolChoiceAuto(WireStruct, tag_field="type", tag="auto"):
    disable_parallel_tool_use: bool | None = None


class ToolChoiceAny(WireStruct, tag_field="type", tag="any"):
    disable_parallel_tool_use: bool | None = None


class ToolChoiceTool(WireStruct, tag_field="type", tag="tool"):
    name: str
    disable_parallel_tool_use: bool | None = None


class ToolChoiceNone(WireStruct, tag_field="type", tag="none"):
    pass


ToolChoice = ToolChoiceAuto | ToolChoiceAny | ToolChoiceTool | ToolChoiceNone


class CustomTool(WireStruct):
    """A client tool (`type` absent or "custom"); the model calls it, the client runs it."""

    name: str
    input_schema: dict[str, Any]
    description: str | None = None
    type: Literal["custom"] | None = None
    cache_control: CacheControl | None = None
    strict: bool | None = None
    input_examples: list[dict[str, Any]] | None = None
    eager_input_streaming: bool | None = None
    defer_loading: bool | None = None
    allowed_callers: list[str] | None = None


ThinkingDisplay = Literal["summarized", "omitted"]


class ThinkingEnabled(WireStruct, tag_field="type", tag="enabled"):
    budget_tokens: int
    display: ThinkingDisplay | None = None


class ThinkingDisabled(WireStruct, tag_field="type", tag="disabled"):
    pass


class ThinkingAdaptive(WireStruct, tag_field="type", tag="adaptive"):
    display: ThinkingDisplay | None = None


Thinking = ThinkingEnabled | ThinkingDisabled | ThinkingAdaptive


class JsonOutputFormat(WireStruct, tag_field="type", tag="json_schema"):
    schema: dict[str, Any]


class OutputConfig(WireStruct):
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: JsonOutputFormat | None = None


Temperature = Annotated[float, Meta(ge=0, le=1)]
Probability = Annotated[float, Meta(ge=0, le=1)]


class CountTokensRequest(WireStruct, kw_only=True):
    """`POST /v1/messages/count_tokens`: what renders the prompt, without the sampling fields."""

    model: str
    messages: list[Message]
    system: str | list[TextBlock] | None = None
    tools: list[dict[str, Any]] | None = None  # each entry decoded in app.api.anthropic.tools
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None
    cache_control: CacheControl | None = None  # accepted: see CacheControl
    # Fields that need Anthropic's servers: refused by name when given (app.api.anthropic.plan).
    mcp_servers: Any = None
    context_management: Any = None
    container: Any = None


class MessagesRequest(CountTokensRequest, kw_only=True):
    """`POST /v1/messages`."""

    max_tokens: Annotated[int, Meta(ge=1)]
    stop_sequences: list[str] | None = None
    temperature: Temperature | None = None
    top_p: Probability | None = None
    top_k: Annotated[int, Meta(ge=0)] | None = None
    metadata: Metadata | None = None
    stream: bool | None = None
    service_tier: Literal["auto", "standard_only"] | None = None  # one tier here: both are honoured
    speed: Literal["standard", "fast"] | None = None
    inference_geo: Any = None
    diagnostics: Any = None
