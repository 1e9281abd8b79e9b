"""What one request used: its tokens, counted over its choices, and its times (arrival, first
token, end). Filled in as the engine's events arrive, read once when the request ends (for the
answer's `usage`, its timing metrics and the request log), never per token."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from backends.jobs import ChoiceFinished, JobHandle


class RequestClock:
    """When the request arrived, produced its first token and finished (server side)."""

    __slots__ = ("finished", "first_token", "started")

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


@dataclass
class UsageCounter:
    """Token counts over all choices; each prompt counts once, however many choices it has."""

    n: int
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cache_sources: set[str] = field(default_factory=set)  # where cached tokens came from (slot, checkpoint, ram, disk)
    draft_tokens: int = 0
    draft_accepted: int = 0
    draft_kept: int = 0  # drafted tokens the output kept, over all choices
    finished: set[int] = field(default_factory=set)  # the choices counted from their ChoiceFinished
    stop_sequences: dict[int, str] = field(default_factory=dict)  # per choice: the stop string that ended it
    generated: dict[int, int] = field(default_factory=dict)  # per finished choice: its completion tokens

    def add(self, event: ChoiceFinished) -> None:
        self.finished.add(event.choice)
        if event.stop_sequence is not None:
            self.stop_sequences[event.choice] = event.stop_sequence
        if event.choice % self.n == 0:
            self.prompt_tokens += event.prompt_tokens
            self.cached_tokens += event.cached_tokens
            if event.cache_source:
                self.cache_sources.add(event.cache_source)
        self.completion_tokens += event.completion_tokens
        self.generated[event.choice] = event.completion_tokens
        self.draft_tokens += event.draft_tokens
        self.draft_accepted = max(self.draft_accepted, event.draft_accepted)  # choices share one prediction
        self.draft_kept += event.draft_kept

    def add_unfinished(self, handle: JobHandle) -> None:
        """The choices that never finished (their client left, or the job failed): the tokens
        generated for them until then, and the prompts of those that got as far as a token (a
        job dropped from the queue cost nothing)."""
        job = handle.job
        for choice, generated in enumerate(handle.generated):
            if choice not in self.finished:
                if choice % self.n == 0 and generated:
                    self.prompt_tokens += len(job.prompts[choice // job.n].tokens)
                self.completion_tokens += generated

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens
