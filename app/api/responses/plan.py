"""A Responses request as the one request plan: its items (after the earlier turns of its
`previous_response_id` chain) as the conversation, its function tools as the chat's `ToolPlan`,
`text.format` as the structured-output path, `reasoning.effort` as the reasoning controls.

What the server cannot honour is a 400 naming the field, here, before any model is touched.
"""

from __future__ import annotations

from typing import Any

import msgspec

from app.api.common.reasoning import reasoning_request
from app.api.common.tools import (
    NamedTool,
    ToolChoice,
    allowed_tools,
    function_tool,
    plan_tools,
)
from app.api.responses.items import conversation_turns
from app.api.responses.requests import (
    FormatJsonObject,
    FormatJsonSchema,
    InputItem,
    ResponsesRequest,
    ToolChoiceAllowed,
    ToolChoiceFunction,
)
from app.pipeline.errors import BadRequest
from app.pipeline.plan import (
    Caller,
    OutputOptions,
    RequestPlan,
    ResponseFormat,
    Sampling,
    StreamPlan,
    ToolPlan,
)
from backends.jobs import CacheKeys, LogprobOptions
from templates.reasoning import ReasoningRequest

# `include` values this server honours: image URLs are always kept in the input items, a
# reasoning item's `encrypted_content` is its signed text (app.api.responses.items.seal_reasoning).
LOGPROBS = "message.output_text.logprobs"
INCLUDABLE = ("reasoning.encrypted_content", "message.input_image.image_url", LOGPROBS)
# OpenAI's server-side features that a local server does not have.
NOT_OFFERED = {
    "conversation": "conversations (use previous_response_id)",
    "prompt": "stored prompt templates",
    "context_management": "context management (compaction)",
    "moderation": "moderation",
    "prompt_cache_options": "prompt cache options",
}


def check_request(request: ResponsesRequest, max_logprobs: int) -> None:
    """400 for every field this server cannot honour as asked."""
    for name, what in NOT_OFFERED.items():
        if getattr(request, name) is not None:
            raise BadRequest(f"{name}: this server does not offer {what}", param=name)
    if request.background:
        raise BadRequest("background: this server answers in the foreground only (stream for long answers)",
                         param="background")
    for value in request.include or []:
        if value not in INCLUDABLE:
            raise BadRequest(f"include: {value!r} is not available here (it can include "
                             f"{', '.join(INCLUDABLE)})", param="include")
    if request.top_logprobs and LOGPROBS not in (request.include or []):
        raise BadRequest(f"top_logprobs needs include: [{LOGPROBS!r}]", param="top_logprobs")
    if (request.top_logprobs or 0) > max_logprobs:
        raise BadRequest(f"top_logprobs must be at most {max_logprobs} here (--max-logprobs), got "
                         f"{request.top_logprobs}", param="top_logprobs")
    if request.truncation == "auto":
        raise BadRequest("truncation: 'auto' is not supported; a conversation longer than the context is refused "
                         "(truncation 'disabled')", param="truncation")
    if request.prompt_cache_retention == "24h":
        raise BadRequest("prompt_cache_retention: this server keeps its prompt cache in memory only ('in_memory')",
                         param="prompt_cache_retention")
    if request.text is not None and request.text.verbosity not in (None, "medium"):
        raise BadRequest("text.verbosity: only 'medium' (the model's own) is available", param="text.verbosity")
    if request.stream_options is not None:
        if not request.stream:
            raise BadRequest("stream_options is only valid with stream=true", param="stream_options")
        if request.stream_options.include_obfuscation:
            raise BadRequest("stream_options.include_obfuscation: this server does not pad its stream events",
                             param="stream_options.include_obfuscation")
    _check_reasoning_fields(request)


def _check_reasoning_fields(request: ResponsesRequest) -> None:
    reasoning = request.reasoning
    if reasoning is None:
        return
    if reasoning.summary is not None and reasoning.generate_summary is not None:
        raise BadRequest("give reasoning.summary or its old name reasoning.generate_summary, not both",
                         param="reasoning.summary")
    summary = reasoning.summary or reasoning.generate_summary
    # No summarizer here: "auto" (the best the model has) is its raw reasoning, as `content`.
    if summary not in (None, "auto"):
        raise BadRequest(f"reasoning.summary: this server has no summarizer; {summary!r} cannot be given "
                         "(use 'auto': the model's own reasoning comes back as the reasoning item's content)",
                         param="reasoning.summary")
    if reasoning.context not in (None, "auto"):
        raise BadRequest("reasoning.context: only 'auto' (the chat template's own choice) is available",
                         param="reasoning.context")
    if reasoning.mode not in (None, "standard"):
        raise BadRequest("reasoning.mode: only 'standard' is available", param="reasoning.mode")


def _reasoning(request: ResponsesRequest) -> ReasoningRequest | None:
    effort = request.reasoning.effort if request.reasoning is not None else None
    if effort is None:
        return None
    if effort == "minimal":
        effort = "low"  # OpenAI's "few reasoning tokens"; the families know low as their least
    return reasoning_request(effort, effort_param="reasoning.effort")


def tool_dicts(request: ResponsesRequest) -> list[dict[str, Any]]:
    """The function tools, shaped as chat's (what templates and grammars read)."""
    return [function_tool({key: value for key, value in msgspec.to_builtins(tool).items() if key != "type"})
            for tool in request.tools or []]


def _choice(request: ResponsesRequest) -> ToolChoice:
    choice = request.tool_choice or "auto"
    if isinstance(choice, ToolChoiceFunction):
        return NamedTool(choice.name)  # one call of it, as chat's
    if isinstance(choice, ToolChoiceAllowed):
        return allowed_tools(choice.mode, choice.tools)
    return choice


def tool_plan(request: ResponsesRequest) -> ToolPlan | None:
    return plan_tools(tool_dicts(request), _choice(request), request.parallel_tool_calls is not False)


def response_format(request: ResponsesRequest) -> ResponseFormat | None:
    given = request.text.format if request.text is not None else None
    if isinstance(given, FormatJsonObject):
        return ResponseFormat("json_object")
    if isinstance(given, FormatJsonSchema):
        wrapper = {"name": given.name, "schema": given.schema}
        if given.strict is not None:
            wrapper["strict"] = given.strict
        return ResponseFormat("json_schema", json_schema=wrapper)
    return None


def output_options(request: ResponsesRequest) -> OutputOptions:
    if LOGPROBS not in (request.include or []):
        return OutputOptions()
    top = request.top_logprobs or 0
    return OutputOptions(logprobs=LogprobOptions(top=top), top_logprobs=top)


def responses_plan(request: ResponsesRequest, items: list[InputItem], first_new: int) -> RequestPlan:
    """The plan of a checked request; `items` are the earlier turns' items and then this request's
    (from `first_new` on), item references resolved."""
    return RequestPlan(
        model=request.model,
        input=conversation_turns(items, request.instructions, first_new).conversation(tool_plan(request)),
        max_tokens=request.max_output_tokens,
        sampling=Sampling(temperature=request.temperature, top_p=request.top_p),
        response_format=response_format(request),
        reasoning=_reasoning(request),
        # `prompt_cache_key`, else who asks, steers the request to the slot that holds its prefix
        cache=CacheKeys(affinity=request.prompt_cache_key or request.safety_identifier or request.user),
        output=output_options(request),
        stream=StreamPlan(include_usage=False) if request.stream else None,  # the usage rides on response.completed
        priority=request.service_tier == "priority",
        caller=Caller(request.user or request.safety_identifier, request.metadata),
    )
