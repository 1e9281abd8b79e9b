"""Tool planning for every door: its tools as OpenAI-shaped function dicts (what templates and
grammars read) and its tool choice in the neutral form below become the plan's `ToolPlan`:
which tools the prompt shows, which the model may call, and whether it must.

Each door turns its own wire Structs into these (chat's `tool_choice` and `functions`, the
Responses API's, Anthropic's `tool_choice` with `disable_parallel_tool_use`; Ollama has none)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from app.pipeline.errors import BadRequest
from app.pipeline.plan import ToolPlan

ToolMode = Literal["auto", "none", "required"]  # the model decides / calls nothing / must call one


@dataclass(frozen=True)
class NamedTool:
    """The model must call this function."""

    name: str
    parallel: bool = False  # it may call it more than once (OpenAI's APIs: never; Anthropic's: by default)


@dataclass(frozen=True)
class AllowedTools:
    """The model may (`auto`) or must (`required`) call one of these functions; the prompt still
    shows every tool, so that its cached prefix stays the same."""

    mode: Literal["auto", "required"]
    names: tuple[str, ...]


ToolChoice = ToolMode | NamedTool | AllowedTools


def function_tool(function: dict[str, Any]) -> dict[str, Any]:
    """A function tool as chat's `tools` carry it (fields left None are left out, in the order given)."""
    return {"type": "function", "function": {key: value for key, value in function.items() if value is not None}}


def allowed_tools(mode: Literal["auto", "required"] | None, entries: list[dict[str, Any]] | None) -> AllowedTools:
    """OpenAI's `allowed_tools` (chat's and the Responses API's): a mode and tool entries, each
    `{"type": "function", "function": {"name": ...}}` or flat `{"type": "function", "name": ...}`."""
    if mode is None or not entries:
        raise BadRequest("tool_choice of type `allowed_tools` needs a mode and tools", param="tool_choice")
    names = []
    for i, entry in enumerate(entries):
        function = entry.get("function") if isinstance(entry.get("function"), dict) else entry
        name = function.get("name") if isinstance(function, dict) else None
        if entry.get("type", "function") != "function" or not isinstance(name, str):
            raise BadRequest(f"tool_choice.allowed_tools.tools[{i}] must be {{\"type\": \"function\", "
                             "\"function\": {\"name\": ...}}", param="tool_choice")
        names.append(name)
    return AllowedTools(mode, tuple(names))


def plan_tools(tools: list[dict[str, Any]], choice: ToolChoice, parallel: bool) -> ToolPlan | None:
    """The plan, or None when there are no tools. 400 for a choice that names no tool, or one that
    needs tools when there are none. `parallel`: whether a turn may hold several calls (a
    `NamedTool` says it for itself)."""
    if not tools:
        if choice not in ("auto", "none"):
            raise BadRequest("tool_choice needs `tools`: there is no tool to choose", param="tool_choice")
        return None
    names = [tool["function"]["name"] for tool in tools]
    ToolPlan.check_names(names)
    if isinstance(choice, NamedTool):
        _known(choice.name, names)
        return ToolPlan(tools, "required", (choice.name,), choice.parallel)
    if isinstance(choice, AllowedTools):
        for name in choice.names:
            _known(name, names)
        return ToolPlan(tools, choice.mode, tuple(name for name in names if name in choice.names), parallel)
    return ToolPlan(tools, choice, tuple(names), parallel)


def _known(name: str, names: list[str]) -> None:
    if name not in names:
        raise BadRequest(f"tool_choice names {name!r}, which is not among the tools", param="tool_choice")
