"""Embedding jobs waiting on a model's embedding context, run by the engine's scheduler thread.

The context is made on the first embedding job, so a model that is only asked to generate never
pays for it. Each scheduler step runs at most one embedding batch (the waiting inputs, oldest
first, as many as fit the context), between generation steps: a large embedding request and
generating streams take turns instead of waiting for each other.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from backends.embedder import EmbeddingContext, EmbeddingError, Pooling
from backends.jobs import Embedded, EmbeddingJob, Event, JobFailed, JobHandle
from backends.llama_model import LlamaModel

Emit = Callable[[JobHandle, Event], None]


@dataclass(frozen=True)
class EmbeddingOptions:
    ctx_size: int = 2048  # tokens one batch holds (each input fits whole), capped by the model's training context
    max_inputs: int = 64  # inputs one batch holds; must divide ctx_size
    pooling: Pooling | None = None  # None: the model's own (last-token for a generative model)


class EmbeddingQueue:
    def __init__(self, model: LlamaModel, options: EmbeddingOptions, threads: int):
        self._model = model
        self._options = options
        self._threads = threads
        self._context: EmbeddingContext | None = None
        self._waiting: deque[tuple[JobHandle, int]] = deque()  # (job, input index), oldest first

    @property
    def pending(self) -> bool:
        return bool(self._waiting)

    @property
    def waiting(self) -> int:
        """Inputs queued and not embedded yet (read from other threads: a size, safe under the GIL)."""
        return len(self._waiting)

    @property
    def input_limit(self) -> int:
        """The most tokens one input may hold: the embedding context's size."""
        size = min(self._options.ctx_size, self._model.n_ctx_train or self._options.ctx_size)
        return size - size % self._options.max_inputs

    def context(self) -> EmbeddingContext:
        if self._context is None:
            self._context = EmbeddingContext(self._model, ctx_size=self.input_limit, threads=self._threads,
                                             max_inputs=self._options.max_inputs, pooling=self._options.pooling)
        return self._context

    def add(self, handle: JobHandle, emit: Emit) -> None:
        """Queue a job's inputs, or fail it at once when one cannot be embedded."""
        job = handle.job
        assert isinstance(job, EmbeddingJob)
        try:
            context = self.context()
            for tokens in job.inputs:
                context.check(tokens)
            if job.logits is not None:
                context.check_logits(job.logits)
        except (EmbeddingError, ValueError) as error:
            emit(handle, JobFailed(error))
            return
        self._waiting.extend((handle, index) for index in range(len(job.inputs)))

    def drop_cancelled(self) -> None:
        if any(handle.cancelled for handle, _ in self._waiting):
            self._waiting = deque(item for item in self._waiting if not item[0].cancelled)

    def drop(self, handle: JobHandle) -> None:
        self._waiting = deque(item for item in self._waiting if item[0] is not handle)

    def handles(self) -> set[JobHandle]:
        return {handle for handle, _ in list(self._waiting)}

    def fail_all(self, error: Exception, emit: Emit) -> None:
        for handle in {handle for handle, _ in self._waiting}:
            emit(handle, JobFailed(error))
        self._waiting.clear()

    def step(self, emit: Emit) -> None:
        """Embed one batch of the waiting inputs; a failed batch fails the jobs it held."""
        context = self.context()
        taken: list[tuple[JobHandle, int]] = []
        used = 0
        while self._waiting and len(taken) < context.max_inputs:
            handle, index = self._waiting[0]
            size = len(handle.job.inputs[index])  # type: ignore[union-attr]
            if taken and used + size > context.ctx_size:
                break
            taken.append(self._waiting.popleft())
            used += size
        inputs = [handle.job.inputs[index] for handle, index in taken]  # type: ignore[union-attr]
        logits = [handle.job.logits for handle, _ in taken]  # type: ignore[union-attr]
        try:
            vectors = context.embed_batch(inputs, logits if any(ids is not None for ids in logits) else None)
        except Exception as error:  # noqa: BLE001 - this batch's jobs fail, the scheduler goes on
            for handle in {handle for handle, _ in taken}:
                self.drop(handle)
                emit(handle, JobFailed(error))
            return
        for (handle, index), tokens, vector in zip(taken, inputs, vectors, strict=True):
            emit(handle, Embedded(index, vector, len(tokens)))

    def close(self) -> None:
        if self._context is not None:
            self._context.close()
            self._context = None
