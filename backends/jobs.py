"""What the engine is asked to do and what it answers, independent of HTTP and chat.

A `GenerationJob` holds token prompts and sampling settings, an `EmbeddingJob` token inputs to
embed; the engine answers with events per choice (per input) through a `JobHandle`, which the
asyncio side awaits. Choice `i * n + j` is sample `j`
of prompt `i`, as OpenAI numbers them.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

if TYPE_CHECKING:
    from backends.adapters import AdapterSet
    from backends.grammar import CompiledGrammar
    from backends.reasoning_budget import ReasoningBudget
    from grammars.unique_items import UniqueItemsGuard

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True, slots=True)
class SamplingParams:
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    typical_p: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    mirostat_target: float | None = None
    mirostat_lr: float = 0.1
    seed: int | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()
    ignore_eos: bool = False

    @property
    def uses_penalties(self) -> bool:
        return (
            self.frequency_penalty != 0.0
            or self.presence_penalty != 0.0
            or self.repetition_penalty != 1.0
        )


IMAGE_OFFSET_BITS = 16  # the low bits of an image placeholder id: the token's offset in its image


def image_placeholders(key: int, count: int) -> tuple[int, ...]:
    """The ids a prompt holds in place of an image's `count` tokens: negative (never a vocabulary
    id) and derived from the image's `key`, so equal images make equal prompts and the prefix
    cache can reuse them."""
    base = key << IMAGE_OFFSET_BITS
    return tuple(-(1 + base + offset) for offset in range(count))


def placeholder_offset(token: int) -> int:
    """An image placeholder's position within its image (0: the image's first token)."""
    return (-token - 1) & ((1 << IMAGE_OFFSET_BITS) - 1)


@dataclass(frozen=True, slots=True, eq=False)
class ImageTile:
    """One image chunk as the text model reads it: `embeddings` (tokens x n_embd_inp, float32)."""

    embeddings: np.ndarray
    non_causal: bool  # read with attention both ways within the chunk (Gemma 3's projector)
    # M-RoPE (2-D) placement: each token's 4 position sections (t, y, x, z; 4 x tokens) are
    # base + slope * the chunk's first position; None: one position per token, in order
    sections: tuple[np.ndarray, np.ndarray] | None = None
    n_pos: int = 0  # positions it takes (M-RoPE: fewer than its tokens); 0: one per token


@dataclass(frozen=True, slots=True, eq=False)
class PromptImage:
    """An image chunk in a prompt: its placeholders start at `start`; `tile` takes their place."""

    start: int
    tile: ImageTile


@dataclass(frozen=True, slots=True)
class PromptSpec:
    tokens: tuple[int, ...]
    max_tokens: int
    images: tuple[PromptImage, ...] = ()
    # where a later prompt is likely to diverge from this one (a chat's generation prompt: the next
    # turn renders the answer there): a model whose cache cannot be cut saves a checkpoint there
    checkpoint_hints: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class CacheKeys:
    """Prompt-cache routing: `isolation` partitions reuse; `affinity` steers to an earlier slot."""

    isolation: str | None = None
    affinity: str | None = None


# Above this many tokens left after the sampling filters, a position's active ids are not listed
# (the spec's limit for `sampling_mask` payloads); the count is always given.
MASK_LIST_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class LogprobOptions:
    """What a job wants to know about each token besides its id; computed only when asked for."""

    top: int = 0  # most likely alternatives per position
    sampling: bool = False  # the token's log-probability after the sampling filters, and the active count
    active_ids: bool = False  # the ids of the tokens left after the sampling filters
    prompt_last: int = 0  # the last N prompt positions get their log-probabilities too (echo)


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One position: the chosen token under the model's distribution (`logprob`) and under the
    distribution the sampler drew from (`sampling_logprob`, after logit bias, penalties,
    top-k/p, min-p, temperature and the grammar)."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()  # (token, logprob), most likely first
    sampling_logprob: float | None = None
    active_count: int | None = None  # tokens the sampler could still draw
    active_ids: np.ndarray | None = None  # their ids (uint32, ascending); None above MASK_LIST_LIMIT


@dataclass(frozen=True, slots=True)
class GenerationJob:
    prompts: tuple[PromptSpec, ...]
    n: int
    sampling: SamplingParams
    stop: tuple[str, ...] = ()
    cache: CacheKeys = CacheKeys()
    # A streamed job is woken every step; a whole answer only when a choice ends, which spares
    # the event loop (and the cores decoding) a wake-up per token.
    stream: bool = True
    grammar: CompiledGrammar | None = None  # every choice's output must be a sentence of it
    guard: UniqueItemsGuard | None = None  # with a grammar: no token that repeats a unique array's item
    special_text: bool = False  # special tokens' text goes out too (chat formats whose markers are special tokens)
    reasoning_budget: ReasoningBudget | None = None
    logprobs: LogprobOptions | None = None
    # Tokens the output is expected to repeat (`speculation` / `prediction`): drafted and checked
    # several at a time, keeping what the model would have chosen anyway.
    draft: tuple[int, ...] = ()
    priority: bool = False  # `service_tier: priority`: waits for a slot ahead of the others
    adapters: AdapterSet | None = None  # LoRA adapters decoding applies (None: the bare base model)

    @property
    def choice_count(self) -> int:
        return len(self.prompts) * self.n

    @property
    def scores_prompt(self) -> bool:
        """Whether each choice scores its prompt (echo with logprobs), before its first token."""
        return self.logprobs is not None and self.logprobs.prompt_last > 0


@dataclass(frozen=True, slots=True)
class EmbeddingJob:
    """Token inputs to embed with the model's pooling: one `Embedded` event per input, in any order.
    With `logits` (token or class ids; empty: all), each input's logits of those ids instead."""

    inputs: tuple[tuple[int, ...], ...]
    logits: tuple[int, ...] | None = None
    stream: bool = False
    priority: bool = False

    @property
    def choice_count(self) -> int:
        return len(self.inputs)


