"""Drafts from a predicted output (`speculation` / `prediction`), prompt-lookup style.

The prediction is usually the text being edited: the output follows it for long stretches and
departs from it at the edits. The drafter follows the prediction while the output does; after a
departure it finds where the latest output tokens occur in the prediction and drafts from there.
Right after a departure, before the output has enough tokens to find the place, it guesses that
one predicted token was replaced (one word for another, the commonest edit) or skipped.
How many tokens it drafts grows while drafts are accepted whole and shrinks when they are not,
so a poor prediction costs little.
"""

from __future__ import annotations

from collections import defaultdict

# Checking k drafted tokens costs a (k + 1)-token decode; on a CPU a 2- or 3-token batch costs
# about as much as decoding its tokens one by one, so short drafts gain nothing.
MIN_DRAFT = 4
# Wider batches decode faster per token up to about 32 rows on CPUs, but a draft that departs
# early wastes the rest of its rows: 24 did best on edit-style requests (tests/bench/
# bench_speculation.py). llama.cpp's CPU kernels also give bit-identical logits per row only in
# batches below about 64 rows, and greedy output must not change with drafting.
MAX_DRAFT = 24
RESYNC_CONTEXT = 8  # output tokens compared when looking for the place in the prediction
MIN_RESYNC_MATCH = 3  # fewer matching tokens (a line break, a common word) find wrong places


class Drafter:
    __slots__ = ("_guessed", "_matched", "_next", "_output", "_positions", "_predicted", "_size")

    def __init__(self, predicted: tuple[int, ...], size: int = MAX_DRAFT):
        self._predicted = predicted
        self._positions: dict[int, list[int]] = defaultdict(list)
        for i, token in enumerate(predicted):
            self._positions[token].append(i)
        self._output: list[int] = []
        self._next: int | None = 0  # index in the prediction the output is expected to follow with
        self._size = size
        self._matched = bytearray(len(predicted))  # prediction positions the output confirmed
        self._guessed = False  # `_next` is a guess made at the last departure, not yet confirmed

    @staticmethod
    def allowed(decoding: int, prefilling: int) -> bool:
        """Whether to draft beside `decoding` and `prefilling` sequences: a prediction always is."""
        return True

    @property
    def matched(self) -> int:
        """Prediction tokens the output matched where the drafter expected them (each position
        once, however often the output repeats it)."""
        return sum(self._matched)

    def propose(self, limit: int) -> tuple[int, ...]:
        """The next tokens the output is expected to have (at most `limit`)."""
        if self._next is None:
            return ()
        count = min(self._size, limit)
        return self._predicted[self._next:self._next + count]

    def observe(self, token: int) -> None:
        """The output's next token."""
        self._output.append(token)
        at = self._next
        if at is not None and at < len(self._predicted) and self._predicted[at] == token:
            self._matched[at] = 1
            self._next = at + 1
            self._guessed = False
            return
        resynced = self._resync(at)
        if resynced is None and at is not None and not self._guessed:
            resynced = self._after_departure(at, token)
            self._guessed = resynced is not None
        else:
            self._guessed = False
        self._next = resynced

    def settle(self, drafted: int, accepted: int) -> None:
        """Adapt the draft size to how the last draft fared: a whole draft kept doubles it, a
        departure makes the next draft as long as the part that was kept."""
        if accepted == drafted:
            self._size = min(self._size * 2, MAX_DRAFT)
        else:
            self._size = max(MIN_DRAFT, accepted)

    def _after_departure(self, at: int, token: int) -> int | None:
        """Where the output most likely goes on right after departing at prediction position
        `at`, before enough output tokens exist to find the place: after a skipped predicted
        token when it gave the one after it, else after a one-token substitution (the commonest
        edit: one word for another). One guess per departure; a wrong one costs one short draft."""
        predicted = self._predicted
        if at + 1 < len(predicted) and predicted[at + 1] == token:
            self._matched[at + 1] = 1
            return at + 2
        return at + 1 if at + 1 < len(predicted) else None

    def _resync(self, previous: int | None) -> int | None:
        """Where the prediction continues the output's latest tokens: the longest match of the
        output's tail (at least MIN_RESYNC_MATCH tokens), preferring the first place after
        where the output was; None when the tail occurs nowhere."""
        output, predicted = self._output, self._predicted
        best_length, best_end = 0, None
        for i in self._positions.get(output[-1], ()):
            length = 1
            while (length < RESYNC_CONTEXT and length < len(output) and i - length >= 0
                   and predicted[i - length] == output[-1 - length]):
                length += 1
            ahead = previous is None or i >= previous
            best_ahead = best_end is not None and (previous is None or best_end - 1 >= previous)
            if length > best_length or (length == best_length and ahead and not best_ahead):
                best_length, best_end = length, i + 1
        if best_end is None or best_length < MIN_RESYNC_MATCH:
            return None
        return best_end


NGRAM = 3  # output tokens that must match earlier text before its continuation is drafted
MAX_AUTO_STREAMS = 2  # with more decoding sequences the batch is already wide: no automatic drafts
MAX_COOLDOWN = 32  # steps without drafts after drafts kept failing


class LookupDrafter:
    """Automatic drafts without a prediction (`--draft auto`): where the output's last `NGRAM`
    tokens occurred before, in the prompt or in the output itself, the tokens that followed them
    there. Answers that quote their context (an edited function, a cited passage) draft long
    stretches; free prose seldom matches, and drafts that fail make it wait longer before the next."""

    __slots__ = ("_ends", "_failures", "_size", "_tokens", "_wait")

    def __init__(self, prompt: tuple[int, ...], size: int = MIN_DRAFT):
        self._tokens = list(prompt)
        self._ends: dict[tuple[int, ...], int] | None = None  # an n-gram -> where it last ended, before the tail
        self._size = size
        self._wait = 0  # steps left without drafting
        self._failures = 0  # drafts in a row that kept nothing

    matched = 0  # no prediction: nothing to report as matched (`ChoiceFinished.draft_accepted`)

    @staticmethod
    def allowed(decoding: int, prefilling: int) -> bool:
        """Not in a wide batch, nor beside a prompt's prefill (the step's time is the prefill's)."""
        return decoding <= MAX_AUTO_STREAMS and not prefilling

    def propose(self, limit: int) -> tuple[int, ...]:
        if self._wait:
            self._wait -= 1
            return ()
        tokens = self._tokens
        if self._ends is None:  # indexed on first use, off the time to first token
            self._ends = {tuple(tokens[end - NGRAM + 1:end + 1]): end for end in range(NGRAM - 1, len(tokens) - 1)}
        end = self._ends.get(tuple(tokens[-NGRAM:]))
        if end is None:
            return ()
        draft = tokens[end + 1:end + 1 + min(self._size, limit)]
        for i, token in enumerate(draft):
            if token < 0:  # an image's placeholder is never a token to draft
                draft = draft[:i]
                break
        return tuple(draft) if len(draft) >= MIN_DRAFT else ()

    def observe(self, token: int) -> None:
        tokens = self._tokens
        if self._ends is not None and len(tokens) >= NGRAM:  # the old tail's n-gram becomes earlier text
            self._ends[tuple(tokens[-NGRAM:])] = len(tokens) - 1
        tokens.append(token)

    def settle(self, drafted: int, accepted: int) -> None:
        if accepted == drafted:
            self._size = min(self._size * 2, MAX_DRAFT)
        else:
            self._size = max(MIN_DRAFT, accepted)
        if accepted:
            self._failures = 0
        else:
            self._failures += 1
            self._wait = min(MAX_COOLDOWN, 1 << self._failures)
