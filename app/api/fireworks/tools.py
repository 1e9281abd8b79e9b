"""`tools`, `tool_choice`, `parallel_tool_calls` and the deprecated `functions` / `function_call`,
normalized into the plan's `ToolPlan`: which tools the prompt shows, which the model may call,
and whether it must."""

from __future__ import annotations

from typing import Any

import msgspec

from app.api.fireworks.requests import (
    AllowedToolsSelection,
    ChatCompletionRequest,
    FunctionSelection,
)
from app.pipeline.errors import BadRequest
from app.pipeline.plan import ToolPlan


def tool_plan(request: ChatCompletionRequest) -> ToolPlan | None:
    """The plan, or None when the request has no tools. 400 for what contradicts itself."""
    return plan_tools(_tools(request), _choice(request), request.parallel_tool_calls)


def plan_tools(tools: list[dict[str, Any]], choice: Any, parallel_tool_calls: bool | None) -> ToolPlan | None:
    """OpenAI-shaped function tools and a `tool_choice` (a mode, or a `FunctionSelection` /
    `AllowedToolsSelection`) as a plan; shared with the Responses API."""
    if not tools:
        if choice not in ("auto", "none"):
            raise BadRequest("tool_choice needs `tools`", param="tool_choice")
        return None
    names = [tool["function"]["name"] for tool in tools]
    ToolPlan.check_names(names)
    parallel = parallel_tool_calls is not False
    if choice in ("auto", "none"):
        return ToolPlan(tools, choice, tuple(names), parallel)
    if choice in ("required", "any"):
        return ToolPlan(tools, "required", tuple(names), parallel)
    if isinstance(choice, FunctionSelection):
        name = choice.function.name if choice.function is not None else choice.name
        if not name:
            raise BadRequest("tool_choice of type `function` needs a name", param="tool_choice")
        _known(name, names, "tool_choice")
        return ToolPlan(tools, "required", (name,), False)  # a named function: one call of it
    assert isinstance(choice, AllowedToolsSelection)
    config = choice.allowed_tools
    mode = config.mode if config is not None else choice.mode
    listed = config.tools if config is not None else choice.tools
    if mode is None or not listed:
        raise BadRequest("tool_choice of type `allowed_tools` needs a mode and tools", param="tool_choice")
    allowed = []
    for i, entry in enumerate(listed):
        function = entry.get("function") if isinstance(entry.get("function"), dict) else entry
        name = function.get("name") if isinstance(function, dict) else None
        if entry.get("type", "function") != "function" or not isinstance(name, str):
            raise BadRequest(f"tool_choice.allowed_tools.tools[{i}] must be {{\"type\": \"function\", "
                             "\"function\": {\"name\": ...}}", param="tool_choice")
        _known(name, names, "tool_choice")
        allowed.append(name)
    return ToolPlan(tools, mode, tuple(n for n in names if n in allowed), parallel)


def _known(name: str, names: list[str], param: str) -> None:
    if name not in names:
        raise BadRequest(f"{param} names {name!r}, which is not among the tools", param=param)


def _tools(request: ChatCompletionRequest) -> list[dict[str, Any]]:
    if request.tools and request.functions:
        raise BadRequest("give `tools` or the deprecated `functions`, not both", param="functions")
    if request.functions:
        return [{"type": "function", "function": _function(f)} for f in request.functions]
    tools = []
    for i, tool in enumerate(request.tools or []):
        if tool.function is None:
            raise BadRequest(f"tools[{i}] has no `function`", param="tools")
        tools.append({"type": "function", "function": _function(tool.function)})
    return tools


def _function(definition: Any) -> dict[str, Any]:
    function = msgspec.to_builtins(definition)
    return {key: value for key, value in function.items() if value is not None}


def _choice(request: ChatCompletionRequest) -> Any:
    call = request.function_call
    if call is None:
        return request.tool_choice
    if request.tool_choice != "auto":
        raise BadRequest("give `tool_choice` or the deprecated `function_call`, not both", param="function_call")
    if isinstance(call, str):
        return call
    return FunctionSelection(name=call.name)
