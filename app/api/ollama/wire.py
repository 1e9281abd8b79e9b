"""Ollama's request and response bodies, as its API documents them (docs/api.md in ollama/ollama)
and its Python client (`ollama/_types.py`) sends and reads them.

Unknown top-level fields are refused (400 naming them) rather than ignored, as everywhere in
Fireside; `options` is a free mapping checked name by name in `app.api.ollama.options`.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from app.pipeline.answer_check import SchemaViolation


class OllamaStruct(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    pass


class OllamaToolCallFunction(OllamaStruct, omit_defaults=False):
    """`arguments` is written even when empty (a tool without parameters, a call cut short before
    any whole argument): Ollama's client requires it."""

    name: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    index: int | UnsetType = UNSET  # Ollama's newer servers number parallel calls


class OllamaToolCall(OllamaStruct):
    function: OllamaToolCallFunction
    id: str | UnsetType = UNSET
    type: str | UnsetType = UNSET


class OllamaMessage(OllamaStruct):
    role: str
    content: str | None = None
    thinking: str | None = None
    images: list[str] | None = None  # base64
    tool_calls: list[OllamaToolCall] | None = None
    tool_name: str | None = None  # a tool message: the tool whose result it carries
    tool_call_id: str | None = None


class OllamaToolFunction(OllamaStruct):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class OllamaTool(OllamaStruct):
    function: OllamaToolFunction
    type: str = "function"


Format = str | dict[str, Any]  # "json", "" (none) or a JSON schema
KeepAlive = str | int | float  # "5m", "90s", seconds; negative: forever
Think = bool | str


class OllamaGenerationBase(OllamaStruct):
    model: str
    stream: bool = True
    options: dict[str, Any] | None = None
    format: Format | None = None
    keep_alive: KeepAlive | None = None
    think: Think | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None


class OllamaChatRequest(OllamaGenerationBase):
    messages: list[OllamaMessage] | None = None
    tools: list[OllamaTool] | None = None


class OllamaGenerateRequest(OllamaGenerationBase):
    prompt: str | None = None
    suffix: str | None = None
    system: str | None = None
    template: str | None = None
    context: list[int] | None = None
    raw: bool | None = None
    images: list[str] | None = None
    # image generation (Ollama's experimental fields): a text model cannot honour them
    width: int | None = None
    height: int | None = None
    steps: int | None = None


class OllamaEmbedRequest(OllamaStruct):
    model: str
    input: str | list[str]
    truncate: bool = True
    options: dict[str, Any] | None = None
    keep_alive: KeepAlive | None = None
    dimensions: int | None = None


class OllamaEmbeddingsRequest(OllamaStruct):
    """The older `/api/embeddings`: one prompt, one vector (not normalised)."""

    model: str
    prompt: str = ""
    options: dict[str, Any] | None = None
    keep_alive: KeepAlive | None = None


class OllamaModelRequest(OllamaStruct):
    """`/api/show` and `/api/delete`: `model`, or the older `name`."""

    model: str | None = None
    name: str | None = None
    verbose: bool | None = None

    @property
    def target(self) -> str | None:
        return self.model or self.name


class OllamaPullRequest(OllamaStruct):
    model: str | None = None
    name: str | None = None  # the older spelling of `model`
    stream: bool = True
    insecure: bool | None = None


# ---- responses ----------------------------------------------------------------------------------


class OllamaTimings(msgspec.Struct, omit_defaults=True):
    """The last object's statistics; durations in nanoseconds."""

    total_duration: int
    load_duration: int
    prompt_eval_count: int
    prompt_eval_duration: int
    eval_count: int
    eval_duration: int


class OllamaResponseMessage(msgspec.Struct, omit_defaults=True):
    role: str
    content: str
    thinking: str | UnsetType = UNSET
    tool_calls: list[OllamaToolCall] | UnsetType = UNSET
    images: None = None


class OllamaChatResponse(msgspec.Struct, omit_defaults=True):
    model: str
    created_at: str
    message: OllamaResponseMessage
    done: bool
    done_reason: str | UnsetType = UNSET
    total_duration: int | UnsetType = UNSET
    load_duration: int | UnsetType = UNSET
    prompt_eval_count: int | UnsetType = UNSET
    prompt_eval_duration: int | UnsetType = UNSET
    eval_count: int | UnsetType = UNSET
    eval_duration: int | UnsetType = UNSET
    # Fireside's: how the answer breaks the schema in `format` or a tool's (left out when it does not)
    schema_violations: list[SchemaViolation] | UnsetType = UNSET


class OllamaGenerateResponse(msgspec.Struct, omit_defaults=True):
    model: str
    created_at: str
    response: str
    done: bool
    thinking: str | UnsetType = UNSET
    done_reason: str | UnsetType = UNSET
    context: list[int] | UnsetType = UNSET
    total_duration: int | UnsetType = UNSET
    load_duration: int | UnsetType = UNSET
    prompt_eval_count: int | UnsetType = UNSET
    prompt_eval_duration: int | UnsetType = UNSET
    eval_count: int | UnsetType = UNSET
    eval_duration: int | UnsetType = UNSET
    # Fireside's: how the answer breaks the schema in `format` or a tool's (left out when it does not)
    schema_violations: list[SchemaViolation] | UnsetType = UNSET


class OllamaEmbedResponse(msgspec.Struct):
    model: str
    embeddings: list[list[float]]
    total_duration: int
    load_duration: int
    prompt_eval_count: int


class OllamaEmbeddingsResponse(msgspec.Struct):
    embedding: list[float]


class OllamaModelDetails(msgspec.Struct):
    parent_model: str
    format: str
    family: str
    families: list[str]
    parameter_size: str
    quantization_level: str


class OllamaListedModel(msgspec.Struct):
    name: str
    model: str
    modified_at: str
    size: int
    digest: str
    details: OllamaModelDetails
    # a model that runs on another server (Ollama's names for its cloud models' fields)
    remote_model: str | msgspec.UnsetType = msgspec.UNSET
    remote_host: str | msgspec.UnsetType = msgspec.UNSET


class OllamaListResponse(msgspec.Struct):
    models: list[OllamaListedModel]


class OllamaRunningModel(msgspec.Struct):
    name: str
    model: str
    size: int
    digest: str
    details: OllamaModelDetails
    expires_at: str
    size_vram: int
    context_length: int


class OllamaProcessResponse(msgspec.Struct):
    models: list[OllamaRunningModel]


class OllamaShowResponse(msgspec.Struct):
    modelfile: str
    parameters: str
    template: str
    details: OllamaModelDetails
    model_info: dict[str, Any]
    capabilities: list[str]
    modified_at: str
    license: str = ""


class OllamaVersionResponse(msgspec.Struct):
    version: str


class OllamaProgressResponse(msgspec.Struct, omit_defaults=True):
    status: str
    digest: str | UnsetType = UNSET
    total: int | UnsetType = UNSET
    completed: int | UnsetType = UNSET


class OllamaErrorResponse(msgspec.Struct):
    error: str
