"""What a model shows of its chat conventions: cues for recognising families no entry describes.

Recognition reads the template first: the reasoning markers it renders or strips, the names of
the switches it reads (`enable_thinking`, `reasoning_effort`, ...). Where the template is silent,
the model's own special tokens in its GGUF vocabulary speak for it (`<think>`, `<|tool_call_start|>`,
`[TOOL_CALLS]`, ...). `family_from_cues` builds a `CueFamily` from them;
`templates.chat_format.recognise_family` lets the registry's exact signatures win where they apply.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from templates.chat_template import template_variables
from templates.families import (
    LEVELS,
    REASONING_PAIRS,
    ChatFamily,
    TextSwitch,
    Variables,
)
from templates.reasoning import ReasoningRequest

ANSWER_WRAPPERS: tuple[tuple[str, str], ...] = (
    ("<|START_RESPONSE|>", "<|END_RESPONSE|>"), ("<|START_TEXT|>", "<|END_TEXT|>"), ("<response>", "</response>"),
    ("<answer>", "</answer>"),
)
"""Markers some models write around the answer after their reasoning; removed from content."""
FLAG_SWITCHES = ("enable_thinking", "thinking", "enable_reasoning", "reasoning")
"""Template variables that switch reasoning on or off."""
LEVEL_SWITCHES = ("reasoning_effort", "thinking_effort")
"""Template variables that take an effort level (low, medium, high)."""
BUDGET_SWITCHES = ("thinking_budget",)
"""Template variables that take a token budget (-1 unlimited, 0 off)."""
_LEVEL_NAMES = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}


@dataclass(frozen=True)
class ModelCues:
    """A chat template and, when known, the model's special tokens (texts of its CONTROL and
    USER_DEFINED vocabulary entries; `control` the CONTROL ones, which llama.cpp renders only on request)."""

    template: str
    tokens: frozenset[str] = frozenset()
    control: frozenset[str] = frozenset()
    variables: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "variables", template_variables(self.template))

    @property
    def knows_vocabulary(self) -> bool:
        return bool(self.tokens)

    def shows(self, text: str) -> bool:
        """Whether the template text shows `text` (a marker it renders, strips or tests for)."""
        return text in self.template


def reasoning_pair(cues: ModelCues) -> tuple[str, str] | None:
    """The reasoning markers: the first pair whose end marker the template shows (renders or
    strips), else a pair both of whose markers are special tokens of the vocabulary; None when
    neither shows any."""
    for start, end in REASONING_PAIRS:
        if cues.shows(end):
            return start, end
    for start, end in REASONING_PAIRS:
        if start in cues.tokens and end in cues.tokens:
            return start, end
    return None


def _switch_variables(flags: tuple[str, ...], levels: tuple[str, ...], budgets: tuple[str, ...]) -> Variables:
    """The switches the template reads, all set for the effort; nothing when the request gives none."""
    def variables(effort: str | None, request: ReasoningRequest) -> dict[str, Any]:
        if effort is None:  # the template's own default: nothing passed
            return {}
        out: dict[str, Any] = {name: effort != "none" for name in flags}
        for name in levels:
            if effort in _LEVEL_NAMES:
                out[name] = _LEVEL_NAMES[effort]
        for name in budgets:
            out[name] = 0 if effort == "none" else request.budget_tokens or -1
        return out
    return variables


@dataclass(frozen=True)
class CueFamily(ChatFamily):
    """A family read from its cues. Without an on/off switch, effort "none" closes the reasoning
    block before the model writes (an empty block after the generation prompt), as for the
    families whose templates cannot switch reasoning off."""

    empty_block_for_none: bool = False

    def finish_prompt(self, prompt: str, request: ReasoningRequest) -> str:
        if not self.empty_block_for_none or self.effort(request) != "none" or self.closes_reasoning(prompt):
            return prompt
        assert self.reasoning_start is not None and self.reasoning_end is not None
        opened = self.opens_reasoning(prompt)
        return prompt + ("" if opened else self.reasoning_start + "\n") + self.reasoning_end + "\n\n"


def family_from_cues(cues: ModelCues, name: str = "cues") -> CueFamily | None:
    """The family the cues describe: its reasoning markers, switches and history field; None
    when neither the template nor the vocabulary shows reasoning markers."""
    found = reasoning_pair(cues)
    if found is None:
        return None
    start, end = found
    flags = _present(FLAG_SWITCHES, cues.variables)
    levels = _present(LEVEL_SWITCHES, cues.variables)
    budgets = _present(BUDGET_SWITCHES, cues.variables)
    special = start in cues.control or end in cues.control if cues.knows_vocabulary else True
    # words in the system prompt (`/no_think`) where the template has no variable to switch
    text_switch = None
    if not flags and cues.shows("/no_think"):
        text_switch = TextSwitch("/think" if cues.shows("'/think'") else None, "/no_think", append=True, insert=True)
    return CueFamily(
        name=f"{name}:{start}", default_effort=None, efforts=LEVELS,
        variables=_switch_variables(flags, levels, budgets), text_switch=text_switch,
        empty_block_for_none=not (flags or budgets or text_switch),
        reasoning_field=_history_field(cues.template), reasoning_start=start, reasoning_end=end,
        budget_close=end + "\n\n",
        content_markers=tuple(marker for pair in ANSWER_WRAPPERS
                              if cues.shows(pair[0]) or set(pair) <= cues.tokens for marker in pair),
        special_markers=special)


def _history_field(template: str) -> str:
    """The message field through which the template reads past reasoning."""
    for name in ("reasoning_content", "thinking", "reasoning"):
        if re.search(rf"""\.{name}\b|\[['"]{name}['"]\]|get\(['"]{name}['"]""", template):
            return name
    return "reasoning_content"


def _present(names: Iterable[str], variables: frozenset[str]) -> tuple[str, ...]:
    return tuple(name for name in names if name in variables)
