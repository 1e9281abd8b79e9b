"""`perf_metrics`: the spec's basic metrics (and the predicted-output ones when speculation ran),
as `fireworks-*` headers on whole answers and in the body when `perf_metrics_in_response`."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.generation import UsageCounter


class RequestClock:
    """When the request arrived, produced its first token and finished (server side)."""

    __slots__ = ("started", "first_token", "finished")

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.first_token: float | None = None
        self.finished: float | None = None

    def token(self, at: float | None = None) -> None:
        """A token was produced (now, or `at` as the engine timed it); the first one counts."""
        if at is None:
            at = time.perf_counter()
        if self.first_token is None or at < self.first_token:
            self.first_token = at

    def finish(self) -> None:
        self.finished = time.perf_counter()


def perf_metrics(clock: RequestClock, counter: UsageCounter, speculation_tokens: int) -> dict[str, object]:
    """The metrics by the spec's names; times in seconds. `speculation_tokens`: the predicted
    tokens each choice was given (0: no speculation)."""
    metrics: dict[str, object] = {
        "prompt-tokens": counter.prompt_tokens,
        "cached-prompt-tokens": counter.cached_tokens,
    }
    if clock.first_token is not None:
        metrics["server-time-to-first-token"] = round(clock.first_token - clock.started, 6)
    if clock.finished is not None:
        metrics["server-processing-time"] = round(clock.finished - clock.started, 6)
    if speculation_tokens:
        metrics["speculation-prompt-tokens"] = speculation_tokens
        metrics["speculation-prompt-matched-tokens"] = counter.draft_accepted
        metrics["speculation-generated-tokens"] = counter.draft_tokens
    return metrics


def perf_headers(metrics: dict[str, object]) -> dict[str, str]:
    return {f"fireworks-{name}": str(value) for name, value in metrics.items()}
