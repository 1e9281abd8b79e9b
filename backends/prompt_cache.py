"""The prompt cache in host memory (`--cache-ram`): slots' caches kept after their slot was taken
for another conversation.

With more conversations than slots (an agent and its sub-agents, two apps), a slot is reused for
another prompt and what it held is lost: the next turn of the conversation it served would prefill
everything again. Before that happens the slot's whole state (llama.cpp's sequence state), its
tokens and its context checkpoints move here; a later prompt that shares more with an entry than
with any slot gets that entry put back into a slot, and prefills only the rest. Least recently
used entries go first when the bytes exceed the budget; one budget is shared by every loaded
model's cache. The disk warm start (backends/prompt_store.py) saves and restores these entries.

Entries are per engine: one model file, one cache type; the adapter set is part of the isolation
key (as for slots), so an entry made under other adapters is never matched.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from backends.checkpoints import Checkpoint
from backends.prefix import common_prefix_length

MIN_ENTRY_TOKENS = 64  # shorter prompts prefill faster than they are saved and looked up


@dataclass(eq=False)
class CachedPrompt:
    tokens: list[int]
    shifts: list[tuple[int, int]]  # M-RoPE position shifts (see backends/prefix.py)
    isolation: str | None
    affinity: str | None
    state: bytes  # llama.cpp's whole sequence state
    checkpoints: list[Checkpoint] = field(default_factory=list)
    origin: str = "ram"  # "disk": read back at start-up and not used since
    unified: bool = False  # saved from a unified cache (llama.cpp reads it back only into one)
    last_used: int = 0

    @property
    def bytes(self) -> int:
        return len(self.state) + sum(len(c.data) for c in self.checkpoints) + 8 * len(self.tokens)


class RamBudget:
    """Bytes every model's prompt cache and context checkpoints may hold together; the least
    recently used entry of any of them goes first (a slot's checkpoints go only with its history,
    or when nothing else is left to evict)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._caches: list[PromptCache] = []
        self._clock = itertools.count(1)

    def tick(self) -> int:
        return next(self._clock)

    def attach(self, cache: PromptCache) -> None:
        with self._lock:
            self._caches.append(cache)

    def detach(self, cache: PromptCache) -> None:
        with self._lock:
            self._caches = [c for c in self._caches if c is not cache]

    def make_room(self, needed: int) -> bool:
        """Evict least recently used entries until `needed` more bytes fit; False when they
        cannot (larger than the whole budget)."""
        if needed > self.max_bytes:
            return False
        with self._lock:
            while sum(c.charged for c in self._caches) + needed > self.max_bytes:
                oldest = min((c for c in self._caches if c.size), key=lambda c: c.oldest_use(), default=None)
                if oldest is None:
                    return False
                oldest.evict_oldest()
        return True


class PromptCache:
    """One engine's entries (see the module's text)."""

    def __init__(self, budget: RamBudget, held_elsewhere: Callable[[], int] = lambda: 0):
        """`held_elsewhere`: bytes the same engine holds against the budget besides its entries
        (its slots' checkpoints)."""
        self.budget = budget
        self._held_elsewhere = held_elsewhere
        self._lock = threading.Lock()
        self._entries: list[CachedPrompt] = []
        self.hits = 0  # prompts restored from here
        self.lookups = 0  # prompts whose slots held less than an entry might
        self.evictions = 0
        budget.attach(self)

    @property
    def size(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        with self._lock:
            return sum(entry.bytes for entry in self._entries)

    @property
    def charged(self) -> int:
        """What this engine holds against the budget: its entries and its checkpoints."""
        return self.bytes + self._held_elsewhere()

    def oldest_use(self) -> int:
        with self._lock:
            return min((entry.last_used for entry in self._entries), default=0)

    def evict_oldest(self) -> None:
        with self._lock:
            if self._entries:
                self._entries.remove(min(self._entries, key=lambda entry: entry.last_used))
                self.evictions += 1

    def put(self, entry: CachedPrompt) -> bool:
        """Keep `entry` (one whose tokens it extends goes; one that extends it makes it needless);
        False when it is not kept."""
        if len(entry.tokens) < MIN_ENTRY_TOKENS:
            return False
        with self._lock:
            for other in self._entries:
                if other.isolation == entry.isolation and other.unified == entry.unified and len(
                        other.tokens) >= len(entry.tokens) and (
                        other.tokens[:len(entry.tokens)] == entry.tokens):
                    other.last_used = self.budget.tick()
                    return False
        if not self.budget.make_room(entry.bytes):
            return False
        entry.last_used = self.budget.tick()
        with self._lock:
            self._entries = [other for other in self._entries if not (
                other.isolation == entry.isolation and other.unified == entry.unified
                and len(other.tokens) < len(entry.tokens)
                and entry.tokens[:len(other.tokens)] == other.tokens)]
            self._entries.append(entry)
        return True

    def best(self, prompt: tuple[int, ...], isolation: str | None, most_tokens: int,
             unified: bool) -> tuple[CachedPrompt | None, int]:
        """The entry sharing the longest prefix with `prompt` under `isolation` (that fits a slot of
        `most_tokens`, saved from a cache of the same mode), and how long that prefix is."""
        with self._lock:
            found, longest = None, 0
            for entry in self._entries:
                if entry.isolation != isolation or len(entry.tokens) > most_tokens or entry.unified != unified:
                    continue
                shared = common_prefix_length(entry.tokens, prompt)
                if shared > longest:
                    found, longest = entry, shared
            return found, longest

    def used(self, entry: CachedPrompt) -> None:
        entry.last_used = self.budget.tick()
        entry.origin = "ram"
        self.hits += 1

    def entries(self) -> list[CachedPrompt]:
        """Most recently used first (what the disk store keeps first)."""
        with self._lock:
            return sorted(self._entries, key=lambda entry: entry.last_used, reverse=True)

    def close(self) -> None:
        self.budget.detach(self)
        with self._lock:
            self._entries.clear()
