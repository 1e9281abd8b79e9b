"""llama.cpp sampler chains built from `SamplingParams`.

The order follows llama.cpp's common defaults: logit bias, penalties, then the truncation
filters (top-k, typical, top-p, min-p), temperature and the final random draw. A filter left at
its neutral value is not added, so plain requests run the shortest chain.
"""

from __future__ import annotations

import ctypes
import random
from collections.abc import Callable
from dataclasses import dataclass

import llama_cpp
import numpy as np

from backends.grammar import CompiledGrammar, GrammarState
from backends.jobs import MASK_LIST_LIMIT, SamplingParams
from grammars.unique_items import GuardState, UniqueItemsGuard

NO_TOKEN = -1  # what `sample` returns when the grammar leaves nothing to sample
_NEG_INF = float("-inf")

# Under a uniqueItems guard: how many refused draws in a row end the choice (a model stuck on
# repeating an item; the answer's check then reports it).
_GUARD_REDRAWS = 256

# Greedy under a grammar that rejects the best token: the next most likely ones are checked one
# by one (about 10 us each) before the grammar goes over the whole vocabulary (about 20 ms for
# SmolLM2's 49k tokens inside a JSON string, 130 ms for Gemma 3's 262k).
_GREEDY_WINDOW = 32

_NO_SEED = 0xFFFFFFFF  # LLAMA_DEFAULT_SEED: llama.cpp would pick a random seed


def choice_seed(seed: int | None, choice: int) -> int:
    """A 32-bit seed per choice: the same request seed gives the same texts, choice by choice."""
    if seed is None:
        return random.getrandbits(32) % _NO_SEED
    return (seed + choice) % _NO_SEED


class Candidates:
    """A full-vocabulary candidate array, reused for every grammar-constrained draw. Only the
    scheduler thread samples, so one per engine serves all sequences."""

    def __init__(self, n_vocab: int):
        self.data = np.zeros(n_vocab, dtype=[("id", np.int32), ("logit", np.float32), ("p", np.float32)])
        self._ids = np.arange(n_vocab, dtype=np.int32)
        pointer = self.data.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data))
        self.array = llama_cpp.llama_token_data_array(pointer, n_vocab, -1, False)

    def fill(self, logits: np.ndarray) -> llama_cpp.llama_token_data_array:
        self.data["id"] = self._ids
        self.data["logit"] = logits
        self.data["p"] = 0.0
        self.array.size, self.array.selected, self.array.sorted = len(self._ids), -1, False
        return self.array

    def active(self) -> tuple[np.ndarray, np.ndarray]:
        """The ids and logits of the tokens a chain left drawable (finite logits in its window)."""
        kept = self.data[: self.array.size]
        logits = kept["logit"]
        # column by column: a boolean index into the structured rows copies them whole, about
        # 5 ms per token over a 262k vocabulary; with nothing ruled out, views and no copy at all
        drawable = np.flatnonzero(logits > _NEG_INF)
        if len(drawable) == len(logits):
            return kept["id"], logits
        return kept["id"][drawable], logits[drawable]

    def selected(self) -> int:
        """The token the chain selected, or NO_TOKEN when it had only rejected tokens to pick."""
        row = self.data[self.array.selected]
        return NO_TOKEN if row["logit"] == _NEG_INF else int(row["id"])


@dataclass(frozen=True, slots=True)
class SamplingView:
    logprob: float | None  # the drawn token under the distribution after the filters
    active_count: int
    active_ids: np.ndarray | None


