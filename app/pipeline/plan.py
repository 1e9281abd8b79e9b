"""The one request plan: what a request asks for, in Fireside's own terms, whichever API it came
through.

Each front door decodes its body into its own wire Struct and turns that into a `RequestPlan`
(`app.api.<dialect>`); nothing after that knows which API the request came from. A plan names
its model but holds nothing of it: `app.pipeline.prepare` resolves the plan against the loaded model
(template, tokens, grammar, the model's configured defaults) into the engine's job, `app.pipeline.run`
runs the job, and the dialect shapes the engine's events for its wire.

Fields a request leaves out are None here where the model's configuration may supply a default
(`[models.sampling]` in the config file); the spec's own defaults apply after that.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from typing import Any, Literal

from app.pipeline.errors import BadRequest
from app.pipeline.stream_buffer import BufferPolicy
from backends.jobs import CacheKeys, LogprobOptions
from grammars.json_schema import MAX_SCHEMA_DEPTH
from templates.reasoning import ReasoningRequest

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MaskMode = Literal["count", "non_zero_list", "non_zero_buffer"]


@dataclass(frozen=True)
class ToolPlan:
    """The tools a chat offers, which of them the model may call, and whether it must."""

    tools: list[dict[str, Any]]  # every tool, OpenAI-shaped, as the prompt shows them
    mode: Literal["none", "auto", "required"]
    allowed: tuple[str, ...]  # the names a call may use (a subset keeps the prompt, and its cache, the same)
    parallel: bool

    def __post_init__(self) -> None:
        # rendering and safe tokenization walk the tools recursively: bound them first (400)
        for i, tool in enumerate(self.tools):
            if nests_deeper(tool["function"].get("parameters"), MAX_SCHEMA_DEPTH):
                raise BadRequest(f"tools[{i}].function.parameters nests deeper than {MAX_SCHEMA_DEPTH} levels",
                                 param="tools")

    @property
    def schemas(self) -> dict[str, dict[str, Any]]:
        return {tool["function"]["name"]: tool["function"].get("parameters") or {"type": "object"}
                for tool in self.tools}

    @property
    def shown(self) -> list[dict[str, Any]] | None:
        """The tools the prompt shows (None with `tool_choice: none`: the model is told of none)."""
        return self.tools if self.mode != "none" else None

    @property
    def callable(self) -> frozenset[str] | None:
        """The names the output parser accepts as calls (None: no call is possible)."""
        return frozenset(self.allowed) if self.mode != "none" else None

    @staticmethod
    def check_names(names: list[str], param: str = "tools") -> None:
        """Tool names as OpenAI allows them, each once (400 otherwise)."""
        for i, name in enumerate(names):
            if not TOOL_NAME.match(name):
                raise BadRequest(f"{param}[{i}].function.name {name!r} must be 1 to 64 letters, digits, underscores "
                                 "or dashes", param=param)
        duplicated = {name for name in names if names.count(name) > 1}
        if duplicated:
            raise BadRequest(f"two tools are named {min(duplicated)!r}", param=param)


def nests_deeper(value: Any, limit: int) -> bool:
    """Whether a JSON value nests dicts and lists more than `limit` levels (walked level by level,
    without recursion: the value may nest deeper than the stack)."""
    level = [value]
    for _ in range(limit + 1):
        level = [child for item in level if isinstance(item, (dict, list))
                 for child in (item.values() if isinstance(item, dict) else item)]
        if not level:
            return False
    return True


# Where an image part sat in a message's text (app/pipeline/images.py puts the image there); its random
# part, made at start-up, keeps a user's typed text from ever making an image slot.
IMAGE_MARKER = f"<__image_{secrets.token_hex(8)}__>"
IMAGE_PLACEHOLDER = "<image>"  # where each of a completions prompt's `images` goes (the user writes it)


@dataclass(frozen=True)
class ImageRef:
    """An image (or a video, or a sound) a message carries: its URL and which part of the request it
    came from."""

    url: str
    where: str  # e.g. "messages[1].content[2]", for errors
    max_side: int | None = None  # scale the image (each frame) down to this many pixels on its long side first
    video: tuple[float, int] | None = None  # a video part: (frames per second, most frames) to sample
    audio: bool = False  # a sound (`input_audio`), read by the projector's audio encoder


@dataclass(frozen=True)
class Conversation:
    """A chat: messages rendered with the model's chat template (or the prompt as token ids)."""

    messages: list[dict[str, Any]] | None  # as chat templates read them
    token_ids: tuple[int, ...] | None = None  # `prompt_token_ids`: the prompt as given, no template
    tools: ToolPlan | None = None
    safe_tokenization: bool | None = None  # True: always; None: where it can apply; False: never
    truncate_to: int | None = None  # `prompt_truncate_len`: evict the oldest turns to fit
    images: tuple[ImageRef, ...] = ()  # in the order their markers appear in the messages

    @property
    def shown_tools(self) -> list[dict[str, Any]] | None:
        return self.tools.shown if self.tools is not None else None


