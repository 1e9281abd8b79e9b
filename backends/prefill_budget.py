"""How many prompt tokens one step may prefill while other sequences decode.

Every decoding sequence gets one token per step, so a step's length is the gap its stream sees.
The budget aims each step with prefill at `SLOWDOWN` times a decode-only step, both measured as
the steps run, as Sarathi-Serve sets its token budget from a latency target rather than a fixed
chunk. A step's cost is not proportional to its prompt tokens (a prefill deep into a long prompt
costs much of its time whatever its size), so the chunk is steered by the measured step times:
scaled by target / measured after each step with prefill. With nothing decoding, a prompt takes
the whole batch.
"""

from __future__ import annotations


class PrefillBudget:
    SLOWDOWN = 8.0  # a stream's gap beside a prefill may be this many times a decode-only step
    WEIGHT = 0.2  # of each new decode-only measurement in the running estimate
    FIRST_CHUNK = 8  # prompt tokens per step before anything is measured
    MIN_CHUNK = 4  # the least a step prefills, however slow prompt tokens are
    MAX_STEP_CHANGE = 2.0  # the chunk changes at most this factor per step (timings are noisy)

    def __init__(self) -> None:
        self.base: float | None = None  # seconds of a step that only decodes
        self.chunk = float(self.FIRST_CHUNK)  # prompt tokens for the next step with decoding beside it

    def tokens(self, decoding: int, room: int) -> int:
        """Prompt tokens the next step may take, beside `decoding` rows, in `room` free rows."""
        if decoding == 0:
            return room
        return max(self.MIN_CHUNK, min(room, int(self.chunk)))

    def observe(self, seconds: float, *, decoding: int, prefilled: int, rows: int) -> None:
        """A step's time, with how many sequences decoded, how many prompt tokens it prefilled and
        how many rows it had in all (drafts are the rest)."""
        if not decoding:
            return  # a prefill alone says nothing of the gap decoding streams see
        if not prefilled:
            if rows == decoding:  # a plain decode step: drafted rows would make it look slower
                self.base = seconds if self.base is None else self.base + self.WEIGHT * (seconds - self.base)
            return
        if self.base is None or seconds <= 0:
            return
        # a step of prompt tokens alone comes between two decode steps: the gap is both
        target = (self.SLOWDOWN - 1 if rows == prefilled else self.SLOWDOWN) * self.base
        ratio = target / seconds
        ratio = min(self.MAX_STEP_CHANGE, max(1 / self.MAX_STEP_CHANGE, ratio))
        self.chunk = max(float(self.MIN_CHUNK), prefilled * ratio)
