"""Pooled embeddings on llama.cpp: a context of their own beside a model's generation context.

An embedding context has its own small KV memory, so embedding inputs never evict the prompts a
generation context keeps cached, and its own pooling: the GGUF's (`{arch}.pooling_type`, as
dedicated embedding models carry: mean, CLS, last, rank), else last-token pooling for a generative
model. Dedicated models pool inside llama.cpp. A generative model is read at its last token:
llama.cpp outputs every token of an embedding decode (and a generative model's output head costs
262k logits a row on Gemma 3), so the inputs but their last tokens are decoded with embeddings
off, then the last tokens alone with embeddings on (their logits come with them, for
`return_logits`; a ranking model's logits are its class scores). Inputs are packed whole into
batches, one sequence id each; the memory is cleared after each batch, so nothing is cached
between batches. Not thread-safe: one thread (the engine's scheduler) drives a context.
"""

from __future__ import annotations

import ctypes
import enum
from collections.abc import Sequence

import llama_cpp
import numpy as np

from backends.llama_model import LlamaModel, ModelLoadError
from backends.model_cache import per_model


class Pooling(enum.IntEnum):
    """llama.cpp's pooling types, by the names configs use."""

    none = llama_cpp.LLAMA_POOLING_TYPE_NONE
    mean = llama_cpp.LLAMA_POOLING_TYPE_MEAN
    cls = llama_cpp.LLAMA_POOLING_TYPE_CLS
    last = llama_cpp.LLAMA_POOLING_TYPE_LAST
    rank = llama_cpp.LLAMA_POOLING_TYPE_RANK


class EmbeddingError(ValueError):
    """An input the context cannot embed (empty, or longer than the context), or logits it cannot
    give, with the numbers; `param` names the request field at fault."""

    def __init__(self, message: str, param: str = "input"):
        super().__init__(message)
        self.param = param


def model_pooling(model: LlamaModel) -> Pooling | None:
    """The pooling the GGUF declares (dedicated embedding and reranking models do); None for a
    generative model, which declares none."""
    arch = model.metadata("general.architecture")
    value = model.metadata(f"{arch}.pooling_type") if arch else None
    if value is None or not value.lstrip("-").isdigit():
        return None
    pooling = int(value)
    return Pooling(pooling) if pooling in Pooling._value2member_map_ and pooling != Pooling.none else None


declared_pooling = per_model(lambda model: model_pooling(model) or Pooling.none)
"""The pooling a model declares (`Pooling.none` for a generative model), read once per model."""


