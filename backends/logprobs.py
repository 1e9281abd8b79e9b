"""Log-probabilities from a logits row, for the jobs that ask for them.

The row belongs to llama.cpp and is valid until the next decode; one engine-wide buffer holds
its log-softmax while a record is built, so a request with logprobs allocates no vocabulary-sized
array per token, and a request without them costs nothing.
"""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np

from backends.jobs import TokenLogprob

BLOCK = 256  # vocabulary entries per block in the top alternatives' search


class LogprobComputer:
    """Turns logits rows into `TokenLogprob` records (the scheduler thread's only)."""

    def __init__(self, n_vocab: int):
        self._n_vocab = n_vocab
        # padded to whole blocks of BLOCK with -inf, for the top alternatives' search (`_top`)
        self._padded = np.full(-(-n_vocab // BLOCK) * BLOCK, -np.inf, dtype=np.float32)
        self._log_softmax = self._padded[:n_vocab]
        self._blocks = self._padded.reshape(-1, BLOCK)
        self._block_max = np.empty(len(self._blocks), dtype=np.float32)
        self._scratch = np.empty(n_vocab, dtype=np.float32)

    def row(self, ctx: llama_cpp.llama_context_p, output_index: int) -> np.ndarray:
        pointer = llama_cpp.llama_get_logits_ith(ctx, output_index)
        return np.ctypeslib.as_array(ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float)), shape=(self._n_vocab,))

    def load(self, logits: np.ndarray) -> None:
        """Take the model's distribution from a row before sampling may bias it in place."""
        out = self._log_softmax
        np.subtract(logits, logits.max(), out=out)
        shift = np.log(np.exp(out, out=self._scratch).sum(dtype=np.float64))
        out -= np.float32(shift)

    def record(self, token: int, top: int, *, sampling_logprob: float | None = None, active_count: int | None = None,
               active_ids: np.ndarray | None = None) -> TokenLogprob:
        """`token` under the loaded distribution, with the `top` most likely alternatives, and
        what the sampler saw when it drew the token (if observed)."""
        return TokenLogprob(token, float(self._log_softmax[token]), self._top(top), sampling_logprob, active_count,
                            active_ids)

    def _top(self, count: int) -> tuple[tuple[int, float], ...]:
        """The `count` most likely tokens, best first. An argpartition of the whole vocabulary
        takes 0.4 ms per token on 49k entries (this, 0.05 ms) (and allocates an index array as large); the `count`
        best tokens lie in the `count` blocks with the highest maxima, so only those are searched."""
        if count <= 0:
            return ()
        values = self._log_softmax
        maxima = np.max(self._blocks, axis=1, out=self._block_max)
        count = min(count, self._n_vocab)
        blocks = np.argpartition(maxima, -count)[-count:] if count < len(maxima) else np.arange(len(maxima))
        candidates = (blocks[:, None] * BLOCK + np.arange(BLOCK)).ravel()
        candidates = candidates[candidates < self._n_vocab]
        found = values[candidates]
        best = candidates[np.argsort(-found, kind="stable")[:count]]
        return tuple((int(t), float(values[t])) for t in best)
