"""How many prompt tokens one step may prefill while other sequences decode.

Every decoding sequence gets one token per step, so a step's length is the gap its stream sees.
A step that prefills k prompt tokens beside the decoding rows takes about `base + k * per_token`,
both measured from the steps as they run (the machine's speed, the model, the threads, how far
into its prompt the prefill is). The budget lets a step take `SLOWDOWN` times a plain decode step,
as Sarathi-Serve sets its token budget from a latency target rather than a fixed chunk; with
nothing decoding, a prompt takes the whole batch.
"""

from __future__ import annotations


class PrefillBudget:
    SLOWDOWN = 3.0  # a step with prefill may take this many times a decode-only step
    WEIGHT = 0.2  # of each new measurement in the running estimates
    FIRST_CHUNK = 32  # prompt tokens per step until a prefill step has been timed
    MIN_CHUNK = 2  # the least a step prefills, however slow prompt tokens are

    def __init__(self) -> None:
        self.base: float | None = None  # seconds of a step that only decodes
        self.per_token: float | None = None  # seconds each prefilled token adds to a step

    def tokens(self, decoding: int, room: int) -> int:
        """Prompt tokens the next step may take, beside `decoding` rows, in `room` free rows."""
        if decoding == 0:
            return room
        if self.base is None or self.per_token is None:
            return min(room, self.FIRST_CHUNK)
        allowed = int((self.SLOWDOWN - 1) * self.base / self.per_token)
        return max(self.MIN_CHUNK, min(room, allowed))

    def observe(self, seconds: float, *, decoding: int, prefilled: int) -> None:
        """A step's time, with how many rows decoded and how many prompt tokens it prefilled."""
        if not decoding:
            return  # a prefill alone says nothing of the gap decoding streams see
        if not prefilled:
            self.base = seconds if self.base is None else self.base + self.WEIGHT * (seconds - self.base)
            return
        if self.base is None:
            return
        cost = max(seconds - self.base, 0.0) / prefilled
        self.per_token = cost if self.per_token is None else self.per_token + self.WEIGHT * (cost - self.per_token)
