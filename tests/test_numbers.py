"""Numeric grammars (grammars/numbers.py) against Python's own arithmetic, through llama.cpp's
grammar engine: every integer in a window around each bound, random samples, decimal texts
with every fraction length and trailing zeros, and the texts that must never appear."""

from __future__ import annotations

import random
import re
from decimal import Decimal, localcontext

import pytest

from grammars.gbnf import GrammarBuilder, GrammarTooLarge
from grammars.numbers import integer_multiple_of, integer_range, number_range
from tests.grammar_support import accepts

NON_CANONICAL = ["-0", "00", "01", "+1", "1.0", "1e2", "1E2", "0x1", "-", "", " 1", "1 ", "--1", "1.", ".5"]
JSON_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")


def _integer_grammar(minimum: int | None, maximum: int | None) -> str:
    builder = GrammarBuilder()
    return builder.render(integer_range(builder, minimum, maximum))


def _in_range(n: int, minimum: int | None, maximum: int | None) -> bool:
    return (minimum is None or n >= minimum) and (maximum is None or n <= maximum)


def _integer_samples(minimum: int | None, maximum: int | None, rng: random.Random) -> set[int]:
    samples = set(range(-40, 41))
    for bound in (minimum, maximum):
        if bound is not None:
            for scale in (1, 10, 100):
                samples.update(range(bound - 3 * scale, bound + 3 * scale + 1, scale))
            samples.update(range(bound - 25, bound + 26))
            samples.update(bound + rng.randint(-10**6, 10**6) for _ in range(50))
            samples.update(bound + rng.randint(-abs(bound) - 1, abs(bound) + 1) for _ in range(50))
    low, high = minimum if minimum is not None else -10**30, maximum if maximum is not None else 10**30
    samples.update(rng.randint(low, high) for _ in range(100))
    samples.update(10**k + d for k in range(1, 32) for d in (-1, 0, 1))
    samples.update(-(10**k) + d for k in range(1, 32) for d in (-1, 0, 1))
    return samples


INTEGER_RANGES = [
    (0, 100), (1, 9), (0, 0), (5, 5), (-5, -5), (-1, 0), (0, 1), (-25, 37), (-1000, -7), (-999, 999),
    (13, None), (0, None), (1, None), (-17, None), (None, -7), (None, 0), (None, 250), (None, -1),
    (100, 100000), (99, 1001), (123, 98765), (-98765, -123), (10, 19), (18, 1000000),
    (123456789012345678901234, 123456789012345678901234567), (-10**25, 10**20), (10**20, None),
    (None, -(10**21) + 17), (2**63 - 1, 2**64), (-(2**63), 2**63 - 1),
]


@pytest.mark.parametrize(("minimum", "maximum"), INTEGER_RANGES)
def test_integer_range(minimum: int | None, maximum: int | None) -> None:
    grammar = _integer_grammar(minimum, maximum)
    rng = random.Random(f"{minimum}:{maximum}")
    for n in sorted(_integer_samples(minimum, maximum, rng)):
        assert accepts(grammar, str(n)) == _in_range(n, minimum, maximum), n
    for text in NON_CANONICAL:
        assert not accepts(grammar, text), text


def test_unbounded_integer() -> None:
    grammar = _integer_grammar(None, None)
    for n in [0, 1, -1, 10, -10**40, 10**40, 1234567]:
        assert accepts(grammar, str(n))
    for text in NON_CANONICAL:
        assert not accepts(grammar, text), text


def test_empty_integer_range() -> None:
    with pytest.raises(ValueError):
        integer_range(GrammarBuilder(), 5, 4)
    with pytest.raises(ValueError):
        integer_range(GrammarBuilder(), -3, -4)


# --- decimals ---------------------------------------------------------------------------------


def _number_grammar(minimum: Decimal | None, maximum: Decimal | None, exclusive_minimum: bool,
                    exclusive_maximum: bool) -> str:
    builder = GrammarBuilder()
    return builder.render(number_range(builder, minimum, maximum, exclusive_minimum, exclusive_maximum))


def _decimal_texts(value: Decimal) -> set[str]:
    """`value` written with several fraction lengths and trailing zeros (canonical JSON forms)."""
    texts = set()
    for places in range(7):
        quantized = value.quantize(Decimal(1).scaleb(-places)) if places else value.to_integral_value()
        text = format(quantized, "f")
        texts.add(text)
        if "." in text:
            texts.add(text + "0")
            texts.add(text + "00")
        else:
            texts.add(text + ".0")
    return texts