class EmbeddingContext:
    """Embeds token sequences with `pooling` (default: the model's own, else last-token)."""

    def __init__(self, model: LlamaModel, *, ctx_size: int, threads: int, max_inputs: int = 64,
                 pooling: Pooling | None = None):
        if max_inputs < 1 or ctx_size % max_inputs:
            # llama.cpp reserves its graph for the context's tokens split evenly over the sequences
            # and aborts the process when they do not divide
            raise ValueError(f"max_inputs ({max_inputs}) must divide the embedding context ({ctx_size} tokens)")
        self.model = model
        declared = model_pooling(model)
        self.pooling = pooling or declared or Pooling.last
        # llama.cpp pools for models that declare pooling; a generative model is read at its last token
        self._pools_inside = declared is not None
        if not self._pools_inside and self.pooling != Pooling.last:
            raise EmbeddingError(f"a generative model embeds by its last token; {self.pooling.name} pooling needs a "
                                 "model that declares it", param="model")
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = ctx_size
        # a non-causal model (BERT) must see each input whole in one micro-batch
        params.n_batch = params.n_ubatch = ctx_size
        params.n_seq_max = max_inputs
        params.n_threads = params.n_threads_batch = threads
        params.embeddings = True
        params.pooling_type = int(self.pooling if self._pools_inside else Pooling.none)
        params.kv_unified = True  # the batch's inputs share the memory; it is cleared after each batch
        params.no_perf = True
        self._ctx = llama_cpp.llama_init_from_model(model.handle, params)
        if not self._ctx:
            raise ModelLoadError(f"cannot create an embedding context of {ctx_size} tokens for {model.path}")
        self.ctx_size = llama_cpp.llama_n_ctx(self._ctx)
        self.max_inputs = max_inputs
        # a ranking model pools to its classes' scores (one for a cross-encoder; yes and no for a
        # rank-pooled Qwen3-Reranker), an embedding model to a vector
        self.dimensions = (llama_cpp.llama_model_n_cls_out(model.handle) if self.pooling == Pooling.rank
                           else llama_cpp.llama_model_n_embd(model.handle))
        # the scores `logits` reads: a generative model's vocabulary at the last position, a ranking
        # model's classes; a model that pools hidden states (mean, CLS, last inside llama.cpp) has none
        self.logit_count = (model.n_vocab if not self._pools_inside
                            else self.dimensions if self.pooling == Pooling.rank else 0)
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(self.ctx_size, 0, 1)

    def close(self) -> None:
        if self._ctx:
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ctx)
            self._ctx = None

    def check_logits(self, ids: Sequence[int]) -> None:
        """Raises `EmbeddingError` when this context cannot give the logits `ids` name."""
        if not self.logit_count:
            raise EmbeddingError(f"this model pools its hidden states by {self.pooling.name}; it has no logits to "
                                 "return (return_logits needs a generative model or a ranking model)",
                                 "return_logits")
        outside = [i for i in ids if not 0 <= i < self.logit_count]
        if outside:
            raise EmbeddingError(f"return_logits names {outside[0]}, outside this model's {self.logit_count} "
                                 f"{'classes' if self._pools_inside else 'vocabulary entries'} "
                                 f"(0 to {self.logit_count - 1})", "return_logits")

    def check(self, tokens: Sequence[int]) -> None:
        """Raises `EmbeddingError` for an input this context cannot take."""
        if not tokens:
            raise EmbeddingError("an input is empty: it has no tokens to embed")
        if len(tokens) > self.ctx_size:
            raise EmbeddingError(f"an input has {len(tokens)} tokens; this model embeds at most {self.ctx_size} "
                                 "tokens per input")

    def batches(self, inputs: Sequence[Sequence[int]]) -> list[list[int]]:
        """The input indices packed into batches: in order, each batch within the context's tokens
        and sequence ids."""
        packed: list[list[int]] = []
        used = 0
        for index, tokens in enumerate(inputs):
            self.check(tokens)
            if not packed or used + len(tokens) > self.ctx_size or len(packed[-1]) >= self.max_inputs:
                packed.append([])
                used = 0
            packed[-1].append(index)
            used += len(tokens)
        return packed

    def embed_batch(self, inputs: Sequence[Sequence[int]],
                    logits: Sequence[tuple[int, ...] | None] | None = None) -> list[np.ndarray]:
        """One decode of inputs that fit together (see `batches`): their pooled vectors (float32, as
        the model computes them, not normalised), one each, or where `logits[i]` names ids (an
        empty tuple: all), input i's logits of those ids instead (see `check_logits`)."""
        asks = logits or [None] * len(inputs)
        try:
            if self._pools_inside:
                self._decode([(seq, 0, tokens) for seq, tokens in enumerate(inputs)], outputs=True)
                rows = [self._row(llama_cpp.llama_get_embeddings_seq(self._ctx, seq), self.dimensions)
                        for seq in range(len(inputs))]
                return [row.copy() if ids is None else _select(row, ids) for row, ids in zip(rows, asks, strict=True)]
            heads = [(seq, 0, tokens[:-1]) for seq, tokens in enumerate(inputs) if len(tokens) > 1]
            if heads:
                llama_cpp.llama_set_embeddings(self._ctx, False)
                self._decode(heads, outputs=False)
                llama_cpp.llama_set_embeddings(self._ctx, True)
            self._decode([(seq, len(tokens) - 1, tokens[-1:]) for seq, tokens in enumerate(inputs)], outputs=True)
            return [self._vector(llama_cpp.llama_get_embeddings_ith(self._ctx, row)) if ids is None
                    else _select(self._row(llama_cpp.llama_get_logits_ith(self._ctx, row), self.logit_count), ids)
                    for row, ids in enumerate(asks)]
        finally:
            llama_cpp.llama_set_embeddings(self._ctx, True)
            llama_cpp.llama_memory_clear(self._memory, True)

    def _decode(self, parts: list[tuple[int, int, Sequence[int]]], *, outputs: bool) -> None:
        """Decode (sequence id, first position, tokens) parts in one batch."""
        batch, row = self._batch, 0
        for seq, start, tokens in parts:
            for offset, token in enumerate(tokens):
                batch.token[row] = token
                batch.pos[row] = start + offset
                batch.n_seq_id[row] = 1
                batch.seq_id[row][0] = seq
                batch.logits[row] = outputs
                row += 1
        batch.n_tokens = row
        status = llama_cpp.llama_decode(self._ctx, batch)
        if status != 0:
            raise RuntimeError(f"llama_decode failed with status {status} on an embedding batch")

    def _vector(self, pointer: ctypes.POINTER(ctypes.c_float) | None) -> np.ndarray:  # type: ignore[valid-type]
        return self._row(pointer, self.dimensions).copy()

    @staticmethod
    def _row(pointer: ctypes.POINTER(ctypes.c_float) | None, size: int) -> np.ndarray:  # type: ignore[valid-type]
        """A view of llama.cpp's output row (valid until the next decode)."""
        if not pointer:
            raise RuntimeError("llama.cpp returned no output for an embedding input")
        return np.ctypeslib.as_array(ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float)), shape=(size,))


def _select(row: np.ndarray, ids: tuple[int, ...]) -> np.ndarray:
    """A copy of `row`'s entries `ids` (all of them for an empty tuple)."""
    return row[list(ids)] if ids else row.copy()
