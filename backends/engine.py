"""The engine: one llama.cpp context, one scheduler thread, several sequences (slots).

The scheduler thread owns the context and is the only thread that decodes or samples. The
asyncio side hands it jobs through a thread-safe inbox; events go back through the `Outbox`,
flushed right before each decode so the event loop works while the scheduler is in C.

Each step decodes one batch: the next token of every generating sequence, then pending prompt
(chunked prefill) as much as `PrefillBudget` allows beside them, so a long prompt slows the other
streams by a bounded factor instead of stalling them. Slots keep their tokens after a request
ends: a new request takes the free slot sharing the longest prefix with its prompt and prefills
only the rest, or copies a longer prefix from another slot (how the choices of `n` > 1 share one prefill). A prompt's images
(embeddings from the model's projector) are decoded one a step, before its tokens. The slots'
KV cells are one pool (`KvPool`): a request larger than a slot's share is served from it. Where
the model's cache cannot be cut back (recurrent states, sliding windows), slots keep context
checkpoints; a slot taken for another conversation moves its state to the RAM prompt cache first
(backends/slot_states.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, replace

import llama_cpp

from backends.adapters import AdapterTurns
from backends.checkpoints import CheckpointOptions
from backends.compaction import Compactor
from backends.draft_model import DraftRunner
from backends.draft_payoff import DraftPayoff
from backends.embedding_queue import EmbeddingOptions, EmbeddingQueue
from backends.image_prefill import ImageDecodeError, ImagePrefill, next_image
from backends.jobs import (
    ChoiceFinished,
    EmbeddingJob,
    FinishReason,
    GenerationJob,
    JobFailed,
    JobHandle,
    PromptLogprobs,
    TextDelta,
    TokenLogprob,
)
from backends.kv_pool import KvPool
from backends.llama_log import CacheSizes
from backends.llama_model import LlamaModel
from backends.logprobs import LogprobComputer
from backends.outbox import Outbox
from backends.prefill_budget import PrefillBudget
from backends.prefix import Slot, runs_of
from backends.prompt_cache import PromptCache, RamBudget
from backends.prompt_store import PromptStore, StoreOptions, saved_prompts, store_key, warm_start
from backends.sampling import NO_TOKEN, Candidates, SamplerChain, choice_seed
from backends.sequences import Sequence, Waiting
from backends.settings import DEFAULT_CACHE_TYPE
from backends.slot_states import MIN_COPY_GAIN, SlotStates, StateStats
from backends.threads import ThreadPolicy, cpu_idle_seconds

log = logging.getLogger("fireside.engine")

_WAKE = object()  # an inbox item that only wakes the scheduler
ALTERNATE_FROM = 512  # prompt tokens from which a prefill steps apart from decoding streams


class DecodeError(Exception):
    """llama_decode failed for one request's tokens; that request fails, the others go on."""


class JobTooLarge(ValueError):
    """A choice needs more KV cells (prompt and completion budget) than the pool can ever give: it
    is refused at once rather than left waiting, and blocking the queue, for room that never comes."""

    def __init__(self, need: int, prompt_tokens: int, limit: int):
        super().__init__(f"This model's maximum context length is {limit} tokens. However, this request needs {need} "
                         f"tokens ({prompt_tokens} in the prompt, {need - prompt_tokens} for the completion).")
        self.need, self.prompt_tokens, self.limit = need, prompt_tokens, limit


class QueueFull(Exception):
    """More requests wait for a slot than `max_queue` allows."""

    def __init__(self, waiting: int, retry_after: int):
        super().__init__(f"the server is busy: {waiting} requests are waiting for a slot; retry in {retry_after}s")
        self.retry_after = retry_after


@dataclass(frozen=True)
class EngineOptions:
    ctx_size: int  # context window of each sequence, in tokens
    parallel: int = 4
    threads: int = 1  # the most threads a step may use
    adaptive_threads: bool = False
    batch_size: int = 512
    max_queue: int = 64
    embedding: EmbeddingOptions = EmbeddingOptions()
    saved_prompts: StoreOptions | None = None  # keep the slots' caches on disk across restarts
    cache_type: str = DEFAULT_CACHE_TYPE  # the KV cache's element type (`backends.settings.CACHE_TYPES`)
    auto_draft: bool = True  # draft by prompt lookup when a request gives no prediction
    draft_model_always: bool = False  # draft with the draft model at every step, paying or not (`DraftPayoff`)
    swa_full: bool = False  # sliding-window layers keep every position, not only their window (`--swa-full`)
    checkpoints: CheckpointOptions = CheckpointOptions()  # for caches that cannot be cut (`--ctx-checkpoints`)
    ram_cache: RamBudget | None = None  # the prompt cache in host memory shared by the models (`--cache-ram`)


