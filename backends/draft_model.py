"""Drafts from a small model of the same family (`--draft-model`): it runs on a context of its own
beside the target, greedily proposes the next tokens of every decoding stream, and the target
checks them in its normal batched step (`Engine._check_draft`), keeping a drafted token only where
it samples that very token, so output is what decoding one token at a time gives: greedy
identical, a seeded sampler drawing as often and the same.

One draft step serves every stream: the streams' new tokens (their prompt the first time, then
what the target accepted) go into the draft's cache in one batch, then each draft token of all
streams in one batch more. The draft's cache keeps what it has seen per slot, so a stream's next
proposal only feeds what changed (a prefix shared with the slot's previous request too).

A draft stops early where its own top probability falls below `P_MIN` (llama.cpp's default for
`--draft-p-min`): there it guesses, and a guess costs the target a row. Per stream the draft length
doubles while drafts are kept whole and shrinks to what was kept when not; drafts that keep
nothing make the stream wait longer before the next (up to `MAX_MODEL_COOLDOWN` steps), so a useless
draft model costs about nothing after a few steps. With the target's cache split into a stream per
slot, the streams drafting in one step draft as many tokens each (see `DraftRunner.prepare`): the
target then checks them all in one pass. Whether the draft model runs at all is timed by
`backends.draft_payoff`.

A prompt-lookup draft (`--draft auto`) and a draft model together: the lookup wins when it has a
proposal (it costs nothing and, when it matches, is usually longer); a request's `prediction` wins
over both (it is what the caller knows the output repeats).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence as Seq
from pathlib import Path
from typing import TYPE_CHECKING, Any

import llama_cpp
import numpy as np

from backends.drafting import LookupDrafter
from backends.ggml_native import native_function
from backends.llama_model import LlamaModel, ModelLoadError, ModelOptions
from backends.prefix import common_prefix_length

if TYPE_CHECKING:
    from backends.prefix import Slot

P_MIN = 0.75  # llama.cpp's --draft-p-min default
TAIL_CUT = 20.0  # logits this far below a row's top are left out of its probability (see DraftRunner._pick)
NEAR_LIMIT = 1024  # near logits gathered for a row's sum; a row with more is flat, summed in place
MAX_MODEL_DRAFT = 16  # llama.cpp's --draft-max default
FIRST_DRAFT = 4
# A draft the model is unsure of after one token is a coin toss that costs a checked row (on a
# CPU nearly a token's decode): not proposed.
MIN_MODEL_DRAFT = 2
MAX_MODEL_COOLDOWN = 64  # steps: a useless draft costs a draft and a checked row about this seldom
ACCEPTANCE_DECAY = 0.8  # of a stream's earlier drafts in its acceptance, per draft
COST_WEIGHT = 0.1  # of each new timing in the draft's cost against a step of the model
VOCAB_SIZE_SLACK = 128  # llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE
FIRST_CHECKED_TOKEN = 5  # llama.cpp's SPEC_VOCAB_CHECK_START_TOKEN_ID: the first special tokens may differ


def incompatibility(target: LlamaModel, draft: LlamaModel) -> str | None:
    """Why `draft` cannot draft for `target` (its tokens would mean other text), or None. The checks
    llama.cpp's speculative decoding makes: the same tokenizer type, BOS and EOS, vocabulary sizes
    within 128 and the same text for every token both have."""
    t, d = target.vocab, draft.vocab
    if llama_cpp.llama_vocab_type(t) != llama_cpp.llama_vocab_type(d):
        return "its tokenizer is of another type"
    for name in ("bos", "eos"):
        own, other = (getattr(llama_cpp, f"llama_vocab_{name}")(v) for v in (t, d))
        if own != other:
            return f"its {name.upper()} token is {other}, the model's is {own}"
    if abs(target.n_vocab - draft.n_vocab) > VOCAB_SIZE_SLACK:
        return f"its vocabulary has {draft.n_vocab} tokens, the model's {target.n_vocab}"
    for token in range(FIRST_CHECKED_TOKEN, min(target.n_vocab, draft.n_vocab)):
        if llama_cpp.llama_vocab_get_text(t, token) != llama_cpp.llama_vocab_get_text(d, token):
            return (f"token {token} is {target.token_text(token)!r} in the model's vocabulary and "
                    f"{draft.token_text(token)!r} in the draft's")
    return None


def load_draft(target: LlamaModel, path: Path, options: ModelOptions) -> LlamaModel:
    """The draft model at `path` for `target`; ModelLoadError when it cannot load or cannot draft for it."""
    draft = LlamaModel(path, options)
    problem = incompatibility(target, draft)
    if problem is not None:
        draft.close()
        raise ModelLoadError(f"{path.name} cannot draft for {target.path.name}: {problem} (a draft model needs the "
                             "same vocabulary: a smaller model of the same family)")
    return draft


class DraftTrust:
    """How the draft model's latest drafts fared, over all streams: the drafts in a row that
    kept nothing, whichever stream they were for. A stream waits after a failed draft as long as
    this streak says, and a new stream starts as cautious (after drafts that kept nothing it
    waits before its first). And what a draft token costs against a step of the model, as
    measured (`cost`): the longest draft worth making follows from it (`best_length`)."""

    __slots__ = ("cost", "failures")

    def __init__(self) -> None:
        self.failures = 0  # drafts in a row that kept nothing
        self.cost = 0.0  # seconds of one draft decode / seconds of one step of the model (0: not measured yet)


def best_length(acceptance: float, cost: float) -> int:
    """The draft length that gives the most tokens per second, for a draft whose tokens are each
    kept with probability `acceptance` (while the ones before were) and cost `cost` steps of the
    model each: k drafted tokens give (1 - a^(k+1)) / (1 - a) tokens (the model's own included) for
    1 + k * cost steps. Drafts of several tokens cost the model a few rows more in its step: on a
    GPU next to nothing, on a CPU more (then drafts seldom pay at all, and `DraftPayoff` rests them)."""
    best, best_rate = MIN_MODEL_DRAFT, 0.0
    kept, tokens = 1.0, 1.0  # a^k and the tokens k drafted give
    for k in range(1, MAX_MODEL_DRAFT + 1):
        kept *= acceptance
        tokens += kept
        rate = tokens / (1.0 + k * cost)
        if k >= MIN_MODEL_DRAFT and rate > best_rate:
            best, best_rate = k, rate
    return best


class ModelDrafter:
    """One stream's drafts: what the shared `DraftRunner` prepared for it this step, or the
    prompt lookup's when that has one."""

    __slots__ = ("_kept", "_lookup", "_lost", "_ready", "_size", "_source", "_trust", "_wait", "matched", "slot")

    def __init__(self, slot: Slot, lookup: LookupDrafter | None, trust: DraftTrust | None = None):
        self.slot = slot
        self._lookup = lookup
        self._ready: tuple[int, ...] = ()
        self._source: LookupDrafter | None = None  # who proposed the draft being checked (None: the model)
        self._size = FIRST_DRAFT
        self._trust = trust if trust is not None else DraftTrust()
        self._wait = _cooldown(self._trust.failures)
        self.matched = 0  # drafted tokens the output kept (ChoiceFinished.draft_accepted)
        self._kept, self._lost = 0.0, 0.0  # drafted tokens kept, and drafts cut short, recent ones weighing most

    @staticmethod
    def allowed(decoding: int, prefilling: int) -> bool:
        return True

    def wanted(self, limit: int, model: bool = True) -> int:
        """How many tokens to ask the draft model for this step (0: none; always with `model`
        False: the draft model does not run this step); the lookup's draft is taken here when it
        has one."""
        self._ready, self._source = (), None
        if self._lookup is not None and (found := self._lookup.propose(limit)):
            self._ready, self._source = found, self._lookup
            return 0
        if not model:
            return 0
        if self._wait:
            self._wait -= 1
            return 0
        return min(self._size, limit)

    def prepared(self, draft: tuple[int, ...]) -> None:
        self._ready = draft

    def propose(self, limit: int) -> tuple[int, ...]:
        ready, self._ready = self._ready[:limit], ()
        return ready

    def observe(self, token: int) -> None:
        if self._lookup is not None:
            self._lookup.observe(token)

    def settle(self, drafted: int, accepted: int) -> None:
        self.matched += accepted
        if self._source is not None:
            self._source.settle(drafted, accepted)
            return
        # each drafted token kept (while the ones before were) or the one lost: a geometric
        # trial per token, with the recent drafts weighing most
        self._kept = self._kept * ACCEPTANCE_DECAY + accepted
        self._lost = self._lost * ACCEPTANCE_DECAY + (accepted < drafted)
        if accepted == drafted:
            self._size = min(self._size * 2, MAX_MODEL_DRAFT)
        else:
            self._size = max(MIN_MODEL_DRAFT, accepted + 1)
        if self._trust.cost > 0:  # no longer than pays for what a draft token costs here
            self._size = min(self._size, best_length(self._kept / (self._kept + self._lost), self._trust.cost))
        # One streak for all streams: eight streams failing together are eight failures. A draft
        # that kept less than half its tokens failed: its checked rows cost more than they gave.
        self._trust.failures = 0 if 2 * accepted >= drafted else self._trust.failures + 1
        self._wait = _cooldown(self._trust.failures)


def _cooldown(failures: int) -> int:
    """Steps without drafts after `failures` drafts in a row kept nothing."""
    return min(MAX_MODEL_COOLDOWN, 1 << failures) if failures else 0


class _Rows:
    """A numpy view's source over memory llama.cpp owns, by address (np.ctypeslib.as_array of a
    2-D shape builds a ctypes array type per call: more than the pick's own work on a GPU)."""

    __slots__ = ("__array_interface__",)

    def __init__(self, address: int, shape: tuple[int, int]):
        self.__array_interface__ = {"data": (address, False), "shape": shape, "typestr": "<f4", "version": 3}


def _logits_rows(ctx: llama_cpp.llama_context_p, count: int, n_vocab: int) -> np.ndarray:
    """The first `count` outputs of the context's last decode, as a (count, n_vocab) view."""
    address = native_function("llama_get_logits", ctypes.c_void_p, ctypes.c_void_p)(ctx)
    return np.asarray(_Rows(address, (count, n_vocab)))


class DraftRunner:
    """The draft model's context: one cache sequence per slot of the target, as the target's."""

    def __init__(self, draft: LlamaModel, *, n_ctx: int, parallel: int, batch_size: int, threads: int,
                 target_vocab: int):
        self.model = draft
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = batch_size
        params.n_seq_max = parallel
        params.n_threads = params.n_threads_batch = threads
        params.kv_unified = True  # a stream may grow past a slot's share, as the target's unified pool lets it
        params.no_perf = True
        self._ctx = llama_cpp.llama_init_from_model(draft.handle, params)
        if not self._ctx:
            raise ModelLoadError(f"cannot create a context of {n_ctx} tokens for the draft model {draft.path}")
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._n_ctx = n_ctx
        self._batch_size = batch_size
        self._batch = llama_cpp.llama_batch_init(batch_size, 0, 1)
        self._cached: list[list[int]] = [[] for _ in range(parallel)]  # tokens in the draft's cache, per slot
        self._vocab = min(draft.n_vocab, target_vocab)  # a drafted token must be one the target has
        self._rows = np.empty((parallel, draft.n_vocab), dtype=np.float32)  # a step's logits rows, when out of order
        self._near = np.empty((parallel, draft.n_vocab), dtype=np.bool_)  # which logits are near each row's top
        self._scratch = np.empty(draft.n_vocab, dtype=np.float32)  # one flat row's exp
        self.trust = DraftTrust()  # shared by the streams' drafters
        self.longest = 0  # the longest draft the last `prepare` made

    def set_threads(self, threads: int) -> None:
        llama_cpp.llama_set_n_threads(self._ctx, threads, threads)

    def prepare_for(self, sequences: Seq[Any], room: int, *, model: bool = True, equal: bool = False) -> None:
        """This step's proposals for every decoding stream (`backends.sequences.Sequence`, which
        imports this module) that drafts with the model, `room` rows at most each (`model` False:
        the prompt lookup's alone, the draft model does not pay here now; `equal`: the drafts all
        of one length, see `prepare`)."""
        streams = []
        for seq in sequences:
            drafter = seq.drafter
            if type(drafter) is not ModelDrafter or seq.prefilling or (seq.budget is not None and seq.budget.forced):
                continue
            limit = min(room, seq.max_tokens - seq.generated - 1)
            if limit > 0 and (count := drafter.wanted(limit, model)):
                streams.append((drafter, seq.slot.tokens, seq.last_token, count, limit))
        self.prepare(streams, equal=equal)

    def prepare(self, streams: Seq[tuple[ModelDrafter, list[int], int, int, int]], *, equal: bool = False) -> None:
        """Draft for each (drafter, tokens, fed, count, limit): `tokens` are what the target's slot
        holds before this step, `fed` the token the step feeds after them, `count` how many tokens
        the drafter wants, `limit` how many it may have.

        `equal` (the target's cache split into a stream per slot): every stream drafts as many
        tokens as the one that wants most (within its limit), and one unsure of its next token goes
        on while another is sure of its own. llama.cpp decodes a batch over several cache
        streams in passes of an equal number of rows per stream: drafts of three lengths would
        cost the target three passes over its weights for one step, and on a GPU a pass costs about
        a whole step while a few more rows cost next to nothing."""
        self.longest = 0
        wanted = [(drafter, tokens, fed, count) for drafter, tokens, fed, count, _ in streams
                  if count > 0 and len(tokens) + 1 + count < self._n_ctx]
        if not wanted:
            return
        equal = equal and len(wanted) > 1
        if equal:
            most = max(count for *_, count in wanted)
            limits = {id(drafter): limit for drafter, *_, limit in streams}
            wanted = [(drafter, tokens, fed, min(most, limits[id(drafter)])) for drafter, tokens, fed, _ in wanted]
        rows = self._catch_up(wanted)
        drafts: dict[int, list[int]] = {id(drafter): [] for drafter, *_ in wanted}
        going = [(drafter, len(tokens) + 1, count, row) for (drafter, tokens, _, count), row in zip(wanted, rows, strict=True)]
        while going:
            next_going = []
            n = 0
            picks = self._pick([row for *_, row in going])
            anyone_sure = equal and any(pick is not None and pick[1] for pick in picks)
            for (drafter, length, count, _), pick in zip(going, picks, strict=True):
                if pick is None or not (pick[1] or anyone_sure):
                    continue
                token = pick[0]
                draft = drafts[id(drafter)]
                draft.append(token)
                if len(draft) < count:
                    slot = drafter.slot.id
                    self._put(n, token, length + len(draft) - 1, slot, True)
                    self._cached[slot].append(token)
                    next_going.append((drafter, length, count, n))
                    n += 1
            if not next_going:
                break
            self._batch.n_tokens = n
            if llama_cpp.llama_decode(self._ctx, self._batch) != 0:
                self._forget([drafter for drafter, *_ in next_going])
                break
            going = next_going
        for drafter, *_ in wanted:
            draft = drafts[id(drafter)]
            if len(draft) >= MIN_MODEL_DRAFT:
                drafter.prepared(tuple(draft))
                self.longest = max(self.longest, len(draft))

    def _catch_up(self, wanted: list[tuple[ModelDrafter, list[int], int, int]]) -> list[int]:
        """Feed each stream's tokens past what the draft's cache holds of them (at least the fed
        token, whose logits the first draft token comes from); returns each stream's logits row
        in the last batch (-1: none, no draft for it this step)."""
        pending: list[tuple[int, int, int, bool]] = []  # (token, position, slot, logits)
        for drafter, tokens, fed, _ in wanted:
            slot = drafter.slot.id
            cached = self._cached[slot]
            common = common_prefix_length(cached, tokens)
            new = tokens[common:]
            if new and min(new) < 0:  # an image's placeholders: the draft model cannot read it
                continue
            if common < len(cached):
                llama_cpp.llama_memory_seq_rm(self._memory, slot, common, -1)
                del cached[common:]
            for position, token in enumerate(new, start=common):
                pending.append((token, position, slot, False))
            pending.append((fed, len(tokens), slot, True))
            cached.extend(new)
            cached.append(fed)
        rows: dict[int, int] = {}  # slot -> its output (logits row) in the last batch
        for start in range(0, len(pending), self._batch_size):
            chunk = pending[start:start + self._batch_size]
            last = start + self._batch_size >= len(pending)
            for n, (token, position, slot, logits) in enumerate(chunk):
                self._put(n, token, position, slot, logits and last)
                if logits and last:
                    rows[slot] = len(rows)
            self._batch.n_tokens = len(chunk)
            if llama_cpp.llama_decode(self._ctx, self._batch) != 0:
                self._forget([drafter for drafter, *_ in wanted])
                return [-1] * len(wanted)
        # a stream whose fed token went in an earlier chunk of a long catch-up drafts next step
        return [rows.get(drafter.slot.id, -1) for drafter, *_ in wanted]

    def _forget(self, drafters: list[ModelDrafter]) -> None:
        for drafter in drafters:
            llama_cpp.llama_memory_seq_rm(self._memory, drafter.slot.id, -1, -1)
            self._cached[drafter.slot.id].clear()

    def _pick(self, outputs: list[int]) -> list[tuple[int, bool] | None]:
        """The draft's most likely token at each of the last decode's `outputs` (logits rows) and
        whether it is sure enough of it; None where the output is -1 (none) or the token is one
        the target does not have.

        Sure enough: the top token's probability, 1 / sum(exp(logit - top logit)), is at least
        P_MIN. Only logits within TAIL_CUT of the top enter the sum (the rest add at most
        vocabulary * exp(-TAIL_CUT), under 0.001 for 262k tokens, and only decide whether a
        token is drafted, never what the output is), so a row costs an argmax and a comparison
        over the vocabulary instead of an exp over it: on a GPU, where the draft's decode is
        short, the exp was the largest part of the host's time per step."""
        picks: list[tuple[int, bool] | None] = [None] * len(outputs)
        wanted = [i for i, output in enumerate(outputs) if output >= 0]
        if not wanted:
            return picks
        count = len(wanted)
        logits = _logits_rows(self._ctx, max(outputs) + 1, self.model.n_vocab)
        rows = [outputs[i] for i in wanted]
        if rows == list(range(count)):  # the usual order: the outputs are the wanted rows
            block = logits[:count]
        else:
            block = np.take(logits, rows, axis=0, out=self._rows[:count])
        tokens = block.argmax(axis=1)
        tops = block[np.arange(count), tokens]
        near = self._near[:count]
        np.greater(block, (tops - TAIL_CUT)[:, None], out=near)
        for index, (i, token, top) in enumerate(zip(wanted, tokens.tolist(), tops.tolist(), strict=True)):
            if token < self._vocab:
                picks[i] = (token, self._sure(block[index], near[index], top))
        return picks

    def _sure(self, row: np.ndarray, near: np.ndarray, top: float) -> bool:
        """Whether the top token's probability is at least P_MIN, from the logits near the top."""
        if np.count_nonzero(near) <= NEAR_LIMIT:  # a sure row: few logits near its top
            return float(np.exp(row[near] - top).sum()) <= 1.0 / P_MIN
        scratch = self._scratch  # a flat row: summed in place, no array as large as the vocabulary
        np.subtract(row, top, out=scratch)
        return float(np.exp(scratch, out=scratch).sum()) <= 1.0 / P_MIN

    def _put(self, row: int, token: int, position: int, slot: int, logits: bool) -> None:
        batch = self._batch
        batch.token[row] = token
        batch.pos[row] = position
        batch.n_seq_id[row] = 1
        batch.seq_id[row][0] = slot
        batch.logits[row] = logits

    def close(self) -> None:
        if self._ctx is not None:
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
