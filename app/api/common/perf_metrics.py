"""`perf_metrics`: the spec's basic metrics (and the predicted-output ones when speculation ran),
as `fireworks-*` headers on whole answers and in the body when `perf_metrics_in_response`."""

from __future__ import annotations

from app.pipeline.usage import RequestClock, UsageCounter


def perf_metrics(clock: RequestClock, counter: UsageCounter, speculation_tokens: int, *,
                 drafting_model: bool = False) -> dict[str, object]:
    """The metrics by the spec's names; times in seconds. `speculation_tokens`: the predicted
    tokens each choice was given (0: no speculation); `drafting_model`: the model has a draft
    model (`speculation-generated-tokens` and `speculation-acceptance`, the spec's dedicated-
    deployment metrics, then count its drafts; prompt-lookup drafts alone are not reported)."""
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
    elif drafting_model:
        metrics["speculation-generated-tokens"] = counter.draft_tokens
    if (speculation_tokens or drafting_model) and counter.draft_tokens:
        metrics["speculation-acceptance"] = round(counter.draft_kept / counter.draft_tokens, 4)
    return metrics


def perf_headers(metrics: dict[str, object]) -> dict[str, str]:
    return {f"fireworks-{name}": str(value) for name, value in metrics.items()}
