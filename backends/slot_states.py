"""How a slot's cache is cut back, brought back and kept: the engine's side of context checkpoints
(backends/checkpoints.py) and of the RAM prompt cache (backends/prompt_cache.py).

- `trim` cuts a slot to a prefix of its tokens. Full-attention layers cut anywhere; where the
  model's other layers cannot (recurrent states, a cache sized to the sliding window), the latest
  checkpoint at or before the cut is put back first; with none, the slot starts empty.
- Prefilling sequences stop their chunks at their checkpoint points (`room`), and `after_decode`
  saves a checkpoint when a sequence reaches one.
- `keep_before_reuse` moves a slot's state to the RAM cache when a new prompt is about to overwrite
  most of it; `from_ram` finds an entry worth more than every slot and `restore` puts it back.

Each use of cached tokens says where they came from (`slot`, `checkpoint`, `ram`, `disk`): the
request log and `/metrics` count them.
"""

from __future__ import annotations

import ctypes
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import llama_cpp

from backends.checkpoints import (
    Checkpoint,
    CheckpointOptions,
    keep,
    latest_within,
    load_partial,
    save_partial,
    targets,
)
from backends.llama_model import LlamaModel
from backends.prefix import Slot, image_boundary
from backends.prompt_cache import MIN_ENTRY_TOKENS, CachedPrompt, PromptCache

log = logging.getLogger("fireside.engine")

# Copying a slot's cache (or a RAM entry into one) costs about one stream of memory traffic; below
# this many extra reusable tokens, prefilling them is as cheap.
MIN_COPY_GAIN = 16


@dataclass(frozen=True)
class StateStats:
    checkpoints: int  # held by the slots
    checkpoint_bytes: int
    ram_entries: int
    ram_bytes: int
    ram_hits: int  # prompts restored from the RAM cache (or from disk through it)
    ram_lookups: int  # prompts for which no slot held as much as an entry might
    reused: dict[str, int]  # cached prompt tokens by where they came from


class SlotStates:
    def __init__(self, model: LlamaModel, options: CheckpointOptions, cache: PromptCache | None, *, swa_full: bool):
        handle = model.handle
        self.recurrent = bool(llama_cpp.llama_model_is_recurrent(handle) or llama_cpp.llama_model_is_hybrid(handle))
        self.n_swa = llama_cpp.llama_model_n_swa(handle)
        self.windowed = self.n_swa > 0 and not swa_full  # the sliding-window layers keep their window only
        self.options = options
        self.checkpointing = options.limit > 0 and (self.recurrent or self.windowed)
        self.cache = cache
        self.reused: Counter[str] = Counter()
        self.slots: list[Slot] = []  # the engine's (`attach`)
        self.unified: Callable[[], bool] = lambda: False  # whether the context's cache is one stream now

    def attach(self, slots: list[Slot], unified: Callable[[], bool]) -> None:
        self.slots, self.unified = slots, unified

    def checkpoint_bytes(self) -> int:
        """What the slots' checkpoints hold (counted against the RAM budget with the prompt cache)."""
        return sum(len(c.data) for slot in list(self.slots) for c in list(slot.checkpoints))

    @property
    def can_roll_back(self) -> bool:
        """Whether the last few tokens can be taken out of a slot (drafts that were not kept);
        a recurrent state cannot give them back."""
        return not self.recurrent

    # ---- checkpoints -------------------------------------------------------------------------

    def plan(self, prompt_length: int, cached: int, hints: tuple[int, ...]) -> list[int]:
        """Where a prompt prefilled from `cached` saves checkpoints (none where it needs none)."""
        if not self.checkpointing:
            return []
        return targets(prompt_length, cached, hints, self.options.min_step)

    def save_checkpoint(self, ctx: llama_cpp.llama_context_p, slot: Slot) -> None:
        """A checkpoint of the slot as it is now."""
        data = save_partial(ctx, slot.id)
        if data and self.cache is not None:  # room in the RAM budget: prompt cache entries go first
            while not self.cache.budget.make_room(len(data)) and slot.checkpoints:
                slot.checkpoints = slot.checkpoints[1:]
        if data:
            slot.checkpoints = keep(slot.checkpoints, Checkpoint(len(slot.tokens), data), self.options.limit,
                                    self.options.min_step)

    def trim(self, ctx: llama_cpp.llama_context_p, slot: Slot, tokens: int) -> tuple[int, str]:
        """Cut the slot's cache to at most its first `tokens` tokens; how many it keeps and from
        where ("slot", or "checkpoint" where one had to be put back; 0 and "": emptied)."""
        memory = llama_cpp.llama_get_memory(ctx)
        if tokens > 0 and llama_cpp.llama_memory_seq_rm(memory, slot.id, slot.position(tokens), -1) and (
                self._window_holds(memory, slot, tokens)):
            slot.cut(tokens)
            return tokens, "slot"
        point = latest_within(slot.checkpoints, tokens)
        if point is not None and load_partial(ctx, slot.id, point.data) and (
                llama_cpp.llama_memory_seq_rm(memory, slot.id, slot.position(point.tokens), -1)):
            slot.cut(point.tokens)
            return point.tokens, "checkpoint"
        self.clear(ctx, slot)
        return 0, ""

    def _window_holds(self, memory: llama_cpp.llama_memory_t, slot: Slot, tokens: int) -> bool:
        """Whether a sliding-window cache cut at `tokens` still holds the window its last token
        attends to (a cache sized to the window drops older cells as it goes)."""
        if self.n_swa <= 0:
            return True
        position = slot.position(tokens)
        return llama_cpp.llama_memory_seq_pos_min(memory, slot.id) <= max(0, position - self.n_swa)

    @staticmethod
    def clear(ctx: llama_cpp.llama_context_p, slot: Slot) -> None:
        llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(ctx), slot.id, -1, -1)
        slot.clear()

    # ---- choosing what a new prompt starts from -----------------------------------------------

    def bring_back(self, ctx: llama_cpp.llama_context_p, slots: list[Slot], slot: Slot, free: list[Slot],
                   prompt: tuple[int, ...], isolation: str | None, shared: dict[int, int], limit: int,
                   capacity: int) -> tuple[Slot, int, str]:
        """The prompt's longest cached prefix in `slot` (at most `limit` tokens; `shared`: each
        slot's prefix in common with the prompt): its own, another slot's copied in, or a RAM
        prompt cache entry put back (into the free slot with least to lose instead, one that holds
        at most `capacity` tokens); the slot's state goes to the RAM cache first when the prompt
        overwrites what is worth keeping. The slot, how many tokens need no prefill and where they
        came from."""
        entry, from_ram = self.from_ram(prompt, isolation, max(shared.values(), default=0), capacity, MIN_COPY_GAIN)
        if entry is not None:
            slot = min(free, key=lambda s: (bool(s.tokens), s.last_used))
        self.keep_before_reuse(ctx, slot, min(shared[slot.id], limit))
        source = ""
        if entry is not None:
            origin = entry.origin
            if self.restore(ctx, slot, entry):
                shared[slot.id], source = from_ram, origin
        cached, how = self._reuse_prefix(ctx, slots, slot, prompt, shared, limit)
        source = (source or how) if cached else ""
        if cached:
            self.reused[source] += cached
        return slot, cached, source

    def _reuse_prefix(self, ctx: llama_cpp.llama_context_p, slots: list[Slot], slot: Slot, prompt: tuple[int, ...],
                      shared: dict[int, int], limit: int) -> tuple[int, str]:
        """Keep the slot's longest usable prefix of `prompt`, at most `limit` tokens (copied from
        another slot when that one holds more); how many prompt tokens need no prefill and how
        they were kept ("slot" or "checkpoint")."""
        reusable = shared[slot.id]
        donor = max((s for s in slots if s is not slot), key=lambda s: shared[s.id], default=None)
        if donor is not None and shared[donor.id] > reusable + MIN_COPY_GAIN:
            llama_cpp.llama_memory_seq_cp(llama_cpp.llama_get_memory(ctx), donor.id, slot.id, -1, -1)
            slot.copy_from(donor, shared[donor.id])
            reusable = shared[donor.id]
        return self.trim(ctx, slot, image_boundary(prompt, min(reusable, limit)))

    # ---- the RAM prompt cache ----------------------------------------------------------------

    def keep_before_reuse(self, ctx: llama_cpp.llama_context_p, slot: Slot, kept: int) -> None:
        """Before a new prompt overwrites all but `kept` of the slot's tokens: keep its state in
        the RAM cache when that loses a prompt worth keeping."""
        if self.cache is None or len(slot.tokens) - kept < MIN_ENTRY_TOKENS:
            return
        size = llama_cpp.llama_state_seq_get_size(ctx, slot.id)
        if not size or not self.cache.budget.make_room(size):
            return
        buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(ctx, buffer, size, slot.id)
        if written:
            self.cache.put(CachedPrompt(list(slot.tokens), list(slot.shifts), slot.isolation, slot.affinity,
                                        bytes(buffer)[:written], list(slot.checkpoints), unified=self.unified()))

    def keep_all(self, ctx: llama_cpp.llama_context_p, slots: list[Slot]) -> bool:
        """Every idle slot's state into the RAM cache (the context is about to be made again in
        the other mode); False without a RAM cache."""
        if self.cache is None:
            return False
        for slot in slots:
            self.keep_before_reuse(ctx, slot, 0)
            slot.clear()
        return True

    def from_ram(self, prompt: tuple[int, ...], isolation: str | None, slot_best: int,
                 most_tokens: int, gain: int) -> tuple[CachedPrompt | None, int]:
        """The RAM entry to put back for `prompt` (and the prefix it shares) when it shares at
        least `gain` tokens more than the best slot's `slot_best`; (None, 0) otherwise."""
        if self.cache is None or not self.cache.size or len(prompt) - slot_best < gain:
            return None, 0
        self.cache.lookups += 1
        entry, shared = self.cache.best(prompt, isolation, most_tokens, self.unified())
        if entry is None or shared < slot_best + gain:
            return None, 0
        return entry, shared

    def restore(self, ctx: llama_cpp.llama_context_p, slot: Slot, entry: CachedPrompt) -> bool:
        """Put a RAM entry into the (idle) slot; False, the slot empty, when llama.cpp refuses it."""
        self.clear(ctx, slot)
        buffer = (ctypes.c_uint8 * len(entry.state)).from_buffer_copy(entry.state)
        if not llama_cpp.llama_state_seq_set_data(ctx, buffer, len(entry.state), slot.id):
            self.clear(ctx, slot)
            return False
        slot.tokens, slot.shifts = list(entry.tokens), list(entry.shifts)
        slot.isolation, slot.affinity, slot.checkpoints = entry.isolation, entry.affinity, list(entry.checkpoints)
        assert self.cache is not None
        self.cache.used(entry)
        return True

    def stats(self, slots: list[Slot]) -> StateStats:
        """A snapshot for /health and /metrics (read from another thread: sizes only)."""
        points = [c for slot in list(slots) for c in list(slot.checkpoints)]
        cache = self.cache
        return StateStats(len(points), sum(len(c.data) for c in points), cache.size if cache else 0,
                          cache.bytes if cache else 0, cache.hits if cache else 0, cache.lookups if cache else 0,
                          dict(self.reused))
