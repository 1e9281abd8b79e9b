"""Anthropic's `tools` and `tool_choice` as the plan's `ToolPlan` (calls are then forced by
grammar as for chat). Client tools are honoured; server tools (`web_search_...`, `bash_...`,
`text_editor_...`, `computer_...`, ...) run on Anthropic's side and are refused by name."""

from __future__ import annotations

from typing import Any

import msgspec

from app.api.anthropic.messages import check_depth
from app.api.anthropic.wire import (
    CustomTool,
    ToolChoice,
    ToolChoiceAny,
    ToolChoiceNone,
    ToolChoiceTool,
)
from app.api.common.decode import from_msgspec
from app.pipeline.errors import BadRequest, RequestValidationError
from app.pipeline.plan import ToolPlan


def _custom_tool(entry: Any, i: int) -> CustomTool:
    if not isinstance(entry, dict):
        raise RequestValidationError.at(["tools", i], "Expected `object`", "type_error")
    kind = entry.get("type")
    if kind not in (None, "custom"):
        raise BadRequest(f"tools[{i}]: tool type {kind!r} is a server tool that runs on Anthropic's side; this "
                         "server runs client tools only (give name, description and input_schema)", param="tools")
    check_depth(entry, f"tools[{i}]", "tools")
    try:
        tool = msgspec.convert(entry, CustomTool)
    except msgspec.ValidationError as error:
        raise _at(from_msgspec(error), ["tools", i]) from None
    if tool.defer_loading:
        raise BadRequest(f"tools[{i}].defer_loading needs Anthropic's tool search, which this server does not run",
                         param="tools")
    if tool.allowed_callers is not None and set(tool.allowed_callers) - {"direct"}:
        raise BadRequest(f"tools[{i}].allowed_callers: only 'direct' calls are possible here", param="tools")
    if tool.input_examples:
        raise BadRequest(f"tools[{i}].input_examples is not supported by this server", param="tools")
    if tool.input_schema.get("type", "object") != "object":
        raise BadRequest(f"tools[{i}].input_schema must describe an object", param="tools")
    return tool


def _at(error: RequestValidationError, prefix: list[str | int]) -> RequestValidationError:
    for item in error.items:
        item.loc = ["body", *prefix, *item.loc[1:]]
    return error


def _openai_shaped(tool: CustomTool) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name, "parameters": tool.input_schema}
    if tool.description is not None:
        function["description"] = tool.description
    return {"type": "function", "function": function}


def tool_plan(tools: list[Any] | None, choice: ToolChoice | None) -> ToolPlan | None:
    """The plan, or None without tools. 400 for a server tool or a choice that names no tool."""
    shaped = [_openai_shaped(_custom_tool(entry, i)) for i, entry in enumerate(tools or [])]
    parallel = not (choice is not None and not isinstance(choice, ToolChoiceNone)
                    and choice.disable_parallel_tool_use)
    if not shaped:
        if isinstance(choice, (ToolChoiceAny, ToolChoiceTool)):
            raise BadRequest("tool_choice: forcing a tool call needs `tools`", param="tool_choice")
        return None
    names = [tool["function"]["name"] for tool in shaped]
    ToolPlan.check_names(names)
    if isinstance(choice, ToolChoiceNone):
        return ToolPlan(shaped, "none", tuple(names), parallel)
    if isinstance(choice, ToolChoiceAny):
        return ToolPlan(shaped, "required", tuple(names), parallel)
    if isinstance(choice, ToolChoiceTool):
        if choice.name not in names:
            raise BadRequest(f"tool_choice names {choice.name!r}, which is not among the tools", param="tool_choice")
        return ToolPlan(shaped, "required", (choice.name,), parallel)
    return ToolPlan(shaped, "auto", tuple(names), parallel)
