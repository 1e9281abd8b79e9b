"""llama.cpp sampler chains built from `SamplingParams`.

The order follows llama.cpp's common defaults: logit bias, penalties, then the truncation
filters (top-k, typical, top-p, min-p), temperature and the final random draw. A filter left at
its neutral value is not added, so plain requests run the shortest chain.
"""

from __future__ import annotations

import random

import llama_cpp
import numpy as np

from backends.jobs import SamplingParams

_NO_SEED = 0xFFFFFFFF  # LLAMA_DEFAULT_SEED: llama.cpp would pick a random seed


def choice_seed(seed: int | None, choice: int) -> int:
    """A 32-bit seed per choice: the same request seed gives the same texts, choice by choice."""
    if seed is None:
        return random.getrandbits(32) % _NO_SEED
    return (seed + choice) % _NO_SEED


class SamplerChain:
    """One choice's sampler chain; owns the llama.cpp object and frees it.

    Plain greedy decoding (temperature 0, no penalties, no mirostat) skips the chain: llama.cpp's
    sampling copies the whole vocabulary into a candidate array per token, while the argmax of
    the logits row, with the logit bias added in place, picks the same token (the first
    maximum) in a fraction of the time.
    """

    __slots__ = ("handle", "_greedy", "_n_vocab", "_bias_tokens", "_bias_values")

    def __init__(
        self,
        params: SamplingParams,
        *,
        seed: int,
        n_vocab: int,
        eog_tokens: tuple[int, ...],
        penalty_window: int,
    ):
        bias = list(params.logit_bias)
        if params.ignore_eos:
            bias.extend((token, float("-inf")) for token in eog_tokens)
        self._n_vocab = n_vocab
        self._greedy = params.temperature <= 0.0 and not params.uses_penalties and params.mirostat_target is None
        if self._greedy:
            self.handle = None
            self._bias_tokens = np.array([t for t, _ in bias], dtype=np.int64)
            self._bias_values = np.array([b for _, b in bias], dtype=np.float32)
            return
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        self.handle = chain

        def add(sampler: llama_cpp.llama_sampler_p) -> None:
            llama_cpp.llama_sampler_chain_add(chain, sampler)
        if bias:
            array = (llama_cpp.llama_logit_bias * len(bias))(*((t, b) for t, b in bias))
            add(llama_cpp.llama_sampler_init_logit_bias(n_vocab, len(bias), array))
        if params.uses_penalties:
            add(
                llama_cpp.llama_sampler_init_penalties(
                    n_vocab,
                    penalty_window,
                    params.repetition_penalty,
                    params.frequency_penalty,
                    params.presence_penalty,
                )
            )
        if params.mirostat_target is not None:
            add(llama_cpp.llama_sampler_init_temp(params.temperature))
            add(llama_cpp.llama_sampler_init_mirostat_v2(seed, params.mirostat_target, params.mirostat_lr))
            return
        if params.temperature <= 0.0:
            add(llama_cpp.llama_sampler_init_greedy())
            return
        if params.top_k > 0:
            add(llama_cpp.llama_sampler_init_top_k(params.top_k))
        if params.typical_p < 1.0:
            add(llama_cpp.llama_sampler_init_typical(params.typical_p, 1))
        if params.top_p < 1.0:
            add(llama_cpp.llama_sampler_init_top_p(params.top_p, 1))
        if params.min_p > 0.0:
            add(llama_cpp.llama_sampler_init_min_p(params.min_p, 1))
        add(llama_cpp.llama_sampler_init_temp(params.temperature))
        add(llama_cpp.llama_sampler_init_dist(seed))

    def sample(self, ctx: llama_cpp.llama_context_p, output_index: int) -> int:
        """Sample from the logits of batch row `output_index` and accept the token."""
        if not self._greedy:
            return llama_cpp.llama_sampler_sample(self.handle, ctx, output_index)
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, output_index), shape=(self._n_vocab,))
        if self._bias_tokens.size:
            logits[self._bias_tokens] += self._bias_values  # the row is ours until the next decode
        return int(logits.argmax())

    def free(self) -> None:
        if self.handle:
            llama_cpp.llama_sampler_free(self.handle)
            self.handle = None

