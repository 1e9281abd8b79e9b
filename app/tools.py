"""`tools`, `tool_choice`, `parallel_tool_calls` and the deprecated `functions` / `function_call`,
normalized into one plan: which tools the prompt shows, which the model may call, and whether
it must."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from app.errors import BadRequest
from app.request_types import (
    AllowedToolsSelection,
    ChatCompletionRequest,
    FunctionSelection,
)

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@dataclass(frozen=True)
class ToolPlan:
    tools: list[dict[str, Any]]  # every tool, OpenAI-shaped, as the prompt shows them
    mode: Literal["none", "auto", "required"]
    allowed: tuple[str, ...]  # the names a call may use (a subset keeps the prompt, and its cache, the same)
    parallel: bool

    @property
    def schemas(self) -> dict[str, dict[str, Any]]:
        return {tool["function"]["name"]: tool["function"].get("parameters") or {"type": "object"}
                for tool in self.tools}


def tool_plan(request: ChatCompletionRequest) -> ToolPlan | None:
    """The plan, or None when the request has no tools. 400 for what contradicts itself."""
    tools = _tools(request)
    choice = _choice(request)
    if not tools:
        if choice not in ("auto", "none"):
            raise BadRequest("tool_choice needs `tools`", param="tool_choice")
        return None
    names = [tool["function"]["name"] for tool in tools]
    for i, name in enumerate(names):
        if not TOOL_NAME.match(name):
            raise BadRequest(f"tools[{i}].function.name {name!r} must be 1 to 64 letters, digits, underscores or "
                             "dashes", param="tools")
    duplicated = {name for name in names if names.count(name) > 1}
    if duplicated:
        raise BadRequest(f"two tools are named {min(duplicated)!r}", param="tools")
    parallel = request.parallel_tool_calls is not False
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
