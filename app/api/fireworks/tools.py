"""`tools`, `tool_choice`, `parallel_tool_calls` and the deprecated `functions` / `function_call`
as the neutral tool choice and function dicts of `app.api.common.tools`, planned there into the
plan's `ToolPlan`."""

from __future__ import annotations

from typing import Any

import msgspec

from app.api.common.tools import (
    NamedTool,
    ToolChoice,
    allowed_tools,
    function_tool,
    plan_tools,
)
from app.api.fireworks.requests import (
    AllowedToolsSelection,
    ChatCompletionRequest,
    FunctionSelection,
)
from app.pipeline.errors import BadRequest
from app.pipeline.plan import ToolPlan


def tool_plan(request: ChatCompletionRequest) -> ToolPlan | None:
    """The plan, or None when the request has no tools. 400 for what contradicts itself."""
    return plan_tools(_tools(request), _choice(request), request.parallel_tool_calls is not False)


def _tools(request: ChatCompletionRequest) -> list[dict[str, Any]]:
    if request.tools and request.functions:
        raise BadRequest("give `tools` or the deprecated `functions`, not both", param="functions")
    if request.functions:
        return [function_tool(msgspec.to_builtins(f)) for f in request.functions]
    tools = []
    for i, tool in enumerate(request.tools or []):
        if tool.function is None:
            raise BadRequest(f"tools[{i}] has no `function`", param="tools")
        tools.append(function_tool(msgspec.to_builtins(tool.function)))
    return tools


def _choice(request: ChatCompletionRequest) -> ToolChoice:
    call = request.function_call
    if call is not None:
        if request.tool_choice != "auto":
            raise BadRequest("give `tool_choice` or the deprecated `function_call`, not both", param="function_call")
        return call if isinstance(call, str) else NamedTool(call.name)
    choice = request.tool_choice
    if isinstance(choice, FunctionSelection):
        name = choice.function.name if choice.function is not None else choice.name
        if not name:
            raise BadRequest("tool_choice of type `function` needs a name", param="tool_choice")
        return NamedTool(name)  # one call of it
    if isinstance(choice, AllowedToolsSelection):
        config = choice.allowed_tools
        if config is not None:
            return allowed_tools(config.mode, config.tools)
        return allowed_tools(choice.mode, choice.tools)
    return "required" if choice == "any" else choice
