"""Whether drafting with the draft model pays on this machine, measured on the steps as they run.

A draft pays where checking k drafted tokens costs less than the k steps it saves, and that
depends on the hardware, the pair and how many streams decode: on a GPU a step of a few rows costs
about what a step of one does, on a CPU nearly one row's work per row; drafting for four streams
makes wider steps than for one. `ModelDrafter` follows acceptance (draft length, cool-down); this
follows time. For each number of decoding streams it measures the tokens per second of steps with
the draft model (a trial: `TRIAL` steps, judged after `EARLY` when far behind) against steps
without it (`BASELINE` steps before the first trial, again every `REFRESH` drafting steps, and
every step while drafting is off). A trial slower than the steps without makes the draft model
rest there: long enough that the time the trial lost is at most `TRIAL_SHARE` of the time
until the next (at least `MIN_OFF` steps, twice as many after each failed trial in a row, at
most `MAX_OFF`). So a pairing that does not pay here costs about that share: never much slower
than no draft.

Only steps in which every stream decodes are measured (a prompt's prefill or an image would make
a step slower whatever the draft does).
"""

from __future__ import annotations

import logging

from backends.draft_model import COST_WEIGHT, DraftTrust

log = logging.getLogger("fireside.engine")

BASELINE = 4  # steps without drafts measured before a trial
TRIAL = 16  # steps with drafts measured before they are judged
EARLY = 4  # steps after which a trial far behind (under EARLY_GAIN) is judged at once
EARLY_GAIN = 0.75
REFRESH = 256  # drafting steps after which the steps without are measured again
MIN_OFF = 64  # steps the draft model rests after a trial that did not pay
MAX_OFF = 4096
TRIAL_SHARE = 0.05  # of the time, at most, that failed trials lose
DECAY = 0.9  # of the earlier steps without drafts in their running measure, per step


class _Measure:
    """Tokens and seconds over a run of steps."""

    __slots__ = ("seconds", "steps", "tokens")

    def __init__(self) -> None:
        self.steps, self.tokens, self.seconds = 0, 0.0, 0.0

    def add(self, tokens: int, seconds: float, decay: float = 1.0) -> None:
        self.steps += 1
        self.tokens = self.tokens * decay + tokens
        self.seconds = self.seconds * decay + seconds

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


class _Streams:
    """The measures at one number of decoding streams."""

    __slots__ = ("cost", "failures", "plain", "rest", "since_baseline", "trial")

    def __init__(self) -> None:
        self.cost = 0.0  # what a drafted token adds to a step, in steps without drafts (0: not measured)
        self.plain = _Measure()  # steps without drafts (recent ones weigh most)
        self.trial = _Measure()  # the current trial's steps with drafts
        self.rest = 0  # steps the draft model still rests
        self.failures = 0  # trials in a row that did not pay
        self.since_baseline = 0  # drafting steps since the steps without were measured afresh


class DraftPayoff:
    def __init__(self, trust: DraftTrust, *, always: bool = False, name: str = ""):
        self._trust = trust  # told what a drafted token costs (`DraftTrust.cost`), for the draft lengths
        self._always = always  # `--draft-model-always`: no measuring, the draft model runs every step
        self._name = name
        self._streams: dict[int, _Streams] = {}

    def drafting(self, streams: int) -> bool:
        """Whether a step of `streams` decoding streams drafts with the draft model."""
        if self._always:
            return True
        state = self._streams.get(streams)
        return state is not None and not state.rest and state.plain.steps >= BASELINE

    def observe(self, streams: int, drafted: bool, tokens: int, seconds: float, length: int = 0) -> None:
        """A step in which every one of `streams` streams decoded: whether it drafted with the
        draft model (its longest draft: `length` tokens), the tokens it gave and its seconds."""
        if self._always or seconds <= 0:
            return
        state = self._streams.get(streams)
        if state is None:
            state = self._streams[streams] = _Streams()
        if not drafted:
            state.plain.add(tokens, seconds, DECAY)
            state.rest = max(0, state.rest - 1)
            return
        if length and state.plain.rate > 0:
            # the draft's decodes, the rows the model checks and the host's work, per drafted token
            plain_step = streams / state.plain.rate
            sample = max(0.0, seconds - plain_step) / (length * plain_step)
            state.cost = sample if not state.cost else state.cost + COST_WEIGHT * (sample - state.cost)
            self._trust.cost = state.cost
        state.trial.add(tokens, seconds)
        state.since_baseline += 1
        trial, plain_rate = state.trial, state.plain.rate
        gain = trial.rate / plain_rate if plain_rate > 0 else 1.0
        if trial.steps < TRIAL and not (trial.steps >= EARLY and gain < EARLY_GAIN):
            return
        state.trial = _Measure()
        if gain < 1.0:
            state.failures += 1
            # the seconds the trial lost against decoding its tokens without drafts, as steps without
            lost = trial.seconds - trial.tokens / plain_rate
            plain_step = streams / plain_rate
            state.rest = min(MAX_OFF, max(MIN_OFF << (state.failures - 1), round(lost / (TRIAL_SHARE * plain_step))))
            log.info("%s: the draft model rests %d steps at %d streams: %.2fx the speed without it",
                     self._name, state.rest, streams, gain)
        else:
            if state.failures:
                log.info("%s: the draft model pays again at %d streams: %.2fx", self._name, streams, gain)
            state.failures = 0
        if state.since_baseline >= REFRESH:
            state.plain, state.since_baseline = _Measure(), 0
