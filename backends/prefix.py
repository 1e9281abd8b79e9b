"""What a slot's cached tokens share with a new prompt, and where that shared prefix may end."""

from __future__ import annotations

from collections.abc import Sequence

from backends.jobs import placeholder_offset


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