def _number_samples(bounds: list[Decimal], rng: random.Random) -> set[str]:
    """Canonical texts near the bounds (steps of 10**-6 to 100, with trailing zeros) and at random."""
    texts = {"0", "0.0", "0.00", "-0", "-0.0", "-0.00", "1", "-1", "0.5", "-0.5", "1.5", "10", "-10"}
    with localcontext(prec=200):
        for bound in bounds:
            texts |= _bound_neighbours(bound, rng)
    for _ in range(60):
        texts.add(format(Decimal(rng.randint(-10**9, 10**9)).scaleb(-rng.randint(0, 9)), "f"))
    return {t for t in texts if JSON_NUMBER.fullmatch(t)}


def _bound_neighbours(bound: Decimal, rng: random.Random) -> set[str]:
    texts: set[str] = set()
    for exponent in range(-6, 3):
        step = Decimal(1).scaleb(exponent)
        for k in (-3, -2, -1, 0, 1, 2, 3):
            texts |= _decimal_texts(bound + k * step)
    for _ in range(30):
        texts |= _decimal_texts(bound + Decimal(rng.randint(-10**6, 10**6)).scaleb(-rng.randint(0, 7)))
    return texts


def _number_truth(text: str, minimum: Decimal | None, maximum: Decimal | None, exclusive_minimum: bool,
                  exclusive_maximum: bool) -> bool:
    value = Decimal(text)
    if text.startswith("-") and value == 0:
        return False  # negative zero: excluded (documented narrowing)
    if minimum is not None and (value < minimum or exclusive_minimum and value == minimum):
        return False
    return maximum is None or not (value > maximum or exclusive_maximum and value == maximum)


D = Decimal
NUMBER_RANGES = [
    (D("0.5"), None, True, False), (D("0.5"), None, False, False), (None, D("0.5"), False, True),
    (D("0.5"), D("2.25"), True, False), (D("0.25"), D("0.75"), False, True), (D("0.25"), D("0.75"), True, True),
    (D("-1.5"), D("1.5"), False, False), (D("-1.5"), D("1.5"), True, True), (D("-0.001"), D("0.001"), True, False),
    (D(0), D(1), False, False), (D(0), D(1), True, True), (D(0), None, True, False), (D(0), None, False, False),
    (None, D(0), False, True), (None, D(0), False, False), (D("-2.5"), D("-0.05"), False, False),
    (D("-2.5"), D("-0.05"), True, True), (D("-0.5"), D(0), False, True), (D("3.14159"), D("3.1416"), False, False),
    (D("1.05"), D("1.5"), True, False), (D("0.1"), D("0.1"), False, False), (D("-7"), D("-7"), False, False),
    (D("12.5"), D("1234.125"), False, True), (D("-100"), D("100"), True, True), (None, D("-3.07"), False, False),
    (D("1E+2"), D("1.0001E+2"), False, False), (D("0.00001"), D("0.0001"), True, True),
    (D("99.99"), D("100.01"), False, False), (D(5), D(5), False, False),
    (D("123456789012345678901234.5"), None, True, False),
]


@pytest.mark.parametrize(("minimum", "maximum", "exclusive_minimum", "exclusive_maximum"), NUMBER_RANGES)
def test_number_range(minimum: Decimal | None, maximum: Decimal | None, exclusive_minimum: bool,
                      exclusive_maximum: bool) -> None:
    grammar = _number_grammar(minimum, maximum, exclusive_minimum, exclusive_maximum)
    rng = random.Random(f"{minimum}:{maximum}:{exclusive_minimum}:{exclusive_maximum}")
    bounds = [b for b in (minimum, maximum) if b is not None]
    for text in sorted(_number_samples(bounds, rng)):
        expected = _number_truth(text, minimum, maximum, exclusive_minimum, exclusive_maximum)
        assert accepts(grammar, text) == expected, text
    for text in ["1e0", "5E-1", "0.5e0", "+1", "01", "1.", ".5", "00.5", "1.5.5", ""]:
        assert not accepts(grammar, text), text


