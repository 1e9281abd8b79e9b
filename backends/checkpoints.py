"""Context checkpoints: what a slot's cache held at a point of its prompt, for the layers whose
cache cannot be cut back to an earlier token.

A transformer's KV cache can be cut at any token: a new prompt that shares a prefix with a slot's
keeps the prefix and prefills the rest. Two kinds of layers cannot: recurrent ones (Mamba, LFM2's
short convolutions, Qwen3-Next's and Qwen3.5's delta nets) hold one state that only moves forward,
and sliding-window ones hold only their window's last tokens once the cache is sized to the window.
So at chosen points of a prompt the slot saves the state of those layers alone (llama.cpp's
`LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY`: the recurrent state and the window's cells, small next to
the whole cache), and a later prompt that diverges inside the slot puts back the latest checkpoint
at or before the divergence, cuts the full-attention layers there, and prefills only the rest.

Where: the start of the chat's generation prompt (a hint from the request: the next turn renders
the same conversation up to there, then the answer and a new message), the prompt's last token
(a regenerated answer reuses all of it), and every `min_step` tokens of a long prompt (an edit
far back costs at most that). At most `limit` per slot, the oldest first out; they go with the
slot's tokens (cut, cleared, copied, kept in the RAM prompt cache and on disk).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import llama_cpp

from backends.settings import DEFAULT_CHECKPOINT_STEP, DEFAULT_CHECKPOINTS

PARTIAL = 1  # LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY: the recurrent states and the sliding windows alone
DEFAULT_LIMIT, DEFAULT_MIN_STEP = DEFAULT_CHECKPOINTS, DEFAULT_CHECKPOINT_STEP


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The partial state of a slot holding its first `tokens` tokens."""

    tokens: int
    data: bytes


@dataclass(frozen=True)
class CheckpointOptions:
    limit: int = DEFAULT_LIMIT  # per slot; 0 turns checkpoints off
    min_step: int = DEFAULT_MIN_STEP


def save_partial(ctx: llama_cpp.llama_context_p, seq_id: int) -> bytes:
    """The partial state of sequence `seq_id` (empty when llama.cpp has none to give)."""
    size = llama_cpp.llama_state_seq_get_size_ext(ctx, seq_id, PARTIAL)
    if not size:
        return b""
    buffer = (ctypes.c_uint8 * size)()
    written = llama_cpp.llama_state_seq_get_data_ext(ctx, buffer, size, seq_id, PARTIAL)
    return bytes(buffer)[:written]


def load_partial(ctx: llama_cpp.llama_context_p, seq_id: int, data: bytes) -> bool:
    """Put a partial state back into sequence `seq_id`; False when llama.cpp refused it."""
    buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    return llama_cpp.llama_state_seq_set_data_ext(ctx, buffer, len(data), seq_id, PARTIAL) == len(data)


def targets(prompt_length: int, cached: int, hints: tuple[int, ...], min_step: int) -> list[int]:
    """Where a prompt prefilled from `cached` takes checkpoints: the hints, its last token, and
    every `min_step` tokens; each strictly inside what is still to prefill, ascending."""
    wanted = {*hints, prompt_length - 1}
    if min_step > 0:
        wanted.update(range(min_step, prompt_length - 1, min_step))
    return sorted(point for point in wanted if cached < point < prompt_length)


def keep(checkpoints: list[Checkpoint], new: Checkpoint, limit: int, min_step: int) -> list[Checkpoint]:
    """`checkpoints` (ascending by tokens) with `new` in place: one at the same point replaced, and
    when over `limit`, first those closer than `min_step` to the one before them (not the newest
    two: the turn's own), then the oldest."""
    kept = [c for c in checkpoints if c.tokens != new.tokens]
    kept.append(new)
    kept.sort(key=lambda c: c.tokens)
    while len(kept) > limit:
        crowded = next((i for i in range(1, len(kept) - 2) if kept[i].tokens - kept[i - 1].tokens < min_step), None)
        del kept[crowded if crowded is not None else 0]
    return kept


def latest_within(checkpoints: list[Checkpoint], tokens: int) -> Checkpoint | None:
    """The checkpoint holding the most tokens, at most `tokens` of them."""
    return max((c for c in checkpoints if 0 < c.tokens <= tokens), key=lambda c: c.tokens, default=None)
