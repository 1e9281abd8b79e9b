"""The engine: one llama.cpp context, one scheduler thread, several sequences (slots).

The scheduler thread owns the context and is the only thread that decodes or samples. The
asyncio side hands it jobs through a thread-safe inbox and receives events through
`loop.call_soon_threadsafe`, once per step for all jobs, so HTTP stays responsive while ctypes
calls run with the GIL released.

Each step decodes one batch: the next token of every generating sequence, then as much pending
prompt as fits (chunked prefill), so a long prompt does not stall the other streams.
"""

from __future__ import annotations

import asyncio
import codecs
import logging
import queue
import threading
from collections import deque
from dataclasses import dataclass

import llama_cpp

from backends.jobs import (
    ChoiceFinished,
    Event,
    FinishReason,
    GenerationJob,
    JobFailed,
    JobHandle,
    PromptSpec,
    TextDelta,
)
from backends.llama_model import LlamaModel, ModelLoadError
from backends.sampling import SamplerChain, choice_seed
from backends.stops import StopMatcher

log = logging.getLogger("fireside.engine")


class DecodeError(Exception):
    """llama_decode failed for a batch; the jobs in it fail, the engine goes on."""


@dataclass(frozen=True)
class EngineOptions:
    ctx_size: int  # context window of each sequence, in tokens
    parallel: int = 4
    threads: int = 1
    threads_batch: int = 1
    batch_size: int = 512


@dataclass(frozen=True)
class EngineLoad:
    slots: int
    busy_slots: int
    queued_choices: int


@dataclass(eq=False)
class _Waiting:
    handle: JobHandle
    choice: int
    prompt: PromptSpec


class _Sequence:
    """One choice being generated in one slot (llama.cpp sequence id)."""

    __slots__ = (
        "slot", "handle", "choice", "prompt", "max_tokens", "fed", "n_past", "sampler",
        "decoder", "stops", "generated", "last_token", "output_row",
    )

    def __init__(self, slot: int, waiting: _Waiting, sampler: SamplerChain):
        self.slot = slot
        self.handle = waiting.handle
        self.choice = waiting.choice
        self.prompt = waiting.prompt.tokens
        self.max_tokens = waiting.prompt.max_tokens
        self.fed = 0  # prompt tokens submitted to the context so far
        self.n_past = 0  # positions filled in this sequence's cache
        self.sampler = sampler
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.stops = StopMatcher(waiting.handle.job.stop)
        self.generated = 0
        self.last_token = -1
        self.output_row = -1  # batch row whose logits this sequence samples from, this step

    @property
    def prefilling(self) -> bool:
        return self.fed < len(self.prompt)


