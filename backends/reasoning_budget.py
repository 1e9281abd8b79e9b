"""Capping a sequence's reasoning: count the tokens generated inside the reasoning block and,
when the budget is spent, force the tokens that close it (a bridging phrase and the family's
end marker), after which the answer follows.

The engine knows nothing of chat: the markers arrive as text and the closing as token ids.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReasoningBudget:
    tokens: int  # reasoning tokens allowed
    start: str | None  # marker opening the block in the output; None: the prompt opened it
    end: str  # marker closing it
    closing: tuple[int, ...]  # forced when the budget is spent: bridge phrase + end marker (+ answer opener)


_BEFORE, _INSIDE, _DONE = 0, 1, 2


class BudgetTracker:
    """One sequence's reasoning budget. Fed every generated token's text; hands out the forced
    closing tokens once the budget is spent."""

    __slots__ = ("_budget", "_state", "_count", "_tail", "_keep", "forced")

    def __init__(self, budget: ReasoningBudget):
        self._budget = budget
        self._state = _INSIDE if budget.start is None else _BEFORE
        self._count = 0
        self._tail = ""  # recent text, enough to find a marker split across tokens
        self._keep = max(len(budget.start or ""), len(budget.end))
        self.forced: deque[int] = deque()

    def observe(self, text: str, *, was_forced: bool) -> None:
        if self._state == _DONE:
            return
        self._tail = (self._tail + text)[-2 * self._keep:]
        if self._state == _BEFORE:
            start = self._budget.start or ""
            at = self._tail.find(start)
            if at < 0:
                return
            self._state = _INSIDE
            self._tail = self._tail[at + len(start):]
            return  # the marker itself is not reasoning
        if self._budget.end in self._tail:
            self._state = _DONE
            self.forced.clear()
            return
        if not was_forced:
            self._count += 1
            if self._count >= self._budget.tokens and not self.forced:
                self.forced.extend(self._budget.closing)
