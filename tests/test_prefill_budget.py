"""`PrefillBudget`: the prompt tokens a step takes beside decoding streams, steered by measured step times."""

from __future__ import annotations

from backends.prefill_budget import PrefillBudget


def _with_base(base: float = 0.025) -> PrefillBudget:
    budget = PrefillBudget()
    for _ in range(20):
        budget.observe(base, decoding=2, prefilled=0, rows=2)
    return budget


def test_nothing_decoding_prefills_the_whole_room():
    assert PrefillBudget().tokens(0, 512) == 512
    assert _with_base().tokens(0, 512) == 512


def test_a_first_guess_until_a_prefill_step_is_timed():
    budget = _with_base()
    assert budget.tokens(2, 510) == PrefillBudget.FIRST_CHUNK


def test_the_chunk_follows_the_measured_steps_toward_the_target():
    budget = _with_base(0.025)
    target = (PrefillBudget.SLOWDOWN - 1) * 0.025  # a prefill alone, between two decode steps
    budget.observe(target / 2, decoding=2, prefilled=8, rows=8)  # twice as fast as allowed: twice the chunk
    assert budget.tokens(2, 510) == 16
    budget.observe(target * 4, decoding=2, prefilled=16, rows=16)  # four times too slow: at most halved a step
    assert budget.tokens(2, 510) == 8
    mixed = PrefillBudget.SLOWDOWN * 0.025  # prompt tokens in the streams' own step: the gap is that step
    budget.observe(mixed, decoding=2, prefilled=8, rows=10)
    assert budget.tokens(2, 510) == 8
    assert budget.tokens(2, 5) == 5  # never past the room


def test_a_floor_and_what_is_not_measured():
    budget = _with_base(0.025)
    for _ in range(10):
        budget.observe(1.0, decoding=2, prefilled=4, rows=4)  # a neighbour took the CPU
    assert budget.tokens(2, 510) == PrefillBudget.MIN_CHUNK  # it keeps moving
    drafted = _with_base(0.025)
    drafted.observe(0.2, decoding=2, prefilled=0, rows=30)  # a step with drafted rows is no plain decode step
    assert drafted.base == 0.025
    lone = PrefillBudget()
    lone.observe(0.5, decoding=0, prefilled=512, rows=512)  # a prefill with nothing decoding changes nothing
    assert lone.base is None and lone.chunk == PrefillBudget.FIRST_CHUNK
