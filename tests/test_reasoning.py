"""`normalize_reasoning`: the spec's rules for `reasoning_effort`, `thinking` and `reasoning_history`."""

from __future__ import annotations

import pytest

from templates.reasoning import (
    DEFAULT_BUDGET_END,
    ReasoningError,
    ReasoningRequest,
    ThinkingControl,
    normalize_reasoning,
)


def thinking(**fields: object) -> ThinkingControl:
    return ThinkingControl(**fields)  # type: ignore[arg-type]


def shape(request: ReasoningRequest) -> tuple[str | None, int | None, str | None]:
    return request.effort, request.budget_tokens, request.history


@pytest.mark.parametrize(("effort", "thinking_config", "history", "expected"), [
    # reasoning_effort alone
    (None, None, None, (None, None, None)),
    ("low", None, None, ("low", None, None)),
    ("medium", None, None, ("medium", None, None)),
    ("high", None, None, ("high", None, None)),
    ("xhigh", None, None, ("xhigh", None, None)),
    ("max", None, None, ("max", None, None)),
    ("none", None, None, ("none", None, None)),
    ("adaptive", None, None, ("adaptive", None, None)),
    (True, None, None, ("medium", None, None)),
    (False, None, None, ("none", None, None)),
    (1, None, None, ("medium", 1, None)),
    (2048, None, None, ("medium", 2048, None)),
    # reasoning_history alone, and with an effort
    (None, None, "disabled", (None, None, "disabled")),
    ("high", None, "interleaved", ("high", None, "interleaved")),
    (None, None, "preserved", (None, None, "preserved")),
    # thinking: enabled means effort true unless an effort says otherwise
    (None, thinking(), None, ("medium", None, None)),
    (None, thinking(type="enabled"), None, ("medium", None, None)),
    ("high", thinking(type="enabled"), None, ("high", None, None)),
    (False, thinking(type="enabled"), None, ("none", None, None)),
    ("low", thinking(type="enabled", effort="max"), None, ("max", None, None)),
    (None, thinking(effort=True), None, ("medium", None, None)),
    (None, thinking(effort=4096), None, ("medium", 4096, None)),
    (None, thinking(budget_tokens=1024), None, ("medium", 1024, None)),
    ("high", thinking(budget_tokens=8000), None, ("high", 8000, None)),
    (None, thinking(keep="all"), None, ("medium", None, "preserved")),
    (None, thinking(keep="all"), "preserved", ("medium", None, "preserved")),
    # disabled always disables; adaptive is its own effort
    ("high", thinking(type="disabled"), None, ("none", None, None)),
    (None, thinking(type="disabled"), "disabled", ("none", None, "disabled")),
    (4096, thinking(type="adaptive"), None, ("adaptive", None, None)),
])
def test_normalization(effort: object, thinking_config: ThinkingControl | None, history: str | None,
                       expected: tuple[str | None, int | None, str | None]) -> None:
    assert shape(normalize_reasoning(effort, thinking_config, history)) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(("effort", "thinking_config", "history", "message", "param"), [
    (0, None, None, "must be positive, got 0", "reasoning_effort"),
    (-5, None, None, "must be positive, got -5", "reasoning_effort"),
    ("extreme", None, None, "Invalid reasoning effort: extreme", "reasoning_effort"),
    (None, None, "sometimes", "Invalid reasoning history: sometimes", "reasoning_history"),
    (None, thinking(effort=0), None, "must be positive, got 0", "thinking"),
    (None, thinking(budget_tokens=1023), None, "thinking.budget_tokens must be >= 1024, got 1023", "thinking"),
    (None, thinking(budget_tokens=0), None, "thinking.budget_tokens must be >= 1024, got 0", "thinking"),
    (2048, thinking(budget_tokens=4096), None, "give the reasoning budget once", "thinking"),
    ("none", thinking(budget_tokens=4096), None, "cannot be used when reasoning is disabled", "thinking"),
    (None, thinking(type="disabled", budget_tokens=2048), None,
     "thinking.budget_tokens is only valid when thinking.type is 'enabled'", "thinking"),
    (None, thinking(type="disabled", keep="all"), None,
     "thinking.keep is only valid when thinking.type is 'enabled'", "thinking"),
    (None, thinking(type="disabled", effort="high"), None,
     "thinking.effort is only valid when thinking.type is 'enabled'", "thinking"),
    (None, thinking(type="adaptive", budget_end_str="Done."), None,
     "thinking.budget_end_str is only valid when thinking.type is 'enabled'", "thinking"),
    (None, thinking(keep="all"), "interleaved",
     "thinking.keep 'all' preserves reasoning history, which contradicts reasoning_history 'interleaved'",
     "reasoning_history"),
    (None, thinking(keep="all"), "disabled", "contradicts reasoning_history 'disabled'", "reasoning_history"),
])
def test_errors(effort: object, thinking_config: ThinkingControl | None, history: str | None, message: str,
                param: str) -> None:
    with pytest.raises(ReasoningError, match=message) as caught:
        normalize_reasoning(effort, thinking_config, history)  # type: ignore[arg-type]
    assert caught.value.param == param
    assert isinstance(caught.value, ValueError)


def test_the_given_effort_and_its_field_are_kept_for_model_checks() -> None:
    request = normalize_reasoning(False, None, None)
    assert (request.given, request.param) == (False, "reasoning_effort")
    request = normalize_reasoning("low", thinking(effort=3000), None)
    assert (request.given, request.param, request.budget_tokens) == (3000, "thinking", 3000)
    request = normalize_reasoning(None, thinking(), None)
    assert (request.given, request.param) == (None, "thinking")  # not a boolean the client wrote
    assert normalize_reasoning(None, thinking(type="disabled"), None).param == "thinking"


def test_budget_end_phrase() -> None:
    assert normalize_reasoning(2048, None, None).budget_end_text == DEFAULT_BUDGET_END
    request = normalize_reasoning(None, thinking(budget_tokens=2048, budget_end_str="Time is up."), None)
    assert (request.budget_end, request.budget_end_text) == ("Time is up.", "Time is up.")
    assert normalize_reasoning(None, thinking(budget_tokens=2048, budget_end_str=""), None).budget_end_text == ""
    assert DEFAULT_BUDGET_END.strip() and len(DEFAULT_BUDGET_END) < 100
