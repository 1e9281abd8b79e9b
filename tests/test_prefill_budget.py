"""`PrefillBudget`: the prompt tokens a step takes beside decoding streams, from measured step times."""

from __future__ import annotations

from backends.prefill_budget import PrefillBudget


def _measured(base: float, per_token: float, chunk: int = 8, steps: int = 40) -> PrefillBudget:
    budget = PrefillBudget()
    for _ in range(steps):
        budget.observe(base, decoding=2, prefilled=0)
        budget.observe(base + chunk * per_token, decoding=2, prefilled=chunk)
    return budget


def test_nothing_decoding_prefills_the_whole_room():
    assert PrefillBudget().tokens(0, 512) == 512
    assert _measured(0.015, 0.006).tokens(0, 512) == 512


def test_a_first_guess_until_prefill_steps_are_timed():
    budget = PrefillBudget()
    assert budget.tokens(2, 510) == PrefillBudget.FIRST_CHUNK
    budget.observe(0.015, decoding=2, prefilled=0)
    assert budget.tokens(2, 510) == PrefillBudget.FIRST_CHUNK  # the decode step alone is not enough


def test_the_step_stays_within_its_slowdown_of_a_decode_step():
    budget = _measured(0.015, 0.006)
    tokens = budget.tokens(2, 510)
    assert tokens == 5  # (3 - 1) * 15 ms / 6 ms
    assert 0.015 + tokens * 0.006 <= PrefillBudget.SLOWDOWN * 0.015
    fast_prefill = _measured(0.015, 0.0001)
    assert fast_prefill.tokens(2, 510) == 300 and fast_prefill.tokens(2, 100) == 100  # never past the room


def test_it_follows_the_machine_and_keeps_a_floor():
    budget = _measured(0.015, 0.006)
    for _ in range(60):  # a neighbour takes a core: prefill tokens cost four times as much
        budget.observe(0.015, decoding=2, prefilled=0)
        budget.observe(0.015 + 4 * 0.024, decoding=2, prefilled=4)
    assert budget.tokens(2, 510) == PrefillBudget.MIN_CHUNK  # 1.25 tokens would fit: the floor keeps it moving
    lone = PrefillBudget()
    lone.observe(0.5, decoding=0, prefilled=512)  # a prefill with nothing decoding changes nothing
    assert lone.base is None and lone.per_token is None