@dataclass(frozen=True)
class Prompts:
    """Prompts used as written: text, or token ids. Each gets its own choices."""

    prompts: tuple[str | tuple[int, ...], ...]
    images: tuple[tuple[ImageRef, ...], ...] = ()  # per prompt, for its `<image>` placeholders in order
    keep_last: int | None = None  # read only each prompt's last N tokens (TGI's `truncate`)


@dataclass(frozen=True)
class Sampling:
    """The sampling fields a request sets (None: the model's configured default, else the spec's)."""

    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    typical_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    repetition_penalty: float | None = None
    mirostat_target: float | None = None
    mirostat_lr: float | None = None
    seed: int | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()  # checked against the vocabulary when prepared
    ignore_eos: bool = False


@dataclass(frozen=True)
class ResponseFormat:
    """Structured output: `json_object` (any object, or `schema`), `json_schema` (a schema in
    `schema` or `json_schema`: OpenAI's wrapper or a bare one, either maybe as JSON text) or
    `grammar` (the user's GBNF). Checked and converted when the request is prepared."""

    type: Literal["json_object", "json_schema", "grammar"]
    schema: dict[str, Any] | str | None = None
    json_schema: dict[str, Any] | str | None = None
    grammar: str | None = None


# Echo the whole prompt (`echo: true`), as opposed to its last N tokens (`echo_last`).
ECHO_ALL = -1


@dataclass(frozen=True)
class OutputOptions:
    """What an answer carries besides text."""

    logprobs: LogprobOptions | None = None  # for the engine; None: none computed
    legacy_logprobs: bool = False  # `logprobs`: N (else the OpenAI shape)
    top_logprobs: int = 0
    sampling_mask: MaskMode | None = None
    echo: int | None = None  # None, ECHO_ALL or the last N prompt tokens
    token_ids: bool = False  # `return_token_ids`
    internal_content: bool = False  # `stream_options.include_internal_content`
    raw_output: bool = False
    perf_in_body: bool = False
    timings: bool = False  # llama.cpp's `timings` object on the answer (`timings_per_token`)
    # the logprobs are asked only to shape the dialect's per-token events (TGI's stream), not
    # shown as scores: an answer without them (an upstream's) can still be shaped
    internal_logprobs: bool = False


@dataclass(frozen=True)
class StreamPlan:
    """How an answer streams."""

    include_usage: bool = True  # a last chunk with the usage
    buffer: BufferPolicy | None = None  # coalesce chunks (`stream_options.buffer_*`)


@dataclass(frozen=True)
class Caller:
    """Who asked, as the request log line shows it (`user`, `metadata`)."""

    user: str | None = None
    metadata: dict[str, str] | None = None


@dataclass(frozen=True)
class RequestPlan:
    model: str  # as the request names it (alias, id, `accounts/<a>/models/<id>`)
    input: Conversation | Prompts
    n: int = 1  # choices per prompt
    max_tokens: int | None = None  # None: the model's configured default, else `default_max_tokens`
    default_max_tokens: int | None = None  # None: whatever room the context leaves
    overflow: Literal["error", "truncate"] = "truncate"  # prompt + max_tokens beyond the context
    sampling: Sampling = field(default_factory=Sampling)
    stop: tuple[str, ...] | None = None  # None: the model's configured default
    response_format: ResponseFormat | None = None
    reasoning: ReasoningRequest | None = None  # None: the request sets no reasoning control
    draft: str | tuple[int, ...] = ()  # predicted output, as text or tokens
    cache: CacheKeys = field(default_factory=CacheKeys)
    output: OutputOptions = field(default_factory=OutputOptions)
    stream: StreamPlan | None = None  # None: one whole answer
    priority: bool = False  # waits for a slot ahead of the others
    caller: Caller = field(default_factory=Caller)
