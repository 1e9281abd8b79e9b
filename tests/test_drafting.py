"""The drafter on its own: what it proposes as the output follows a prediction, departs from it
and comes back (token ids stand for tokens; the engine checks every draft against the model)."""

from __future__ import annotations

from backends.drafting import (
    MAX_COOLDOWN,
    MAX_DRAFT,
    MIN_DRAFT,
    NGRAM,
    Drafter,
    LookupDrafter,
)

PREDICTED = tuple(range(100, 140))


def follow(drafter: Drafter, tokens: list[int]) -> None:
    for token in tokens:
        drafter.observe(token)


def test_follows_the_prediction_from_its_start():
    drafter = Drafter(PREDICTED, size=MIN_DRAFT)
    assert drafter.propose(10) == PREDICTED[:MIN_DRAFT]
    follow(drafter, list(PREDICTED[:5]))
    assert drafter.propose(2) == PREDICTED[5:7]
    assert drafter.matched == 5


def test_a_replaced_token_is_guessed_as_a_substitution():
    drafter = Drafter(PREDICTED)
    follow(drafter, [100, 101, 102, 7])  # 103 replaced by 7
    assert drafter.propose(3) == (104, 105, 106)
    follow(drafter, [104, 105])
    assert drafter.propose(2) == (106, 107)
    assert drafter.matched == 5


def test_a_skipped_token_is_stepped_over():
    drafter = Drafter(PREDICTED)
    follow(drafter, [100, 101, 103])  # 102 left out
    assert drafter.propose(2) == (104, 105)
    assert drafter.matched == 3


def test_one_guess_per_departure_then_the_place_is_searched():
    drafter = Drafter(PREDICTED)
    follow(drafter, [100, 101, 7])  # departs: guesses 103 next
    follow(drafter, [8])  # the guess was wrong: no second guess
    assert drafter.propose(4) == ()
    follow(drafter, [9])
    assert drafter.propose(4) == ()
    follow(drafter, [110, 111, 112])  # three tokens that occur in the prediction: back on it
    assert drafter.propose(2) == (113, 114)


def test_an_output_unrelated_to_the_prediction_gets_no_drafts():
    drafter = Drafter(PREDICTED)
    follow(drafter, [1, 2, 3, 4, 5])
    assert drafter.propose(8) == ()
    assert drafter.matched == 0


def test_no_guess_past_the_end_of_the_prediction():
    drafter = Drafter((100, 101, 102))
    follow(drafter, [100, 101, 102, 103])
    assert drafter.propose(4) == ()


def test_draft_size_doubles_while_kept_and_shrinks_to_the_kept_part():
    drafter = Drafter(PREDICTED, size=MIN_DRAFT)
    drafter.settle(MIN_DRAFT, MIN_DRAFT)
    assert len(drafter.propose(100)) == 2 * MIN_DRAFT
    for _ in range(10):
        drafter.settle(MAX_DRAFT, MAX_DRAFT)
    assert len(drafter.propose(100)) == MAX_DRAFT
    drafter.settle(MAX_DRAFT, 9)
    assert len(drafter.propose(100)) == 9
    drafter.settle(9, 1)
    assert len(drafter.propose(100)) == MIN_DRAFT
    assert len(drafter.propose(3)) == 3  # never more than the room left


# ---- automatic drafts (prompt lookup) ----------------------------------------------------------

QUOTED = (5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)


def test_an_output_quoting_its_prompt_is_drafted_from_it():
    drafter = LookupDrafter((1, 2, *QUOTED, 3))
    assert drafter.propose(8) == ()  # the prompt's end (2-gram "15 16 3"...) occurs nowhere before
    follow(drafter, [5, 6, 7])  # the output starts quoting
    assert drafter.propose(8) == QUOTED[3:3 + MIN_DRAFT]
    drafter.settle(MIN_DRAFT, MIN_DRAFT)  # kept whole: the next draft is twice as long
    follow(drafter, list(QUOTED[3:7]))
    # twice as long; past the prompt's end the text goes on with the output (the reference is both)
    assert drafter.propose(20) == (*QUOTED[7:], 3, 5, 6)


def test_the_output_repeating_itself_is_drafted_too():
    drafter = LookupDrafter((1, 2))
    follow(drafter, [40, 41, 42, 43, 44, 45, 46, 47, 40, 41, 42])
    assert drafter.propose(4) == (43, 44, 45, 46)


def test_failed_drafts_back_off_and_a_kept_one_resets():
    drafter = LookupDrafter((*QUOTED, *QUOTED))
    follow(drafter, [5, 6, 7])
    assert drafter.propose(4)
    drafter.settle(4, 0)  # nothing kept
    assert [drafter.propose(4) for _ in range(2)] == [(), ()]  # waits two steps
    assert drafter.propose(4)
    drafter.settle(4, 0)
    assert [drafter.propose(4) for _ in range(4)] == [()] * 4  # then four
    for _ in range(10):
        drafter.settle(4, 0)
    assert drafter._wait == MAX_COOLDOWN
    drafter._wait = 0
    drafter.settle(4, 2)  # something kept: no waiting
    assert drafter.propose(4)


def test_image_placeholders_and_short_continuations_are_never_drafted():
    drafter = LookupDrafter((5, 6, 7, 8, 9, -3, -2, 10, 11))
    follow(drafter, [5, 6, 7])
    assert drafter.propose(8) == ()  # 8, 9 before a placeholder: shorter than a draft is worth
    assert len(QUOTED) > NGRAM and LookupDrafter(QUOTED).propose(8) == ()  # no output yet: nothing to match
    assert LookupDrafter.allowed(2, 0) and not LookupDrafter.allowed(3, 0) and not LookupDrafter.allowed(1, 1)