@dataclass(frozen=True)
class EngineLoad:
    slots: int
    busy_slots: int
    queued_choices: int  # choices waiting for a free slot
    queued_requests: int  # requests none of whose choices started yet
    kv_used: int = 0  # cache positions the slots hold (running and kept for reuse)
    held_slots: int = 0  # slots holding any (their sliding windows and recurrent states are in use)
    queued_embeddings: int = 0  # inputs of embedding and ranking jobs not embedded yet
    states: StateStats | None = None  # checkpoints and the RAM prompt cache


class Engine:
    def __init__(self, model: LlamaModel, options: EngineOptions, draft: LlamaModel | None = None):
        """`draft`: a draft model (`--draft-model`) the engine drafts with and closes with itself."""
        self.model = model
        self.options = options
        self._slots = [Slot(i) for i in range(options.parallel)]
        self._states = SlotStates(model, options.checkpoints, None, swa_full=options.swa_full)
        self._pool = KvPool(model, ctx_size=options.ctx_size, parallel=options.parallel,
                            batch_size=options.batch_size, threads=options.threads, cache_type=options.cache_type,
                            swa_full=options.swa_full, before_switch=self._states.keep_all)
        self._states.attach(self._slots, lambda: self._pool.unified)
        if options.ram_cache:
            self._states.cache = PromptCache(options.ram_cache, self._states.checkpoint_bytes)
        if draft is not None and not self._states.can_roll_back:
            log.warning("%s: no draft model (%s): a recurrent state cannot take back the drafts it rejects",
                        model.path.name, draft.path.name)
            draft.close()
            draft = None
        self._drafts = None if draft is None else DraftRunner(
            draft, n_ctx=self._pool.n_ctx, parallel=options.parallel, batch_size=options.batch_size,
            threads=options.threads, target_vocab=model.n_vocab)
        self._payoff = None if self._drafts is None else DraftPayoff(
            self._drafts.trust, always=options.draft_model_always, name=model.path.name)
        self._model_drafting = False  # this step drafts with the draft model
        self._ctx, self._memory = self._pool.ctx, self._pool.memory
        self.ctx_size = self._pool.share  # a request's window unless it needs more (see KvPool)
        self.request_limit = self._pool.request_limit
        self._batch = llama_cpp.llama_batch_init(options.batch_size, 0, 1)
        self._images: ImagePrefill | None = None  # made for the first prompt with an image
        self._adapters = AdapterTurns()
        self.threads = ThreadPolicy(
            options.threads, adaptive=options.adaptive_threads,
            apply=lambda n: llama_cpp.llama_set_n_threads(self._ctx, n, n),
            idle_seconds=cpu_idle_seconds() if options.adaptive_threads else None,
        )
        self._prefill_budget = PrefillBudget()  # prompt tokens a step takes beside decoding streams
        self._decoding = self._prefilled = 0  # this step's decoding rows and prefilled prompt tokens
        self._prefill_turn = False  # this step prefills alone while streams wait (see `_fill_batch`)
        self._store = None
        if options.saved_prompts is not None:
            self._store = PromptStore(options.saved_prompts, store_key(
                model.path, self._pool.n_ctx, options.parallel, llama_cpp.__version__, options.cache_type,
                options.swa_full))
            warm_start(self._ctx, self._slots, self._states.cache, self._store.load(), model.path.name)
        self._candidates = Candidates(model.n_vocab)  # for grammar-constrained and observed draws
        self._logprobs = LogprobComputer(model.n_vocab)
        self._prompt_rows: list[tuple[Sequence, int, int]] = []  # (sequence, batch row, prompt position)
        self._inbox: queue.SimpleQueue[JobHandle | object | None] = queue.SimpleQueue()
        self._waiting: deque[Waiting] = deque()
        self._active: list[Sequence] = []
        self._prefilling: set[tuple[JobHandle, int]] = set()  # groups whose prefill is running
        self._unstarted: set[JobHandle] = set()  # requests none of whose choices started (under _queue_lock)
        self._queue_lock = threading.Lock()
        self._steps = 0
        self._compactor = Compactor(self._slots, _set_of)
        self._outbox = Outbox()
        self._emit, self._flush = self._outbox.emit, self._outbox.flush
        self._thread = threading.Thread(target=self._run, name=f"engine:{model.path.name}", daemon=True)
        self._embeddings = EmbeddingQueue(model, options.embedding, options.threads)
        self._closing = False
        self._aborting: Exception | None = None
        self.abandoned: Exception | None = None  # set when its device went away for good
        self._thread.start()

    @property
    def kv_sizes(self) -> CacheSizes:
        """What the context's KV cache and recurrent states take, by kind of layer."""
        return self._pool.sizes

    @property
    def draft_model(self) -> LlamaModel | None:
        return self._drafts.model if self._drafts is not None else None

    # ---- asyncio side -------------------------------------------------------------------

    @property
    def embedding_input_limit(self) -> int:
        return self._embeddings.input_limit

    def submit(self, job: GenerationJob | EmbeddingJob) -> JobHandle:
        """Queue a job; raise JobTooLarge for one the KV pool can never hold, QueueFull when
        `max_queue` requests already wait for a slot."""
        if isinstance(job, GenerationJob):
            for prompt in job.prompts:
                need = _need(prompt.tokens, prompt.max_tokens)
                if need > self.request_limit:
                    raise JobTooLarge(need, len(prompt.tokens), self.request_limit)
        handle = JobHandle(job, asyncio.get_running_loop())
        if self.abandoned is not None:
            handle.deliver([JobFailed(self.abandoned)])
            return handle
        with self._queue_lock:
            if len(self._unstarted) >= self.options.max_queue:
                # a request whose client left holds no place, even before the scheduler drops it
                waiting = sum(1 for queued in self._unstarted if not queued.cancelled)
                if waiting >= self.options.max_queue:
                    raise QueueFull(waiting, retry_after=1)
            self._unstarted.add(handle)
        self._inbox.put(handle)
        return handle

    def slot_states(self) -> list[tuple[int, bool, int]]:
        """Each slot's id, whether a sequence runs in it and the cache positions it holds (never
        what they hold: that is another client's prompt)."""
        return [(slot.id, slot.sequence is not None, len(slot.tokens)) for slot in self._slots]

    def load(self) -> EngineLoad:
        """A snapshot for health checks; reading sizes from another thread is safe under the GIL."""
        return EngineLoad(
            slots=self.options.parallel,
            busy_slots=len(self._active),
            queued_choices=len(self._waiting),
            queued_requests=len(self._unstarted),
            kv_used=sum(len(slot.tokens) for slot in self._slots),
            held_slots=sum(1 for slot in self._slots if slot.tokens),
            queued_embeddings=self._embeddings.waiting,
            states=self._states.stats(self._slots),
        )

    def abort(self, error: Exception) -> None:
        """End every running and queued job with `error`, from any thread (the server stops)."""
        self._aborting = error
        self._inbox.put(_WAKE)

    def abandon(self, error: Exception) -> None:
        """Its device went away mid-step (a lost RPC worker): the scheduler thread is blocked in
        llama.cpp for good. Every job ends with `error` from this thread and new ones get it at
        once; nothing native is freed or joined (that would wait on the dead device too)."""
        self.abandoned = error
        self._closing = True
        handles: set[JobHandle] = set()
        with contextlib.suppress(queue.Empty):
            while True:
                item = self._inbox.get_nowait()
                if isinstance(item, JobHandle):
                    handles.add(item)
        for _ in range(3):  # the blocked thread may have been between steps: read what it held
            with contextlib.suppress(RuntimeError):
                handles |= {w.handle for w in list(self._waiting)} | {seq.handle for seq in list(self._active)}
                handles |= set(self._unstarted) | set(self._embeddings.handles())
                break
        for handle in handles:
            self._emit(handle, JobFailed(error))
        self._flush()

    def close(self) -> None:
        if self.abandoned is not None:
            return
        if self._closing:
            return
        self._closing = True
        self._inbox.put(None)
        self._thread.join()
        if self._store is not None:
            self._store.save(saved_prompts(self._ctx, self._slots, self._states.cache, self._pool.unified))
        if self._states.cache is not None:
            self._states.cache.close()
        self._embeddings.close()
        self._outbox.close()
        llama_cpp.llama_batch_free(self._batch)
        if self._images is not None:
            self._images.close()
        self._pool.close()
        self._ctx = None
        if self._drafts is not None:
            self._drafts.close()
            self._drafts.model.close()

    # ---- scheduler thread ---------------------------------------------------------------

    def _run(self) -> None:
        while True:
            idle = not self._active and not self._waiting and not self._embeddings.pending
            if not self._take_inbox(block=idle):
                break
            if self._aborting is not None:
                self._fail_all(self._aborting)
            self._drop_cancelled()
            self._fill_slots()
            if self._active:
                try:
                    self._compactor.compact(self._active, self._memory, unified=self._pool.unified,
                                            waiting=bool(self._waiting), step=self._steps)
                    self._step()
                except Exception as error:  # never let the scheduler die: fail what was running
                    log.exception("engine step failed")
                    for seq in list(self._active):
                        self._clear(seq.slot)
                        self._fail(seq.handle, error)
            if self._embeddings.pending:  # one embedding batch between generation steps
                self._embeddings.step(self._emit)
            if not self._active:
                self._flush()  # otherwise the next step flushes, just before it decodes
        for seq in list(self._active):
            self._release(seq)

    def _take_inbox(self, *, block: bool) -> bool:
        """Move new jobs to the waiting queue; False when the engine is closing."""
        try:
            handle = self._inbox.get() if block else self._inbox.get_nowait()
        except queue.Empty:
            return True
        while True:
            if handle is None:
                return False
            if handle is not _WAKE:
                self._enqueue(handle)
            try:
                handle = self._inbox.get_nowait()
            except queue.Empty:
                return True

    def _enqueue(self, handle: JobHandle) -> None:
        job = handle.job
        if isinstance(job, EmbeddingJob):  # no slot to wait for: queued with the embedding context
            self._mark_started(handle)
            self._embeddings.add(handle, self._emit)
            return
        queued: list[Waiting] = []
        for p, prompt in enumerate(job.prompts):
            for j in range(job.n):
                choice = p * job.n + j
                if prompt.max_tokens <= 0 and not job.scores_prompt:
                    self._emit(handle, ChoiceFinished(choice, "length", len(prompt.tokens), 0, 0))
                else:
                    queued.append(Waiting(handle, choice, p, prompt))
        if not queued:
            self._mark_started(handle)
        elif job.priority:  # ahead of every ordinary request, behind earlier priority ones
            ahead = next((i for i, w in enumerate(self._waiting) if not w.handle.job.priority), len(self._waiting))
            self._waiting = deque([*list(self._waiting)[:ahead], *queued, *list(self._waiting)[ahead:]])
        else:
            self._waiting.extend(queued)

    def _mark_started(self, handle: JobHandle) -> None:
        """The job no longer waits as a whole: it stops counting against `max_queue`."""
        with self._queue_lock:
            self._unstarted.discard(handle)

    def _drop_cancelled(self) -> None:
        """Clients that went away: queued choices are dropped before any prefill, slots freed."""
        self._embeddings.drop_cancelled()
        if any(w.handle.cancelled for w in self._waiting):
            for w in self._waiting:
                if w.handle.cancelled:
                    self._mark_started(w.handle)
            self._waiting = deque(w for w in self._waiting if not w.handle.cancelled)
        for seq in [s for s in self._active if s.handle.cancelled]:
            self._release(seq)
            self._outbox.drop(seq.handle)

    def _fill_slots(self) -> None:
        if not self._waiting:
            return
        kept: deque[Waiting] = deque()
        failures: list[tuple[JobHandle, Exception]] = []
        blocked = False  # a request waiting for room in the KV pool: the later ones wait behind it
        for waiting in self._waiting:
            free = [slot for slot in self._slots if slot.sequence is None]
            if blocked or not free or waiting.group in self._prefilling:
                kept.append(waiting)  # siblings wait for their prompt's prefill, then copy it
                continue
            need = _need(waiting.prompt.tokens, waiting.prompt.max_tokens)
            if not self._pool.admits(need, self._running_needs(), self._slots):
                kept.append(waiting)
                blocked = True
                continue
            if self._ctx is not self._pool.ctx:  # the pool changed its cache's mode
                self._ctx, self._memory = self._pool.ctx, self._pool.memory
                self.threads.context_changed()
                if self._images is not None:
                    self._images.close()
                    self._images = None
            try:
                self._start(waiting, free)
            except Exception as error:  # e.g. a sampler that cannot be built: this job alone fails
                failures.append((waiting.handle, error))
        self._waiting = kept
        for handle, error in failures:
            self._fail(handle, error)

    def _start(self, waiting: Waiting, free: list[Slot]) -> None:
        job = waiting.handle.job
        keys = job.cache
        if job.adapters:  # KV computed under adapters is reused only under the same ones
            keys = replace(keys, isolation=f"{keys.isolation or ''}\0lora:{job.adapters.key}")
        prompt = waiting.prompt.tokens

        # the busy slots decoded in the same steps are those of the same adapter set
        mine = _set_of(waiting)
        busy = {s.id for s in self._slots if s.sequence is not None and _set_of(s.sequence) == mine}
        others = [s.id for s in self._slots if s.sequence is not None and _set_of(s.sequence) != mine]
        shared = {s.id: s.shared_prefix(prompt, keys) for s in self._slots}

        def preference(slot: Slot) -> tuple[int, bool, int, int, int, int]:
            # The slot's own cached prefix, steering by key, then a slot that keeps the busy
            # ones of its adapter set contiguous (gaps that last are closed by `_compact`) and
            # away from other sets' (room for each set to grow in one run), the least recently
            # used cache, low ids.
            steered = keys.affinity is not None and slot.affinity == keys.affinity
            apart = min((abs(slot.id - other) for other in others), default=0)
            return shared[slot.id], steered, -runs_of(busy | {slot.id}), apart, -slot.last_used, -slot.id

        slot = max(free, key=preference)
        # The last prompt token is always decoded again: its logits give the first new token.
        reuse_limit = len(prompt) - 1
        echo_from = -1
        if job.scores_prompt:
            assert job.logprobs is not None
            echo_from = max(len(prompt) - job.logprobs.prompt_last, 0)
            reuse_limit = min(reuse_limit, max(echo_from - 1, 0))  # the rows scoring them are decoded
        capacity = self._pool.cells if self._pool.unified else self._pool.share
        slot, cached, source = self._states.bring_back(self._ctx, self._slots, slot, free, prompt, keys.isolation,
                                                       shared, reuse_limit, capacity)
        self._pool.make_room(slot, _need(prompt, waiting.prompt.max_tokens), self._running_needs(), self._slots)
        observed = job.logprobs is not None and (job.logprobs.sampling or job.logprobs.active_ids)
        sampler = SamplerChain(
            job.sampling,
            seed=choice_seed(job.sampling.seed, waiting.choice),
            n_vocab=self.model.n_vocab,
            eog_tokens=self.model.eog_token_ids,
            penalty_window=self.ctx_size,
            grammar=job.grammar,
            candidates=self._candidates if job.grammar is not None or observed else None,
            guard=job.guard,
            token_bytes=self._guard_bytes if job.guard is not None else None,
        )
        seq = Sequence(slot, waiting, sampler, cached, self.options.auto_draft,
                       self._drafts.trust if self._drafts is not None else None,
                       may_draft=self._states.can_roll_back, cache_source=source,
                       checkpoint_at=self._states.plan(len(prompt), cached, waiting.prompt.checkpoint_hints))
        if echo_from >= 0:
            seq.echo_from = max(echo_from, 1)
            seq.prompt_entries = [None] if echo_from == 0 else []
        slot.sequence = seq
        # + 1: a slot used at the first step is not taken for one never used
        slot.isolation, slot.affinity, slot.last_used = keys.isolation, keys.affinity, self._steps + 1
        self._active.append(seq)
        if job.n > 1 and len(prompt) - cached > MIN_COPY_GAIN:
            self._prefilling.add(waiting.group)  # the other choices will copy this prefill
        self._mark_started(waiting.handle)

    def _running_needs(self) -> list[int]:
        return [_need(seq.prompt, seq.max_tokens) for seq in self._active]

    def _guard_bytes(self, token: int) -> bytes:
        """A token's bytes as a uniqueItems guard reads them (markup included)."""
        return self.model.token_bytes(token, special=True)

    def _clear(self, slot: Slot) -> None:
        self._states.clear(self._ctx, slot)

    def _step(self) -> None:
        self._steps += 1
        sequences = self._adapters.turn(self._active, self._ctx)  # one adapter set a step
        imaged = any(seq.images for seq in sequences)
        if imaged:  # at most one image a step, before the tokens
            self._images = self._images or ImagePrefill(self._ctx, self.model.handle, self.options.batch_size)
            failed = self._images.feed(sorted(sequences, key=lambda seq: seq.slot.id))
            if failed is not None:
                self._clear(failed.slot)
                self._fail(failed.handle, ImageDecodeError(self.options.batch_size))
                sequences = [seq for seq in sequences if seq in self._active]
        step_started = time.perf_counter()
        generated = sum(seq.generated for seq in sequences) if self._payoff is not None else 0
        rows, prefill = self._fill_batch(sequences)
        self.threads.before_step(prefill=prefill)
        # Handing the last step's events over right before decoding: the notifier thread and
        # the event loop handle them while this thread is in C without the GIL.
        self._flush()
        started = time.perf_counter()
        status = llama_cpp.llama_decode(self._ctx, self._batch)
        if status == 0:
            elapsed = time.perf_counter() - started
            if prefill and self._states.checkpointing:
                self._save_checkpoints(sequences)
            self.threads.after_step(elapsed, rows=rows, prefill=prefill)
            self._prefill_budget.observe(elapsed, decoding=self._decoding, prefilled=self._prefilled, rows=rows)
            self._sample(sequences)
            if self._payoff is not None and self._decoding and not self._prefilled and not imaged:
                generated = sum(seq.generated for seq in sequences) - generated
                self._payoff.observe(self._decoding, self._model_drafting, generated, time.perf_counter() - step_started,
                                     self._drafts.longest if self._model_drafting else 0)
        else:
            self._decode_one_by_one(sequences, status)

    def _fill_batch(self, sequences: list[Sequence]) -> tuple[int, bool]:
        """Next token of every generating sequence, and prompt chunks in the room left.

        Rows go in slot order: with one cache stream per slot, llama.cpp splits a batch into one
        ubatch per run of consecutive sequence ids, so an unordered batch costs extra passes.
        """
        batch = self._batch
        self._decoding = sum(1 for seq in sequences if not seq.prefilling)
        # Beside a long prompt's prefill, steps alternate between the streams' rows and prompt
        # tokens alone: the rows of one batch all pay for attention over its longest sequence
        deep = self._decoding > 0 and any(seq.prefilling and len(seq.prompt) > ALTERNATE_FROM for seq in sequences)
        self._prefill_turn = deep and not self._prefill_turn
        room = self.options.batch_size - self._decoding
        prompt_room = 0 if deep and not self._prefill_turn else self._prefill_budget.tokens(self._decoding, room)
        rows, prefill, self._prefilled = 0, False, 0
        self._prompt_rows.clear()
        self._model_drafting = False
        if self._drafts is not None and not self._prefill_turn:
            self._model_drafting = self._payoff is not None and self._payoff.drafting(self._decoding)
            self._drafts.prepare_for(sequences, room, model=self._model_drafting, equal=not self._pool.unified)
        for seq in sorted(sequences, key=lambda seq: seq.slot.id):
            seq.mark = (len(seq.slot.tokens), seq.fed)
            if not seq.prefilling:
                if self._prefill_turn:
                    continue
                self._put(rows, seq.last_token, seq.slot, True)
                seq.output_row = rows
                rows += 1
                if seq.drafter is not None and room > 0 and seq.drafter.allowed(self._decoding, len(sequences) - self._decoding):
                    drafted = self._put_draft(seq, rows, room)
                    rows += drafted
                    room -= drafted
                    prefill = prefill or drafted > 0
                continue
            take = min(room, prompt_room, next_image(seq.images, seq.fed, len(seq.prompt)) - seq.fed)
            if seq.checkpoint_at:  # a chunk ends where a checkpoint is due
                take = min(take, seq.checkpoint_at[0] - seq.fed)
            if take <= 0:
                continue
            prompt_room -= take
            self._prefilled += take
            first_row, first_position = rows, seq.fed
            for token in seq.prompt[seq.fed:seq.fed + take]:
                self._put(rows, token, seq.slot, False)
                rows += 1
            room -= take
            seq.fed += take
            prefill = True
            if seq.echo_from >= 0:
                self._score_rows(seq, first_row, first_position, take)
            if not seq.prefilling:
                batch.logits[rows - 1] = True
                seq.output_row = rows - 1
                if (seq.drafter is not None and take == 1 and room > 0 and seq.max_tokens > 0
                        and seq.drafter.allowed(self._decoding, len(sequences) - self._decoding)):
                    # The first tokens are drafted right after a prompt whose prefix was cached, in
                    # the same decode. Not after a longer chunk: rows added to a wide batch change
                    # how llama.cpp tiles it, and with that the chunk's numbers.
                    drafted = self._put_draft(seq, rows, room)
                    rows += drafted
                    room -= drafted
        batch.n_tokens = rows
        return rows, prefill

    def _save_checkpoints(self, sequences: list[Sequence]) -> None:
        """A checkpoint of each sequence whose prefill just reached one of its points."""
        for seq in sequences:
            if seq.checkpoint_at and seq.fed >= seq.checkpoint_at[0]:
                if seq.fed == seq.checkpoint_at[0]:
                    self._states.save_checkpoint(self._ctx, seq.slot)
                seq.checkpoint_at = [point for point in seq.checkpoint_at if point > seq.fed]

    def _score_rows(self, seq: Sequence, first_row: int, first_position: int, count: int) -> None:
        """Ask for the logits of this chunk's rows that score echoed prompt tokens (the row of
        position p gives the log-probability of prompt token p + 1)."""
        last_scoring = len(seq.prompt) - 2
        for position in range(max(first_position, seq.echo_from - 1), min(first_position + count - 1, last_scoring) + 1):
            row = first_row + position - first_position
            self._batch.logits[row] = True
            self._prompt_rows.append((seq, row, position))

    def _put_draft(self, seq: Sequence, row: int, room: int) -> int:
        """Draft tokens after what the sequence feeds this step (its next token, or the end of
        its prompt), each with its logits (checked after the decode); returns how many went in."""
        seq.draft = ()
        if seq.budget is not None and seq.budget.forced:
            return 0
        assert seq.drafter is not None
        limit = min(room, seq.max_tokens - seq.generated - 1)
        draft = seq.drafter.propose(limit) if limit > 0 else ()
        for token in draft:
            self._put(row, token, seq.slot, True)
            row += 1
        seq.draft = draft
        seq.drafted += len(draft)
        return len(draft)

    def _put(self, row: int, token: int, slot: Slot, logits: bool) -> None:
        batch = self._batch
        batch.token[row] = token
        batch.pos[row] = slot.next_position
        batch.n_seq_id[row] = 1
        batch.seq_id[row][0] = slot.id
        batch.logits[row] = logits
        slot.tokens.append(token)

    def _sample(self, sequences: list[Sequence]) -> None:
        if self._prompt_rows:
            self._score_prompt()
        for seq in sequences:
            if seq.output_row < 0:
                continue
            row, seq.output_row = seq.output_row, -1
            self._prefilling.discard(seq.group)
            if seq.prompt_entries is not None:
                self._emit(seq.handle, PromptLogprobs(seq.choice, len(seq.prompt) - len(seq.prompt_entries),
                                                      tuple(seq.prompt_entries)))
                seq.prompt_entries = None
                if seq.max_tokens <= 0:  # only the prompt was to be scored
                    self._finish(seq, "length")
                    continue
            token = self._sample_row(seq, row)
            if seq.draft:
                self._check_draft(seq, row, token)

    def _sample_row(self, seq: Sequence, row: int) -> int:
        """Sample (or force) the sequence's next token from a batch row and take it in."""
        forced = seq.budget is not None and bool(seq.budget.forced)
        record = None
        if seq.logprobs is not None:
            self._logprobs.load(self._logprobs.row(self._ctx, row))
        if forced:
            token = seq.budget.forced.popleft()
            if not seq.sampler.accept_forced(token):  # the grammar rules the closing out: end here
                token = NO_TOKEN
            elif seq.logprobs is not None:
                record = self._logprobs.record(token, seq.logprobs.top, sampling_logprob=0.0, active_count=1)
        elif seq.logprobs is not None and (seq.logprobs.sampling or seq.logprobs.active_ids):
            token, view = seq.sampler.sample_observed(self._ctx, row, seq.logprobs.active_ids)
            if token != NO_TOKEN:
                record = self._logprobs.record(token, seq.logprobs.top, sampling_logprob=view.logprob,
                                               active_count=view.active_count, active_ids=view.active_ids)
        else:
            token = seq.sampler.sample(self._ctx, row)
            if seq.logprobs is not None and token != NO_TOKEN:
                record = self._logprobs.record(token, seq.logprobs.top)
        self._accept(seq, token, forced=forced, logprob=record)
        return token

    def _check_draft(self, seq: Sequence, row: int, token: int) -> None:
        """Walk the drafted rows while each sampled token is the drafted one: those tokens are
        what decoding one at a time would have produced. The cache keeps the matching prefix;
        the rest is removed, and the last sampled token is fed at the next step as usual."""
        draft, seq.draft = seq.draft, ()
        slot, kept = seq.slot, 0
        while (kept < len(draft) and token == draft[kept] and seq.slot.sequence is seq
               and not (seq.budget is not None and seq.budget.forced)):
            kept += 1
            token = self._sample_row(seq, row + kept)
        # The drafts are the last tokens this step put in the slot's cache; keep those matched.
        keep = len(slot.tokens) - len(draft) + kept
        if keep < len(slot.tokens):
            llama_cpp.llama_memory_seq_rm(self._memory, slot.id, slot.position(keep), -1)
            slot.cut(keep)
        assert seq.drafter is not None  # only a drafting sequence has a draft
        seq.drafter.settle(len(draft), kept)
        seq.kept += kept

    def _score_prompt(self) -> None:
        for seq, row, position in self._prompt_rows:
            if seq.prompt_entries is None or seq.slot.sequence is not seq:
                continue
            self._logprobs.load(self._logprobs.row(self._ctx, row))
            top = seq.logprobs.top if seq.logprobs is not None else 0
            seq.prompt_entries.append(self._logprobs.record(seq.prompt[position + 1], top))
        self._prompt_rows.clear()

    def _rollback(self, seq: Sequence) -> bool:
        """Undo what this step put in the sequence's cache; False where that cannot be done (a
        recurrent state): the slot is emptied and the request fails."""
        length, fed = seq.mark
        if not llama_cpp.llama_memory_seq_rm(self._memory, seq.slot.id, seq.slot.position(length), -1):
            self._clear(seq.slot)
            self._fail(seq.handle, DecodeError("llama_decode failed and this model's state cannot be rolled back"))
            return False
        seq.slot.cut(length)
        seq.fed = fed
        seq.output_row = -1
        seq.drafted -= len(seq.draft)
        seq.draft = ()

    def _decode_one_by_one(self, sequences: list[Sequence], status: int) -> None:
        """A failed batch is retried request by request, so only the request at fault fails."""
        log.warning("llama_decode failed with status %d for %d sequences; retrying one by one", status, len(sequences))
        sequences = [seq for seq in sequences if self._rollback(seq)]
        for seq in sequences:
            if seq not in self._active:
                continue
            rows, _ = self._fill_batch([seq])
            if rows == 0:
                continue
            status = llama_cpp.llama_decode(self._ctx, self._batch)
            if status == 0:
                self._sample([seq])
            elif self._rollback(seq):
                self._fail(seq.handle, DecodeError(f"llama_decode failed with status {status}"))

    def _accept(self, seq: Sequence, token: int, *, forced: bool = False, logprob: TokenLogprob | None = None) -> None:
        if token == NO_TOKEN:  # the grammar is complete and may not end: that is the end
            self._finish(seq, "stop", release_held=True)
            return
        seq.generated += 1
        seq.handle.generated[seq.choice] = seq.generated
        if seq.first_token_at is None:
            seq.first_token_at = time.perf_counter()
        if self.model.is_eog(token) and not seq.handle.job.sampling.ignore_eos:
            self._finish(seq, "stop", release_held=True)
            return
        piece = seq.decoder.decode(self.model.token_bytes(token, special=seq.special_text))
        if seq.budget is not None:
            seq.budget.observe(piece, was_forced=forced)
        text, stopped = seq.stops.feed(piece)
        self._emit(seq.handle, TextDelta(seq.choice, text, token, logprob))
        if seq.drafter is not None:
            seq.drafter.observe(token)
        if stopped:
            self._finish(seq, "stop")
        elif seq.generated >= seq.max_tokens:
            self._finish(seq, "length")
        else:
            seq.last_token = token

    def _finish(self, seq: Sequence, reason: FinishReason, *, release_held: bool = False) -> None:
        """End a choice; text held back for a possible stop sequence goes out unless one matched."""
        if reason == "length" or release_held:
            rest = seq.stops.flush() + seq.decoder.decode(b"", final=True)
            if rest:
                self._emit(seq.handle, TextDelta(seq.choice, rest, -1))
        self._emit(seq.handle, ChoiceFinished(seq.choice, reason, len(seq.prompt), seq.generated, seq.cached,
                                              seq.drafted, seq.drafter.matched if seq.drafter else 0,
                                              seq.first_token_at,
                                              seq.stops.matched if reason == "stop" and not release_held else None,
                                              seq.kept, seq.cache_source))
        self._release(seq)

    def _fail(self, handle: JobHandle, error: Exception) -> None:
        """Fail one job: free its slots, forget its waiting choices, tell its client."""
        for seq in [s for s in self._active if s.handle is handle]:
            self._release(seq)
        self._waiting = deque(w for w in self._waiting if w.handle is not handle)
        self._prefilling = {group for group in self._prefilling if group[0] is not handle}
        self._mark_started(handle)
        self._emit(handle, JobFailed(error))

    def _fail_all(self, error: Exception) -> None:
        for handle in {w.handle for w in self._waiting} | {seq.handle for seq in self._active}:
            self._fail(handle, error)
        self._embeddings.fail_all(error, self._emit)

    def _release(self, seq: Sequence) -> None:
        """Free the slot; its cache stays for the next request sharing the prefix."""
        seq.sampler.free()
        seq.slot.sequence = None
        self._active.remove(seq)
        self._prefilling.discard(seq.group)


def _need(prompt: tuple[int, ...], max_tokens: int) -> int:
    """The KV cells a choice may come to hold: its prompt and its completion budget."""
    return len(prompt) + max(max_tokens, 0)


def _set_of(work: Sequence | Waiting) -> str:
    """The key of the adapter set a sequence (or a waiting request) decodes under; "" for the base."""
    adapters = work.handle.job.adapters
    return adapters.key if adapters else ""
