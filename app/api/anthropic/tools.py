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
from app.api.common.tools import NamedTool, function_tool, plan_tools
from app.api.common.tools import ToolChoice as NeutralChoice
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


def _function(tool: CustomTool) -> dict[str, Any]:
    return function_tool({"name": tool.name, "parameters": tool.input_schema, "description": tool.description})


def _choice(choice: ToolChoice | None) -> tuple[NeutralChoice, bool]:
    """The choice in neutral terms, and whether a turn may hold several calls."""
    if choice is None:
        return "auto", True
    if isinstance(choice, ToolChoiceNone):
        return "none", True
    parallel = not choice.disable_parallel_tool_use
    if isinstance(choice, ToolChoiceTool):
        return NamedTool(choice.name, parallel), parallel  # the tool, as often as the model likes unless disabled
    return ("required" if isinstance(choice, ToolChoiceAny) else "auto"), parallel


def tool_plan(tools: list[Any] | None, choice: ToolChoice | None) -> ToolPlan | None:
    """The plan, or None without tools. 400 for a server tool or a choice that names no tool."""
    shaped = [_function(_custom_tool(entry, i)) for i, entry in enumerate(tools or [])]
    return plan_tools(shaped, *_choice(choice))
