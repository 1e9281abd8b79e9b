"""Prompt caches kept on disk across restarts: what a model's slots and its RAM prompt cache held
when it stopped (system prompts, tool lists, conversations), saved with their llama.cpp cache
state and context checkpoints at shutdown and on unload, and read back into the RAM prompt cache
(into the slots where there is none) when the model loads again, so the first request after a
restart prefills only what is new.

One file per model and settings (`store_key`: the model file's path, size and modification time,
the context size and llama.cpp's version), so a changed model file or other settings never reuse
a cache. The folder is bounded: the least recently used files go first.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import msgspec

from backends.checkpoints import Checkpoint
from backends.prefix import Slot
from backends.prompt_cache import CachedPrompt, PromptCache

log = logging.getLogger("fireside.engine")
SUFFIX = ".prompts"


class SavedCheckpoint(msgspec.Struct, array_like=True):
    tokens: int
    data: bytes  # llama.cpp's partial sequence state (backends/checkpoints.py)


class SavedPrompt(msgspec.Struct, array_like=True):
    tokens: list[int]
    shifts: list[tuple[int, int]]  # M-RoPE position shifts (see `backends.prefix.Slot`)
    isolation: str | None  # the prompt cache isolation key it was made under
    affinity: str | None
    state: bytes  # llama.cpp's sequence state (`llama_state_seq_get_data`)
    checkpoints: list[SavedCheckpoint] = []
    unified: bool = False  # saved from a unified cache (llama.cpp reads it back only into one)


@dataclass(frozen=True)
class StoreOptions:
    folder: Path
    max_bytes: int  # all models' saved prompts together


def store_key(model_path: Path, *settings: object) -> str:
    """Names the cache of one model file (as it is now) under these settings."""
    stat = model_path.stat()
    text = "|".join(str(part) for part in (model_path.resolve(), stat.st_size, stat.st_mtime_ns, *settings))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class PromptStore:
    def __init__(self, options: StoreOptions, key: str):
        self.options = options
        self.path = options.folder / f"{key}{SUFFIX}"

    def load(self) -> list[SavedPrompt]:
        """What was saved for this model and settings (nothing when absent or unreadable)."""
        try:
            data = self.path.read_bytes()
            os.utime(self.path)  # recently used: evicted last
            return msgspec.msgpack.decode(data, type=list[SavedPrompt])
        except FileNotFoundError:
            return []
        except (OSError, msgspec.DecodeError) as error:
            log.warning("saved prompt cache %s is unreadable (%s); starting cold", self.path, error)
            self.path.unlink(missing_ok=True)
            return []

    def save(self, prompts: list[SavedPrompt]) -> None:
        """Replace this model's saved prompts (the first ones, as many as the bound allows), then
        drop other models' least recently used files until the folder fits its bound."""
        kept, size = [], 0
        for prompt in prompts:
            size += len(prompt.state) + 8 * len(prompt.tokens) + sum(len(c.data) for c in prompt.checkpoints)
            if size > self.options.max_bytes:
                break
            kept.append(prompt)
        try:
            self.options.folder.mkdir(parents=True, exist_ok=True)
            if not kept:
                self.path.unlink(missing_ok=True)
                return
            temporary = self.path.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_bytes(msgspec.msgpack.encode(kept))
            os.replace(temporary, self.path)  # a reader never sees half a file
            self._evict()
        except OSError as error:
            log.warning("cannot save the prompt cache to %s: %s", self.path, error)

    def _evict(self) -> None:
        files = sorted(self.options.folder.glob(f"*{SUFFIX}"), key=lambda f: f.stat().st_mtime, reverse=True)
        total = 0
        for file in files:
            total += file.stat().st_size
            if total > self.options.max_bytes and file != self.path:
                file.unlink(missing_ok=True)


MIN_SAVED_TOKENS = 32  # shorter caches cost less to prefill than to keep