def test_exclusive_half() -> None:
    grammar = _number_grammar(D("0.5"), None, True, False)
    assert accepts(grammar, "0.50001")
    assert accepts(grammar, "0.6")
    assert accepts(grammar, "1")
    assert not accepts(grammar, "0.5")
    assert not accepts(grammar, "0.50")
    assert not accepts(grammar, "0.5000000000")
    assert not accepts(grammar, "0.49999999")


def test_integer_bounds_accept_integers_and_decimals() -> None:
    grammar = _number_grammar(D(1), D(3), False, False)
    for text in ["1", "1.0", "2.999", "3", "3.000"]:
        assert accepts(grammar, text), text
    for text in ["0.999", "3.0001", "4", "-1"]:
        assert not accepts(grammar, text), text


def test_unbounded_number_is_full_json_syntax() -> None:
    grammar = _number_grammar(None, None, False, False)
    for text in ["0", "-0", "1", "-1.5", "1e10", "1E+10", "2.5e-3", "-0.0e0", "123456789.000"]:
        assert accepts(grammar, text), text
    for text in ["01", "+1", "1.", ".5", "1e", "1e+", "--1", "0x10", "NaN", "Infinity", ""]:
        assert not accepts(grammar, text), text


def test_float_and_int_bounds() -> None:
    builder = GrammarBuilder()
    grammar = builder.render(number_range(builder, 0.1, 2, False, False))
    assert accepts(grammar, "0.1") and accepts(grammar, "2") and not accepts(grammar, "0.09999")


@pytest.mark.parametrize(("minimum", "maximum", "exclusive_minimum", "exclusive_maximum"), [
    (D(2), D(1), False, False), (D(1), D(1), True, False), (D(1), D(1), False, True),
    (D("-0.5"), D("-0.5"), True, True),
])
def test_empty_number_range(minimum: Decimal, maximum: Decimal, exclusive_minimum: bool,
                            exclusive_maximum: bool) -> None:
    with pytest.raises(ValueError):
        number_range(GrammarBuilder(), minimum, maximum, exclusive_minimum, exclusive_maximum)


# --- multiples --------------------------------------------------------------------------------


@pytest.mark.parametrize("divisor", [1, 2, 3, 5, 7, 10, 12, 25, 64, 100, 125, 333, 997, 1000])
def test_integer_multiple_of(divisor: int) -> None:
    builder = GrammarBuilder()
    grammar = builder.render(integer_multiple_of(builder, divisor))
    rng = random.Random(divisor)
    samples = set(range(-250, 251))
    samples.update(divisor * k + d for k in range(-5, 6) for d in (-1, 0, 1))
    samples.update(rng.randint(-10**20, 10**20) for _ in range(100))
    samples.update(divisor * rng.randint(-10**18, 10**18) for _ in range(100))
    for n in sorted(samples):
        assert accepts(grammar, str(n)) == (n % divisor == 0), n
    for text in NON_CANONICAL:
        assert not accepts(grammar, text), text


def test_multiple_of_shares_rules() -> None:
    builder = GrammarBuilder()
    name = integer_multiple_of(builder, 7)
    size = len(builder.render(name))
    assert integer_multiple_of(builder, 7) == name
    assert len(builder.render(name)) == size
    assert builder.render(name).count("\n") == 1 + 1 + 7  # root, the entry rule, one rule per remainder
    minimized = GrammarBuilder()
    assert minimized.render(integer_multiple_of(minimized, 1000)).count("\n") == 1 + 1 + 4  # trailing zeros


def test_bad_divisor() -> None:
    for divisor in (0, -3, 1001):
        with pytest.raises(ValueError):
            integer_multiple_of(GrammarBuilder(), divisor)


def test_huge_bounds_are_refused() -> None:
    with pytest.raises(GrammarTooLarge):
        integer_range(GrammarBuilder(), 0, 10**400)
    with pytest.raises(GrammarTooLarge):
        integer_range(GrammarBuilder(), -(10**5000), None)
    with pytest.raises(GrammarTooLarge):
        number_range(GrammarBuilder(), D("1e999999999"), None)
    with pytest.raises(GrammarTooLarge):
        number_range(GrammarBuilder(), None, D("1e-999999999"))
    builder = GrammarBuilder()  # many digits, few of them significant after the point
    grammar = builder.render(number_range(builder, D("0." + "0" * 250 + "1"), D("1.5000000000000000000000")))
    assert accepts(grammar, "0." + "0" * 250 + "1") and not accepts(grammar, "0." + "0" * 251 + "9")
