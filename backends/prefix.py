"""A slot's cache: the tokens it holds and their positions, what it shares with a new prompt,
and where that shared prefix may end.

A token's position is its index in the slot's tokens, except after an image whose projector
places its tokens in 2-D (M-RoPE, Qwen2-VL and later): such an image of n tokens advances the
position by fewer than n, so the positions after it run behind the indices. `shifts` records,
for each such image, where it ends in `tokens` and how far behind the positions are from there.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

from backends.checkpoints import Checkpoint
from backends.jobs import CacheKeys, placeholder_offset


class Slot:
    """One llama.cpp sequence id and what its cache holds."""

    __slots__ = ("affinity", "checkpoints", "id", "isolation", "last_used", "sequence", "shifts", "tokens")

    def __init__(self, slot_id: int):
        self.id = slot_id
        self.tokens: list[int] = []
        self.shifts: list[tuple[int, int]] = []  # (index after an M-RoPE image, positions behind from there)
        self.isolation: str | None = None
        self.affinity: str | None = None
        self.last_used = 0
        self.sequence: Any = None  # the engine's sequence running in this slot, if any
        # partial states at points of `tokens`, ascending (backends/checkpoints.py)
        self.checkpoints: list[Checkpoint] = []

    def shared_prefix(self, prompt: tuple[int, ...], keys: CacheKeys) -> int:
        if self.isolation != keys.isolation or not self.tokens:
            return 0
        return common_prefix_length(self.tokens, prompt)

    @property
    def shift(self) -> int:
        """How far the next token's position is behind its index."""
        return self.shifts[-1][1] if self.shifts else 0

    @property
    def next_position(self) -> int:
        return len(self.tokens) - self.shift

    def position(self, index: int) -> int:
        """The position of the token at `index` (or of the next one, at the end)."""
        if not self.shifts:
            return index
        at = bisect.bisect_right(self.shifts, (index, float("inf"))) - 1
        return index - (self.shifts[at][1] if at >= 0 else 0)

    def cut(self, keep: int) -> None:
        """Keep the first `keep` tokens (the caller removes their cache cells from `position(keep)`)."""
        del self.tokens[keep:]
        if self.shifts and self.shifts[-1][0] > keep:
            self.shifts = [entry for entry in self.shifts if entry[0] <= keep]
        if self.checkpoints and self.checkpoints[-1].tokens > keep:
            self.checkpoints = [c for c in self.checkpoints if c.tokens <= keep]

    def copy_from(self, other: Slot, length: int) -> None:
        """Hold the first `length` tokens of `other` (whose cache cells were copied here)."""
        self.tokens = other.tokens[:length]
        self.shifts = [entry for entry in other.shifts if entry[0] <= length]
        self.checkpoints = [c for c in other.checkpoints if c.tokens <= length]

    def clear(self) -> None:
        self.tokens, self.shifts, self.checkpoints = [], [], []

    def placed(self, tokens: Sequence[int], positions: int) -> None:
        """`tokens` (an image's placeholders) were decoded taking `positions` positions."""
        self.tokens.extend(tokens)
        if positions != len(tokens):
            self.shifts.append((len(self.tokens), self.shift + len(tokens) - positions))


def common_prefix_length(a: list[int], b: tuple[int, ...] | list[int]) -> int:
    """Length of the common prefix, by binary search over C-speed slice comparisons."""
    low, high = 0, min(len(a), len(b))
    if high and a[:high] == list(b[:high]):
        return high
    while low < high:
        mid = (low + high + 1) // 2
        if a[:mid] == list(b[:mid]):
            low = mid
        else:
            high = mid - 1
    return low


def image_boundary(prompt: Sequence[int], keep: int) -> int:
    """`keep` moved back to the start of the image it would cut through (unchanged otherwise)."""
    if 0 < keep < len(prompt) and prompt[keep] < 0:
        return keep - placeholder_offset(prompt[keep])
    return keep


def runs_of(ids: set[int]) -> int:
    """How many runs of consecutive numbers `ids` holds (busy slot ids: llama.cpp decodes each
    run of consecutive sequences in a pass of its own)."""
    return sum(1 for i in ids if i - 1 not in ids)
