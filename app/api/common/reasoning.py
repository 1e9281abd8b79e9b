"""The reasoning request every door builds: its own reasoning fields, turned into the plain values
and `ThinkingControl` that `templates.reasoning` takes, become one `ReasoningRequest` (a
contradiction is a 400 naming the door's own field)."""

from __future__ import annotations

from dataclasses import replace

from app.pipeline.errors import BadRequest
from templates.reasoning import (
    ReasoningError,
    ReasoningRequest,
    ThinkingControl,
    normalize_reasoning,
)

EFFORT_PARAM = "reasoning_effort"  # what `templates.reasoning` calls the effort field


def reasoning_request(effort: str | int | bool | None, thinking: ThinkingControl | None = None,
                      history: str | None = None, *, effort_param: str = EFFORT_PARAM) -> ReasoningRequest:
    """The request's effort, `thinking` and reasoning history in one shape. `effort_param`: the
    door's name for its effort field (`think`, `reasoning.effort`, ...), blamed by the 400 and by
    a model's later refusal of the effort."""
    try:
        request = normalize_reasoning(effort, thinking, history)
    except ReasoningError as error:
        raise BadRequest(str(error), param=_named(error.param, effort_param)) from None
    return replace(request, param=_named(request.param, effort_param))


def _named(param: str, effort_param: str) -> str:
    return effort_param if param == EFFORT_PARAM else param