class SamplerChain:
    """One choice's sampler chain; owns the llama.cpp object and frees it.

    Plain greedy decoding (temperature 0, no penalties, no mirostat) skips the chain: llama.cpp's
    sampling copies the whole vocabulary into a candidate array per token, while the argmax of
    the logits row, with the logit bias added in place, picks the same token (the first
    maximum) in a fraction of the time.

    Under a grammar, the token is drawn as usual and then checked against the grammar; only a
    rejected token costs a second draw from the candidates the grammar allows (as llama.cpp's
    own sampler does), so constrained decoding stays close to free decoding in speed.
    """

    __slots__ = ("handle", "_greedy", "_point_mass", "_n_vocab", "_bias_tokens", "_bias_values", "_grammar",
                 "_candidates", "_eog", "_guard", "_guarded", "_guarded_for", "_token_bytes")

    def __init__(
        self,
        params: SamplingParams,
        *,
        seed: int,
        n_vocab: int,
        eog_tokens: tuple[int, ...],
        penalty_window: int,
        grammar: CompiledGrammar | None = None,
        candidates: Candidates | None = None,
        guard: UniqueItemsGuard | None = None,
        token_bytes: Callable[[int], bytes] | None = None,
    ):
        self._grammar: GrammarState | None = None
        # uniqueItems: a token the grammar allows may still repeat an item (checked on its bytes)
        self._guard: GuardState | None = guard.start() if guard is not None and grammar is not None else None
        self._guarded: GuardState | None = None  # the guard's state after the token last approved
        self._guarded_for = NO_TOKEN
        self._token_bytes = token_bytes
        if self._guard is not None and token_bytes is None:
            raise ValueError("a guard needs the tokens' bytes")
        self._candidates = candidates
        self._eog = frozenset(eog_tokens)
        bias = list(params.logit_bias)
        if params.ignore_eos:
            bias.extend((token, float("-inf")) for token in eog_tokens)
        self._n_vocab = n_vocab
        self._point_mass = params.temperature <= 0.0 and params.mirostat_target is None  # always the best token
        self._greedy = self._point_mass and not params.uses_penalties
        if grammar is not None:
            if candidates is None:
                raise ValueError("sampling under a grammar needs a candidate array")
            self._grammar = grammar.start()
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
        """Sample from the logits of batch row `output_index` and accept the token; NO_TOKEN
        when a grammar allows nothing more (it is complete and ending is ruled out)."""
        if self._grammar is not None:
            return self._sample_under_grammar(ctx, output_index, self._grammar)
        if not self._greedy:
            return llama_cpp.llama_sampler_sample(self.handle, ctx, output_index)
        return int(self._biased_logits(ctx, output_index).argmax())

    def sample_observed(self, ctx: llama_cpp.llama_context_p, output_index: int,
                        with_ids: bool) -> tuple[int, SamplingView]:
        """`sample`, and what the sampler drew from: the token's log-probability after the filters,
        how many tokens were drawable, and (`with_ids`) which. Under a grammar, the grammar is
        applied before the draw so that the view is exact (the plain path checks after)."""
        if self._point_mass:
            token = self.sample(ctx, output_index)
            ids = np.array([token], dtype=np.uint32) if with_ids and token != NO_TOKEN else None
            return token, SamplingView(0.0, 1, ids)
        candidates = self._candidates
        assert candidates is not None, "observed sampling needs a candidate array"
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, output_index), shape=(self._n_vocab,))
        array = candidates.fill(logits)
        if self._grammar is not None:
            self._grammar.constrain(array)
        token = self._draw_approved(candidates)
        if token == NO_TOKEN:
            return token, SamplingView(None, 0, None)
        ids, kept_logits = candidates.active()
        top = kept_logits.max()
        log_total = float(top + np.log(np.exp(kept_logits - top).sum(dtype=np.float64)))
        chosen = float(candidates.data["logit"][array.selected]) - log_total
        listed = np.sort(ids).astype(np.uint32) if with_ids and len(ids) <= MASK_LIST_LIMIT else None
        llama_cpp.llama_sampler_accept(self.handle, token)
        self._take(token)
        return token, SamplingView(chosen, len(ids), listed)

    def _biased_logits(self, ctx: llama_cpp.llama_context_p, output_index: int) -> np.ndarray:
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, output_index), shape=(self._n_vocab,))
        if self._bias_tokens.size:
            logits[self._bias_tokens] += self._bias_values  # the row is ours until the next decode
        return logits

    def _sample_under_grammar(self, ctx: llama_cpp.llama_context_p, output_index: int, grammar: GrammarState) -> int:
        candidates = self._candidates
        assert candidates is not None
        if self._greedy:
            logits = self._biased_logits(ctx, output_index)
            token = int(logits.argmax())
            if not (grammar.allows(token) and (self._guard is None or self._approves(token))):
                token = self._best_allowed_near_top(logits, token, grammar)
            if token == NO_TOKEN:
                grammar.constrain(candidates.fill(logits))
                column = candidates.data["logit"]  # the grammar keeps the order
                while True:
                    best = int(column.argmax())
                    if column[best] == _NEG_INF:
                        token = NO_TOKEN
                        break
                    if self._approves(best):
                        token = best
                        break
                    column[best] = _NEG_INF
        else:
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, output_index), shape=(self._n_vocab,))
            llama_cpp.llama_sampler_apply(self.handle, ctypes.byref(candidates.fill(logits)))
            token = candidates.selected()
            if token == NO_TOKEN or not (grammar.allows(token) and (self._guard is None or self._approves(token))):
                grammar.constrain(candidates.fill(logits))
                if candidates.data["logit"].max() == _NEG_INF:
                    return NO_TOKEN
                token = self._draw_approved(candidates)
            if token != NO_TOKEN:
                llama_cpp.llama_sampler_accept(self.handle, token)
        self._take(token)
        return token

    def _best_allowed_near_top(self, logits: np.ndarray, rejected: int, grammar: GrammarState) -> int:
        """The token that greedy decoding under the grammar (and the guard) takes, looked for among
        the _GREEDY_WINDOW most likely in argmax's order (higher logit first, then lower id);
        NO_TOKEN unless one is allowed whose logit is above every token outside the window (then
        it is the best allowed overall, and the whole vocabulary need not be checked)."""
        if len(logits) <= _GREEDY_WINDOW:
            return NO_TOKEN
        window = np.argpartition(logits, -_GREEDY_WINDOW)[-_GREEDY_WINDOW:]
        values = logits[window]
        order = np.lexsort((window, -values))
        floor = values[order[-1]]  # no token outside the window is above it
        for index in order:
            token = int(window[index])
            if values[index] <= floor:
                return NO_TOKEN
            if token != rejected and grammar.allows(token) and self._approves(token):
                return token
        return NO_TOKEN

    def _approves(self, token: int) -> bool:
        """Whether the guard (if any) lets `token` follow; its next state waits in `_guarded`."""
        guard = self._guard
        if guard is None or token in self._eog:  # an ending token: nothing more to read
            return True
        assert self._token_bytes is not None
        self._guarded, self._guarded_for = guard.advance(self._token_bytes(token)), token
        return self._guarded is not None

    def _draw_approved(self, candidates: Candidates) -> int:
        """Draw from the candidates (the grammar applied) until the guard approves the token; each
        refused one is ruled out and the draw made again."""
        allowed = candidates.data["logit"].copy() if self._guard is not None else None
        for _ in range(_GUARD_REDRAWS):
            llama_cpp.llama_sampler_apply(self.handle, ctypes.byref(candidates.array))
            token = candidates.selected()
            if token == NO_TOKEN or allowed is None or self._approves(token):
                return token
            allowed[token] = _NEG_INF
            candidates.fill(allowed)
            if allowed.max() == _NEG_INF:
                return NO_TOKEN
        return NO_TOKEN

    def _take(self, token: int) -> None:
        """Advance the grammar and the guard past the token drawn (NO_TOKEN: nothing)."""
        if token == NO_TOKEN:
            return
        if self._grammar is not None and token not in self._eog:
            self._grammar.accept(token)
        if self._guard is not None and token not in self._eog:
            if self._guarded_for != token:  # others were asked since
                approved = self._approves(token)
                assert approved, "the guard refused a token it had let through"
            self._guard = self._guarded

    def accept_forced(self, token: int) -> bool:
        """Take a token chosen for the sampler (a forced reasoning close): the chain and the
        grammar advance as if it had been drawn. False when the grammar rejects it."""
        if self._grammar is not None and token not in self._eog:
            if not self._grammar.allows(token) or not self._approves(token):
                return False
            self._grammar.accept(token)
            if self._guard is not None:
                self._guard = self._guarded
        if self.handle:
            llama_cpp.llama_sampler_accept(self.handle, token)
        return True

    def free(self) -> None:
        if self.handle:
            llama_cpp.llama_sampler_free(self.handle)
            self.handle = None
        if self._grammar is not None:
            self._grammar.close()
            self._grammar = None

