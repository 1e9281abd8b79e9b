"""Messages API bodies turned into the one request plan (DESIGN step 2), with the checks of
meaning a schema cannot carry (400, naming the field)."""

from __future__ import annotations

from app.api.anthropic.messages import conversation_turns
from app.api.anthropic.tools import tool_plan
from app.api.anthropic.wire import (
    CountTokensRequest,
    MessagesRequest,
    Thinking,
    ThinkingAdaptive,
    ThinkingDisabled,
    ThinkingEnabled,
)
from app.api.common.reasoning import reasoning_request
from app.pipeline.errors import BadRequest
from app.pipeline.plan import (
    Caller,
    Conversation,
    RequestPlan,
    ResponseFormat,
    Sampling,
    StreamPlan,
)
from backends.jobs import CacheKeys
from templates.reasoning import ReasoningRequest, ThinkingControl

# Request fields that need Anthropic's own servers; named in the 400 when given.
_REFUSED = {
    "mcp_servers": "MCP servers are connected by Anthropic's API; run the MCP client on your side",
    "context_management": "context editing is done by Anthropic's API",
    "container": "code-execution containers run on Anthropic's side",
    "inference_geo": "inference runs on this machine",
    "diagnostics": "prompt-cache diagnostics are not kept",
}


def _thinking(thinking: Thinking | None) -> ThinkingControl | None:
    if thinking is None:
        return None
    if isinstance(thinking, (ThinkingEnabled, ThinkingAdaptive)) and thinking.display == "omitted":
        raise BadRequest("thinking.display 'omitted' is not supported: a thinking block must carry its text to "
                         "be sent back", param="thinking")
    if isinstance(thinking, ThinkingEnabled):
        return ThinkingControl("enabled", thinking.budget_tokens)
    return ThinkingControl("disabled" if isinstance(thinking, ThinkingDisabled) else "adaptive")


def reasoning(request: CountTokensRequest) -> ReasoningRequest | None:
    """`thinking` (and `output_config.effort`) mapped exactly as the chat endpoint maps its own
    `thinking` and `reasoning_effort`. Neither given: the model's own default."""
    effort = request.output_config.effort if request.output_config is not None else None
    thinking = _thinking(request.thinking)
    if thinking is None and effort is None:
        return None
    return reasoning_request(effort, thinking, effort_param="output_config.effort")


def _refuse_unsupported(request: CountTokensRequest) -> None:
    for name, why in _REFUSED.items():
        if getattr(request, name, None) is not None:
            raise BadRequest(f"{name} is not supported by this server: {why}", param=name)
    if isinstance(request, MessagesRequest) and request.speed == "fast":
        raise BadRequest("speed 'fast' is not available: this server has one speed", param="speed")


def conversation(request: CountTokensRequest) -> Conversation:
    turns = conversation_turns(request.system, request.messages)
    return turns.conversation(tool_plan(request.tools, request.tool_choice))


def _response_format(request: CountTokensRequest) -> ResponseFormat | None:
    config = request.output_config
    if config is None or config.format is None:
        return None
    return ResponseFormat("json_schema", schema=config.format.schema)


def count_plan(request: CountTokensRequest) -> RequestPlan:
    """What `count_tokens` renders: the same prompt a create with these fields would."""
    _refuse_unsupported(request)
    return RequestPlan(model=request.model, input=conversation(request), max_tokens=1,
                       response_format=_response_format(request), reasoning=reasoning(request))


def messages_plan(request: MessagesRequest) -> RequestPlan:
    """`POST /v1/messages` as a plan."""
    _refuse_unsupported(request)
    user = request.metadata.user_id if request.metadata is not None else None
    return RequestPlan(
        model=request.model,
        input=conversation(request),
        max_tokens=request.max_tokens,
        sampling=Sampling(temperature=request.temperature, top_k=request.top_k, top_p=request.top_p),
        stop=tuple(request.stop_sequences) if request.stop_sequences is not None else None,
        response_format=_response_format(request),
        reasoning=reasoning(request),
        cache=CacheKeys(affinity=user),  # one user's requests go to the slot holding their prefix
        # message_delta carries the usage: no separate usage chunk
        stream=StreamPlan(include_usage=False) if request.stream else None,
        caller=Caller(user=user),
    )