@dataclass(frozen=True, slots=True)
class Embedded:
    """Input `choice`'s pooled vector (float32, not normalised), or the logits its job asked for."""

    choice: int
    vector: np.ndarray
    prompt_tokens: int


@dataclass(frozen=True, slots=True)
class OutputPart:
    """Output its producer already split (an upstream server's chat deltas), which no chat format
    parses again: content or reasoning text, or a fragment of tool call `index`'s arguments (its
    name, and the producer's id if any, on the call's first fragment)."""

    kind: Literal["content", "reasoning", "call"]
    text: str
    index: int = -1
    name: str | None = None
    id: str | None = None


@dataclass(frozen=True, slots=True)
class TextDelta:
    choice: int
    text: str
    token: int  # -1: text with no token of its own (held back for a stop sequence, or an upstream's)
    logprob: TokenLogprob | None = None
    part: OutputPart | None = None  # set when the text comes already split (never by the local engine)


@dataclass(frozen=True, slots=True)
class PromptLogprobs:
    """The log-probabilities of prompt positions `start`.. (the first prompt token has none).
    Sent for the first choice of each prompt, before its first token."""

    choice: int
    start: int
    entries: tuple[TokenLogprob | None, ...]


@dataclass(frozen=True, slots=True)
class ChoiceFinished:
    choice: int
    finish_reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    draft_tokens: int = 0  # drafted tokens checked by the model
    draft_accepted: int = 0  # predicted tokens confirmed by the output (each position once)
    first_token_at: float | None = None  # time.perf_counter() when the choice's first token was sampled
    stop_sequence: str | None = None  # the job's stop string that ended the choice (None: EOS, grammar, length)
    draft_kept: int = 0  # drafted tokens the output kept (from any drafter)
    cache_source: str = ""  # where cached_tokens came from: "slot", "checkpoint", "ram" or "disk"


@dataclass(frozen=True, slots=True)
class JobFailed:
    error: Exception


Event = TextDelta | PromptLogprobs | ChoiceFinished | Embedded | JobFailed


@dataclass(eq=False)
class JobHandle:
    """The asyncio side of one job: events arrive in batches from the scheduler thread."""

    job: GenerationJob | EmbeddingJob
    loop: asyncio.AbstractEventLoop
    _events: deque[Event] = field(default_factory=deque)
    _ready: asyncio.Event = field(default_factory=asyncio.Event)
    _cancelled: threading.Event = field(default_factory=threading.Event)
    # Tokens generated so far per choice, kept current by the scheduler thread: what a choice the
    # client left unfinished cost (its ChoiceFinished never comes).
    generated: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.generated = [0] * self.job.choice_count

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        """Stop generating; the scheduler frees the job's slots at its next step.

        Called on the event loop (the consumer's side), so it may wake `events()` directly.
        """
        self._cancelled.set()
        self._ready.set()

    def deliver(self, events: list[Event]) -> None:
        """Runs on the event loop (scheduled by the engine's notifier thread)."""
        self._events.extend(events)
        self._ready.set()

    async def next_events(self, timeout: float | None = None) -> list[Event] | None:
        """The events that arrived since the last call, waiting for some (at most `timeout`
        seconds: then maybe none); None once the job was cancelled."""
        if not self._events and not self.cancelled:
            if timeout is None:
                await self._ready.wait()
            else:
                try:
                    await asyncio.wait_for(self._ready.wait(), timeout)
                except TimeoutError:
                    pass
        self._ready.clear()
        if self.cancelled:
            return None
        events = list(self._events)
        self._events.clear()
        return events

    async def events(self) -> AsyncIterator[Event]:
        """Yield events until every choice finished, the job failed or it was cancelled."""
        remaining = self.job.choice_count
        while remaining:
            await self._ready.wait()
            self._ready.clear()
            if self.cancelled:
                return
            while self._events:
                event = self._events.popleft()
                yield event
                if isinstance(event, ChoiceFinished | Embedded):
                    remaining -= 1
                elif isinstance(event, JobFailed):
                    return