class Engine:
    def __init__(self, model: LlamaModel, options: EngineOptions):
        self.model = model
        self.options = options
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = options.ctx_size * options.parallel
        params.n_batch = options.batch_size
        params.n_ubatch = options.batch_size
        params.n_seq_max = options.parallel
        params.n_threads = options.threads
        params.n_threads_batch = options.threads_batch
        params.kv_unified = False  # each sequence gets its own ctx_size window
        params.no_perf = True
        self._ctx = llama_cpp.llama_init_from_model(model.handle, params)
        if not self._ctx:
            raise ModelLoadError(f"cannot create a context of {params.n_ctx} tokens for {model.path}")
        self.ctx_size = min(options.ctx_size, llama_cpp.llama_n_ctx_seq(self._ctx))
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(options.batch_size, 0, 1)
        self._inbox: queue.SimpleQueue[JobHandle | None] = queue.SimpleQueue()
        self._waiting: deque[_Waiting] = deque()
        self._active: list[_Sequence] = []
        self._free_slots = list(range(options.parallel - 1, -1, -1))
        self._outbox: dict[JobHandle, list[Event]] = {}
        self._thread = threading.Thread(target=self._run, name=f"engine:{model.path.name}", daemon=True)
        self._closing = False
        self._thread.start()

    # ---- asyncio side -------------------------------------------------------------------

    def submit(self, job: GenerationJob) -> JobHandle:
        handle = JobHandle(job, asyncio.get_running_loop())
        self._inbox.put(handle)
        return handle

    def load(self) -> EngineLoad:
        """A snapshot for health checks; reading sizes from another thread is safe under the GIL."""
        return EngineLoad(
            slots=self.options.parallel,
            busy_slots=len(self._active),
            queued_choices=len(self._waiting) + self._inbox.qsize(),
        )

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._inbox.put(None)
        self._thread.join()
        llama_cpp.llama_batch_free(self._batch)
        llama_cpp.llama_free(self._ctx)
        self._ctx = None

    # ---- scheduler thread ---------------------------------------------------------------

    def _run(self) -> None:
        while True:
            idle = not self._active and not self._waiting
            if not self._take_inbox(block=idle):
                break
            self._drop_cancelled()
            self._fill_slots()
            if self._active:
                try:
                    self._step()
                except Exception as error:  # never let the scheduler die: fail what was running
                    log.exception("engine step failed")
                    for seq in list(self._active):
                        self._fail(seq.handle, error)
            self._flush()
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
            self._enqueue(handle)
            try:
                handle = self._inbox.get_nowait()
            except queue.Empty:
                return True

    def _enqueue(self, handle: JobHandle) -> None:
        job = handle.job
        for p, prompt in enumerate(job.prompts):
            for j in range(job.n):
                choice = p * job.n + j
                if prompt.max_tokens <= 0:
                    self._emit(handle, ChoiceFinished(choice, "length", len(prompt.tokens), 0, 0))
                else:
                    self._waiting.append(_Waiting(handle, choice, prompt))

    def _drop_cancelled(self) -> None:
        if any(w.handle.cancelled for w in self._waiting):
            self._waiting = deque(w for w in self._waiting if not w.handle.cancelled)
        for seq in [s for s in self._active if s.handle.cancelled]:
            self._release(seq)

    def _fill_slots(self) -> None:
        while self._free_slots and self._waiting:
            waiting = self._waiting.popleft()
            params = waiting.handle.job.sampling
            sampler = SamplerChain(
                params,
                seed=choice_seed(params.seed, waiting.choice),
                n_vocab=self.model.n_vocab,
                eog_tokens=self.model.eog_token_ids,
                penalty_window=self.ctx_size,
            )
            self._active.append(_Sequence(self._free_slots.pop(), waiting, sampler))

    def _step(self) -> None:
        batch = self._batch
        capacity = self.options.batch_size
        rows = 0
        decoding = [seq for seq in self._active if not seq.prefilling]
        for seq in decoding:
            self._put(rows, seq.last_token, seq.n_past, seq.slot, True)
            seq.output_row = rows
            seq.n_past += 1
            rows += 1
        for seq in self._active:
            if not seq.prefilling or rows >= capacity:
                continue
            take = min(capacity - rows, len(seq.prompt) - seq.fed)
            last = seq.fed + take == len(seq.prompt)
            for offset in range(take):
                self._put(rows, seq.prompt[seq.fed + offset], seq.n_past + offset, seq.slot, False)
                rows += 1
            seq.fed += take
            seq.n_past += take
            if last:
                batch.logits[rows - 1] = True
                seq.output_row = rows - 1
        batch.n_tokens = rows
        status = llama_cpp.llama_decode(self._ctx, batch)
        stepped = [seq for seq in self._active if seq.output_row >= 0]
        if status != 0:
            error = DecodeError(f"llama_decode failed with status {status}")
            for seq in stepped:
                self._fail(seq.handle, error)
            return
        for seq in stepped:
            token = seq.sampler.sample(self._ctx, seq.output_row)
            seq.output_row = -1
            self._accept(seq, token)

    def _put(self, row: int, token: int, pos: int, seq_id: int, logits: bool) -> None:
        batch = self._batch
        batch.token[row] = token
        batch.pos[row] = pos
        batch.n_seq_id[row] = 1
        batch.seq_id[row][0] = seq_id
        batch.logits[row] = logits

    def _accept(self, seq: _Sequence, token: int) -> None:
        seq.generated += 1
        if self.model.is_eog(token) and not seq.handle.job.sampling.ignore_eos:
            self._finish(seq, "stop")
            return
        piece = seq.decoder.decode(self.model.token_bytes(token))
        text, stopped = seq.stops.feed(piece)
        self._emit(seq.handle, TextDelta(seq.choice, text, token))
        if stopped:
            self._finish(seq, "stop")
        elif seq.generated >= seq.max_tokens:
            self._finish(seq, "length")
        else:
            seq.last_token = token

    def _finish(self, seq: _Sequence, reason: FinishReason) -> None:
        if reason == "length":
            rest = seq.stops.flush() + seq.decoder.decode(b"", final=True)
            if rest:
                self._emit(seq.handle, TextDelta(seq.choice, rest, -1))
        self._emit(seq.handle, ChoiceFinished(seq.choice, reason, len(seq.prompt), seq.generated, 0))
        self._release(seq)

    def _fail(self, handle: JobHandle, error: Exception) -> None:
        """Fail one job: free all its slots, forget its waiting choices, tell its client."""
        for seq in [s for s in self._active if s.handle is handle]:
            self._release(seq)
        self._waiting = deque(w for w in self._waiting if w.handle is not handle)
        self._emit(handle, JobFailed(error))

    def _release(self, seq: _Sequence) -> None:
        llama_cpp.llama_memory_seq_rm(self._memory, seq.slot, -1, -1)
        seq.sampler.free()
        self._active.remove(seq)
        self._free_slots.append(seq.slot)

    def _emit(self, handle: JobHandle, event: Event) -> None:
        self._outbox.setdefault(handle, []).append(event)

    def _flush(self) -> None:
        if not self._outbox:
            return
        outbox, self._outbox = self._outbox, {}
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[JobHandle, list[Event]]]] = {}
        for handle, events in outbox.items():
            if not handle.cancelled:
                by_loop.setdefault(handle.loop, []).append((handle, events))
        for loop, deliveries in by_loop.items():
            try:
                loop.call_soon_threadsafe(_deliver, deliveries)
            except RuntimeError:  # the loop closed (server shutting down)
                pass


def _deliver(deliveries: list[tuple[JobHandle, list[Event]]]) -> None:
    for handle, events in deliveries:
        handle.deliver(events)
