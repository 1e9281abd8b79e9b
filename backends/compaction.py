"""Closing gaps between busy slots that outlast a burst of arrivals.

With one cache stream per slot, llama.cpp decodes each run of consecutive busy slot ids in a pass
of its own, every step. When a gap has lasted `COMPACT_AFTER` steps with no request waiting to
fill it, sequences move into it: their cache is copied to the free slot (one stream's memory
copy) and they go on there; the old slot keeps its cache.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import llama_cpp

from backends.prefix import Slot, runs_of
from backends.sequences import Sequence

# Steps a gap between busy slots may last before sequences move to close it: a burst of
# arrivals usually fills it sooner.
COMPACT_AFTER = 4


class Compactor:
    def __init__(self, slots: list[Slot], set_of: Callable[[Sequence], Hashable]):
        self._slots = slots
        self._set_of = set_of  # a sequence's adapter set: each set decodes in steps of its own
        self._gapped_steps = 0

    def compact(self, active: list[Sequence], memory: llama_cpp.llama_memory_t, *, unified: bool, waiting: bool,
                step: int) -> None:
        busy = {seq.slot.id for seq in active}
        several_sets = len({self._set_of(seq) for seq in active}) > 1
        if unified or waiting or runs_of(busy) <= 1 or several_sets:
            self._gapped_steps = 0
            return
        self._gapped_steps += 1
        if self._gapped_steps < COMPACT_AFTER:
            return
        self._gapped_steps = 0
        width = len(busy)
        start = max(range(len(self._slots) - width + 1), key=lambda s: len(busy & set(range(s, s + width))))
        block = set(range(start, start + width))
        targets = sorted(block - busy)
        for seq in [seq for seq in active if seq.slot.id not in block]:
            _move(seq, self._slots[targets.pop(0)], memory, step)


def _move(seq: Sequence, target: Slot, memory: llama_cpp.llama_memory_t, step: int) -> None:
    source = seq.slot
    llama_cpp.llama_memory_seq_cp(memory, source.id, target.id, -1, -1)
    target.copy_from(source, len(source.tokens))
    target.isolation, target.affinity, target.last_used = source.isolation, source.affinity, step
    target.sequence, source.sequence = seq, None
    seq.slot = target
