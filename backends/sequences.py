"""What the engine's scheduler holds of each request: a choice waiting for a slot, and a choice
being generated in one (its prompt, sampler, drafts, stops and output decoding state)."""

from __future__ import annotations

import codecs
from dataclasses import dataclass

from backends.draft_model import DraftTrust, ModelDrafter
from backends.drafting import Drafter, LookupDrafter
from backends.jobs import JobHandle, LogprobOptions, PromptSpec, TokenLogprob
from backends.prefix import Slot
from backends.reasoning_budget import BudgetTracker
from backends.sampling import SamplerChain
from backends.stops import StopMatcher


@dataclass(eq=False)
class Waiting:
    handle: JobHandle
    choice: int
    prompt_index: int
    prompt: PromptSpec

    @property
    def group(self) -> tuple[JobHandle, int]:
        """The choices of one prompt: they share its prefill."""
        return self.handle, self.prompt_index


class Sequence:
    """One choice being generated in one slot."""

    __slots__ = (
        "budget",
        "cache_source",
        "cached",
        "checkpoint_at",
        "choice",
        "decoder",
        "draft",
        "drafted",
        "drafter",
        "echo_from",
        "fed",
        "first_token_at",
        "generated",
        "group",
        "handle",
        "images",
        "kept",
        "last_token",
        "logprobs",
        "mark",
        "max_tokens",
        "output_row",
        "prompt",
        "prompt_entries",
        "sampler",
        "slot",
        "special_text",
        "stops",
    )

    def __init__(self, slot: Slot, waiting: Waiting, sampler: SamplerChain, cached: int, auto_draft: bool,
                 draft_model: DraftTrust | None = None, *, may_draft: bool = True, cache_source: str = "",
                 checkpoint_at: list[int] | None = None):
        """`may_draft`: False where drafted tokens the model rejects could not be taken out of the
        slot again (a recurrent state): no drafter at all, not even for a request's prediction."""
        self.slot = slot
        self.handle = waiting.handle
        self.choice = waiting.choice
        self.group = waiting.group
        self.prompt = waiting.prompt.tokens
        self.images = {image.start: image for image in waiting.prompt.images}
        self.max_tokens = waiting.prompt.max_tokens
        self.fed = cached  # prompt tokens in the slot's cache so far
        self.cached = cached  # of which reused from an earlier request
        self.cache_source = cache_source  # where those came from: "slot", "checkpoint", "ram", "disk"
        self.checkpoint_at = checkpoint_at or []  # prompt points still to save a checkpoint at, ascending
        self.sampler = sampler
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.stops = StopMatcher(waiting.handle.job.stop)
        budget = waiting.handle.job.reasoning_budget
        self.budget = BudgetTracker(budget) if budget is not None else None
        self.special_text = waiting.handle.job.special_text
        self.generated = 0
        self.last_token = -1
        self.output_row = -1  # batch row whose logits this sequence samples from, this step
        self.mark = (len(slot.tokens), cached)  # (cache length, fed) before this step
        self.logprobs: LogprobOptions | None = waiting.handle.job.logprobs
        # Echo with logprobs: prompt positions from `echo_from` on get theirs (decoded, not reused).
        self.echo_from = -1
        self.prompt_entries: list[TokenLogprob | None] | None = None
        draft = waiting.handle.job.draft
        # A request's prediction wins; a draft model drafts where the prompt lookup has nothing
        lookup = LookupDrafter(self.prompt) if auto_draft else None
        self.drafter: Drafter | LookupDrafter | ModelDrafter | None = None if not may_draft else (
            Drafter(draft) if draft else ModelDrafter(slot, lookup, draft_model) if draft_model else lookup)
        self.draft: tuple[int, ...] = ()  # drafted tokens in this step's batch, after `output_row`
        self.drafted = 0
        self.kept = 0  # drafted tokens the output kept
        self.first_token_at: float | None = None

    @property
    def prefilling(self) -> bool:
        return self.fed < len(self.prompt)
