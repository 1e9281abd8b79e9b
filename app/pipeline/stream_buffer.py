"""Coalescing stream chunks (`stream_options.buffer_tokens`, `buffer_ms`, `buffer_mode`).

Each choice's text deltas are held until enough of them accumulated or the oldest waited long
enough ('any': either threshold flushes; 'all': both must be reached), then go out as one
chunk. A choice's held deltas always go out before its finish chunk.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from backends.jobs import OutputPart, TextDelta, TokenLogprob

# One position: the token and its log-probability record; None where the token has none (the
# first prompt token, when the prompt is echoed).
Entry = tuple[int, TokenLogprob | None]


@dataclass
class Piece:
    """What one chunk carries for a choice: text, and the generated tokens behind it; or, for
    output that came already split (an upstream's), its parts."""

    text: str = ""
    tokens: list[int] = field(default_factory=list)
    logprobs: list[Entry] = field(default_factory=list)  # when the job computes them
    parts: list[OutputPart] | None = None

    @classmethod
    def of(cls, delta: TextDelta) -> Piece:
        if delta.part is not None:
            return cls(delta.text, parts=[delta.part])
        if delta.token < 0:  # held text released at the end
            return cls(delta.text)
        logprobs = [(delta.token, delta.logprob)] if delta.logprob is not None else []
        return cls(delta.text, [delta.token], logprobs)

    def extend(self, delta: TextDelta) -> None:
        self.text += delta.text
        if delta.part is not None:
            if self.parts is None:
                self.parts = []
            self.parts.append(delta.part)
        if delta.token >= 0:
            self.tokens.append(delta.token)
            if delta.logprob is not None:
                self.logprobs.append((delta.token, delta.logprob))


@dataclass(frozen=True)
class BufferPolicy:
    tokens: int = 0  # deltas per chunk; 0: no token threshold
    seconds: float = 0.0  # longest hold; 0: no time threshold
    all: bool = False  # both thresholds must be reached (else either)

    @classmethod
    def of(cls, tokens: int | None, ms: float | None, mode: str | None) -> BufferPolicy | None:
        """None when nothing is to be buffered."""
        policy = cls(tokens or 0, (ms or 0.0) / 1000.0, mode == "all")
        return policy if policy.tokens or policy.seconds else None

    def reached(self, count: int, held_for: float) -> bool:
        by_count = self.tokens > 0 and count >= self.tokens
        by_time = self.seconds > 0 and held_for >= self.seconds
        if self.all and self.tokens and self.seconds:
            return by_count and by_time
        return by_count or by_time


@dataclass
class _Held:
    piece: Piece
    since: float
    count: int = 1


class ChunkBuffer:
    def __init__(self, policy: BufferPolicy):
        self.policy = policy
        self._held: dict[int, _Held] = {}

    def add(self, delta: TextDelta) -> None:
        held = self._held.get(delta.choice)
        if held is None:
            self._held[delta.choice] = _Held(Piece.of(delta), time.monotonic())
        else:
            held.piece.extend(delta)
            held.count += 1

    def due(self) -> list[tuple[int, Piece]]:
        """The choices whose held deltas reached the policy's thresholds, taken out."""
        now = time.monotonic()
        ready = [choice for choice, held in self._held.items() if self.policy.reached(held.count, now - held.since)]
        return [(choice, self._held.pop(choice).piece) for choice in ready]

    def take(self, choice: int) -> list[tuple[int, Piece]]:
        """A choice's held deltas, whatever the thresholds (the choice finished)."""
        held = self._held.pop(choice, None)
        return [(choice, held.piece)] if held is not None else []

    def wait(self) -> float | None:
        """How long the stream may wait for events before a held chunk is due by time."""
        if not self._held or not self.policy.seconds:
            return None
        oldest = min(held.since for held in self._held.values())
        return max(0.0, oldest + self.policy.seconds - time.monotonic())