def saved_prompts(ctx: llama_cpp.llama_context_p, slots: list[Slot], cache: PromptCache | None,
                  unified: bool = False) -> list[SavedPrompt]:
    """What the disk store keeps: the slots' caches (`unified`: the context's mode), then the RAM
    prompt cache's entries, each most recently used first (a prompt another one of the same mode
    extends is left out)."""
    prompts = slot_prompts(ctx, slots, unified)
    for entry in cache.entries() if cache is not None else []:
        prompts.append(SavedPrompt(entry.tokens, entry.shifts, entry.isolation, entry.affinity, entry.state,
                                   [SavedCheckpoint(c.tokens, c.data) for c in entry.checkpoints], entry.unified))
    return [p for p in prompts if not any(
        other is not p and other.isolation == p.isolation and other.unified == p.unified
        and len(other.tokens) > len(p.tokens) and other.tokens[:len(p.tokens)] == p.tokens for other in prompts)]


def cached_prompts(saved: list[SavedPrompt]) -> list[CachedPrompt]:
    """Saved prompts as RAM prompt cache entries, marked as read from disk."""
    return [CachedPrompt(list(p.tokens), [tuple(shift) for shift in p.shifts], p.isolation, p.affinity, p.state,
                         [Checkpoint(c.tokens, c.data) for c in p.checkpoints], origin="disk", unified=p.unified)
            for p in saved]


def slot_prompts(ctx: llama_cpp.llama_context_p, slots: list[Slot], unified: bool = False) -> list[SavedPrompt]:
    """The slots' caches worth keeping, most recently used first (`unified`: the context's mode)."""
    prompts = []
    for slot in sorted(slots, key=lambda s: s.last_used, reverse=True):
        if len(slot.tokens) < MIN_SAVED_TOKENS:
            continue
        size = llama_cpp.llama_state_seq_get_size(ctx, slot.id)
        buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(ctx, buffer, size, slot.id)
        if written:
            prompts.append(SavedPrompt(list(slot.tokens), list(slot.shifts), slot.isolation, slot.affinity,
                                       bytes(buffer)[:written],
                                       [SavedCheckpoint(c.tokens, c.data) for c in slot.checkpoints], unified))
    return prompts


def restore_slots(ctx: llama_cpp.llama_context_p, slots: list[Slot], prompts: list[SavedPrompt]) -> int:
    """Put saved caches back into empty slots; returns the tokens restored."""
    memory = llama_cpp.llama_get_memory(ctx)
    restored = 0
    for slot, saved in zip(slots, prompts):
        buffer = (ctypes.c_uint8 * len(saved.state)).from_buffer_copy(saved.state)
        if not llama_cpp.llama_state_seq_set_data(ctx, buffer, len(saved.state), slot.id):
            llama_cpp.llama_memory_seq_rm(memory, slot.id, -1, -1)  # whatever half went in
            continue
        slot.tokens, slot.shifts = list(saved.tokens), [tuple(shift) for shift in saved.shifts]
        slot.isolation, slot.affinity = saved.isolation, saved.affinity
        slot.checkpoints = [Checkpoint(c.tokens, c.data) for c in saved.checkpoints]
        restored += len(saved.tokens)
    return restored


def warm_start(ctx: llama_cpp.llama_context_p, slots: list[Slot], cache: PromptCache | None,
               saved: list[SavedPrompt], name: str) -> None:
    """What the disk store kept for a model: into its RAM prompt cache, or straight into its slots
    without one."""
    if cache is None:  # a model starts with its cache split into slots
        if restored := restore_slots(ctx, slots, [p for p in saved if not p.unified]):
            log.info("%s: %d cached prompt tokens restored into the slots from disk", name, restored)
        return
    kept = [entry for entry in cached_prompts(saved) if cache.put(entry)]
    if kept:
        log.info("%s: %d cached prompts (%d tokens) read from disk into the RAM prompt cache", name, len(kept),
                 sum(len(entry.tokens) for entry in kept))
