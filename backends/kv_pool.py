"""The engine's llama.cpp context, and how the slots share its KV cells.

The cells are one pool of `ctx_size` x `parallel`. Usually each slot has a share of `ctx_size`
cells in a stream of its own (llama.cpp's split cache): a sequence's attention reads its own cells
alone, which keeps batched decoding as fast as it is. A request that needs more than a share (its
prompt plus its completion budget) is served from the whole pool: once every slot is idle, the
context is made again with one unified cache (as llama-server's `--kv-unified`), the slots'
prefix caches carried over, and the request may grow to `request_limit` tokens. In that mode
other requests are admitted beside it while the pool holds their budgets too (idle slots' caches
give way, least recently used first). It goes back to split streams when a request of a share's
size arrives while every slot is idle.

Always unified would be simpler, but on this CPU build every sequence's step then attends over
all the pool's used cells: measured with tests/bench/bench_ab.py, 4 streams decoded at 0.34x and
one stream at 0.80x of the split cache.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import llama_cpp

from backends.kv_cache import ggml_type
from backends.llama_log import CacheSizes, init_backend
from backends.llama_model import LlamaModel, ModelLoadError
from backends.prefix import Slot
from backends.prompt_store import restore_slots, slot_prompts

log = logging.getLogger("fireside.engine")


class KvPool:
    def __init__(self, model: LlamaModel, *, ctx_size: int, parallel: int, batch_size: int, threads: int,
                 cache_type: str, swa_full: bool = False,
                 before_switch: Callable[[llama_cpp.llama_context_p, list[Slot]], bool] | None = None):
        """`before_switch(ctx, slots)`: called before the context is made again in the other mode;
        True when it kept the slots' caches elsewhere (the RAM prompt cache), so they need not
        be carried over."""
        self._model = model
        self._before_switch = before_switch
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = ctx_size * parallel
        params.n_batch = params.n_ubatch = batch_size
        params.n_seq_max = parallel
        params.n_threads = params.n_threads_batch = threads
        params.type_k = params.type_v = ggml_type(cache_type)
        params.no_perf = True
        # sliding-window layers keep their window (and a batch), not the whole context: llama.cpp's
        # server default; the library's is the full size (Gemma 3 12B at 32k: 12 GiB against 2.5)
        params.swa_full = swa_full
        self._params = params
        self.unified = False
        self.sizes = CacheSizes()
        self.ctx = self._create()
        self.share = min(ctx_size, llama_cpp.llama_n_ctx_seq(self.ctx))  # one slot's cells in split mode
        self.cells = self.share * parallel
        # one request's most tokens: the pool, within what the model was trained for (a pool
        # larger than that serves more requests at once, not longer ones)
        self.request_limit = max(self.share, min(self.cells, model.n_ctx_train or self.cells))

    @property
    def n_ctx(self) -> int:
        return self._params.n_ctx

    @property
    def memory(self) -> llama_cpp.llama_memory_t:
        return llama_cpp.llama_get_memory(self.ctx)

    def _create(self) -> llama_cpp.llama_context_p:
        self._params.kv_unified = self.unified
        with init_backend().thread_cache_sizes() as sizes:
            ctx = llama_cpp.llama_init_from_model(self._model.handle, self._params)
        self.sizes = sizes  # what its KV cache and recurrent states take, by kind of layer
        if not ctx:
            raise ModelLoadError(f"cannot create a context of {self._params.n_ctx} tokens for {self._model.path}")
        return ctx

    def admits(self, need: int, running: Iterable[int], slots: list[Slot]) -> bool:
        """Whether a request needing `need` cells may start beside running ones needing `running`;
        switches the cache's mode when every slot is idle and the request calls for it."""
        running = list(running)
        large = need > self.share
        if not running and large != self.unified:
            self._switch(slots)
        if not self.unified:
            return not large
        return sum(running) + need <= self.cells

    def make_room(self, slot: Slot, need: int, running: Iterable[int], slots: list[Slot]) -> None:
        """In unified mode, drop idle slots' caches (least recently used first) until the running
        requests' budgets, this one's and the caches kept fit in the pool."""
        if not self.unified:
            return
        reserved = need + sum(running)
        idle = sorted((s for s in slots if s.sequence is None and s is not slot and s.tokens), key=lambda s: s.last_used)
        held = sum(len(s.tokens) for s in idle)
        for other in idle:
            if reserved + held <= self.cells:
                return
            held -= len(other.tokens)
            llama_cpp.llama_memory_seq_rm(self.memory, other.id, -1, -1)
            other.clear()

    def _switch(self, slots: list[Slot]) -> None:
        """Make the context again in the other mode, with the slots' caches (all idle) carried over
        where they fit. A sequence's state names its context's cache streams (one per slot split,
        one unified), and llama.cpp reads it back only into a context of as many: the caches are
        kept in the RAM prompt cache where there is one, for when this mode comes back."""
        kept = self._before_switch is not None and self._before_switch(self.ctx, slots)
        saved = [] if kept else slot_prompts(self.ctx, slots, self.unified)
        for slot in slots:
            slot.clear()
        llama_cpp.llama_free(self.ctx)
        self.ctx = None
        self.unified = not self.unified
        self.ctx = self._create()
        restored = restore_slots(self.ctx, slots, saved)
        log.info("%s: KV cache %s (%d cached prompt tokens carried over)", self._model.path.name,
                 "unified for a long request" if self.unified else "split into slots again", restored)

    def close(self) -> None:
        if self.ctx is not None:
            llama_cpp.llama_free(self.ctx)
            self.ctx = None
