"""The request's reasoning controls (`reasoning_effort`, `thinking`, `reasoning_history`) in one shape.

The spec offers three overlapping fields; `normalize_reasoning` applies its rules (booleans become
`"medium"`/`"none"`, an integer is a token budget, `thinking.effort` beats `reasoning_effort`,
`keep: "all"` means `reasoning_history: "preserved"`) so that the model families in
`templates.families` see one `ReasoningRequest` and only check what their model supports.

Its inputs are plain values and `ThinkingControl`, this package's own form of a `thinking`
object: each API's front door turns its own fields into them, and nothing here reads a door's types.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

EFFORTS = ("none", "low", "medium", "high", "xhigh", "max", "adaptive")
HISTORY_MODES = ("disabled", "interleaved", "preserved")
MIN_BUDGET_TOKENS = 1024
# Forced into the reasoning when its token budget runs out, before the family's `budget_close`.
DEFAULT_BUDGET_END = "\n\nConsidering the limited time, I have to give the answer now.\n"


class ReasoningError(ValueError):
    """A reasoning control that the spec or the model refuses; `param` names the request field to blame."""

    def __init__(self, message: str, param: str = "reasoning_effort"):
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True)
class ThinkingControl:
    """A `thinking` setting: reasoning on (`enabled`, with the spec's optional extras), off
    (`disabled`) or the model's own choice (`adaptive`). Only `enabled` takes the extras."""

    type: str = "enabled"
    budget_tokens: int | None = None
    """Hard cap on reasoning tokens (at least `MIN_BUDGET_TOKENS`)."""
    keep: str | None = None
    """`"all"`: keep earlier turns' reasoning (`reasoning_history: "preserved"`)."""
    budget_end_str: str | None = None
    """Phrase forced when the budget runs out (see `ReasoningRequest.budget_end`)."""
    effort: str | int | bool | None = None
    """An effort that beats the request's own `reasoning_effort`."""


@dataclass(frozen=True)
class ReasoningRequest:
    """What the request asks of the model's reasoning, after the spec's aliases are resolved."""

    effort: str | None = None
    """One of `EFFORTS`; None when the request does not say (the model's or template's default)."""
    budget_tokens: int | None = None
    """Hard cap on generated reasoning tokens (an integer effort, or `thinking.budget_tokens`)."""
    history: str | None = None
    """One of `HISTORY_MODES`; None for the template's default."""
    budget_end: str | None = None
    """Phrase forced when the budget runs out; None for `DEFAULT_BUDGET_END`, "" for none."""
    given: str | int | bool | None = None
    """The effort as the client wrote it, for models that refuse some kinds (booleans, integers)."""
    param: str = "reasoning_effort"
    """The request field that carried the effort, blamed by model-specific errors."""

    @property
    def budget_end_text(self) -> str:
        return DEFAULT_BUDGET_END if self.budget_end is None else self.budget_end


def normalize_reasoning(reasoning_effort: str | int | bool | None, thinking: ThinkingControl | None,
                        reasoning_history: str | None) -> ReasoningRequest:
    """One `ReasoningRequest` from the three request fields; raises `ReasoningError` for contradictions."""
    if reasoning_history is not None and reasoning_history not in HISTORY_MODES:
        raise ReasoningError(f"Invalid reasoning history: {reasoning_history}", "reasoning_history")
    if thinking is None:
        return _from_effort(reasoning_effort, "reasoning_effort", history=reasoning_history)
    kind = thinking.type
    extras = {"budget_tokens": thinking.budget_tokens, "keep": thinking.keep,
              "budget_end_str": thinking.budget_end_str, "effort": thinking.effort}
    if kind in ("disabled", "adaptive"):
        for name, value in extras.items():
            if value is not None:
                raise ReasoningError(f"thinking.{name} is only valid when thinking.type is 'enabled'", "thinking")
        effort = "none" if kind == "disabled" else "adaptive"
        return ReasoningRequest(effort=effort, history=reasoning_history, given=effort, param="thinking")
    if kind != "enabled":
        raise ReasoningError(f"Invalid thinking type: {kind}", "thinking")
    history = _history_with_keep(reasoning_history, extras["keep"])
    if extras["effort"] is not None:
        given, param = extras["effort"], "thinking"
    elif reasoning_effort is not None:
        given, param = reasoning_effort, "reasoning_effort"
    else:
        given, param = True, "thinking"
    request = _from_effort(given, param, history=history, budget_end=extras["budget_end_str"])
    if given is True and param == "thinking" and extras["effort"] is None:
        request = replace(request, given=None)  # `type: enabled` alone is not a boolean the client wrote
    budget = extras["budget_tokens"]
    if budget is None:
        return request
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < MIN_BUDGET_TOKENS:
        raise ReasoningError(f"thinking.budget_tokens must be >= {MIN_BUDGET_TOKENS}, got {budget}", "thinking")
    if request.budget_tokens is not None:
        raise ReasoningError("give the reasoning budget once: thinking.budget_tokens or an integer effort", "thinking")
    if request.effort == "none":
        raise ReasoningError("thinking.budget_tokens cannot be used when reasoning is disabled", "thinking")
    return replace(request, budget_tokens=budget)


def _from_effort(value: str | int | bool | None, param: str, *, history: str | None,
                 budget_end: str | None = None) -> ReasoningRequest:
    """The effort rules of the spec: booleans are normalized first, an integer is a budget."""
    if value is None:
        return ReasoningRequest(history=history, budget_end=budget_end, param=param)
    if isinstance(value, bool):
        effort = "medium" if value else "none"
        return ReasoningRequest(effort=effort, history=history, budget_end=budget_end, given=value, param=param)
    if isinstance(value, int):
        if value <= 0:
            raise ReasoningError(f"reasoning effort as an integer is a token budget and must be positive, got {value}",
                                 param)
        return ReasoningRequest(effort="medium", budget_tokens=value, history=history, budget_end=budget_end,
                                given=value, param=param)
    if value not in EFFORTS:
        raise ReasoningError(f"Invalid reasoning effort: {value}", param)
    return ReasoningRequest(effort=value, history=history, budget_end=budget_end, given=value, param=param)


def _history_with_keep(reasoning_history: str | None, keep: str | None) -> str | None:
    if keep is None:
        return reasoning_history
    if keep != "all":
        raise ReasoningError(f"Invalid thinking.keep: {keep}", "thinking")
    if reasoning_history not in (None, "preserved"):
        raise ReasoningError(
            f"thinking.keep 'all' preserves reasoning history, which contradicts reasoning_history "
            f"'{reasoning_history}'", "reasoning_history")
    return "preserved"
