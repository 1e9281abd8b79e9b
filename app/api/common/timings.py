"""llama.cpp's `timings` object (llama-server's `server_slot_stats::to_json`): how long the prompt
and the generation took and how fast each went, on llama.cpp's native answers and, when asked, on
OpenAI-shaped ones. Times are the server's, from the request's arrival: `prompt_ms` runs to the
first token (so it includes any wait for a slot), `predicted_ms` from there to the end."""

from __future__ import annotations

import time

import msgspec
from msgspec import UNSET, UnsetType

from app.pipeline.usage import RequestClock, UsageCounter


class Timings(msgspec.Struct):
    cache_n: int
    prompt_n: int
    prompt_ms: float
    prompt_per_token_ms: float
    prompt_per_second: float
    predicted_n: int
    predicted_ms: float
    predicted_per_token_ms: float
    predicted_per_second: float
    draft_n: int | UnsetType = UNSET
    draft_n_accepted: int | UnsetType = UNSET


def _rates(n: int, ms: float) -> tuple[float, float]:
    """(ms per token, tokens per second), as llama-server writes them (0 when nothing was timed)."""
    return (ms / n if n else 0.0), (n * 1000.0 / ms if ms > 0 else 0.0)


def timings(clock: RequestClock, counter: UsageCounter, prompt_tokens: int | None = None,
            predicted: int | None = None, first_token: float | None = None) -> Timings:
    """The request's timings so far (`prompt_tokens`, `predicted`, `first_token`: what the counter
    and the clock have not got yet, as in a stream's chunks before the choice finished)."""
    now = clock.finished if clock.finished is not None else time.perf_counter()
    first = clock.first_token if clock.first_token is not None else first_token if first_token is not None else now
    prompt_total = counter.prompt_tokens if prompt_tokens is None else prompt_tokens
    prompt_n = max(prompt_total - counter.cached_tokens, 0)
    predicted_n = counter.completion_tokens if predicted is None else predicted
    prompt_ms, predicted_ms = (first - clock.started) * 1000.0, (now - first) * 1000.0
    body = Timings(counter.cached_tokens, prompt_n, prompt_ms, *_rates(prompt_n, prompt_ms),
                   predicted_n, predicted_ms, *_rates(predicted_n, predicted_ms))
    if counter.draft_tokens:
        body.draft_n, body.draft_n_accepted = counter.draft_tokens, counter.draft_kept
    return body
