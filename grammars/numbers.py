"""GBNF for JSON numbers under JSON Schema's numeric keywords: integer ranges, decimal ranges
and integer multiples.

Every grammar describes canonical JSON number text: no leading zeros, no "+", and for integers
no "-0", no fraction and no exponent.

Narrowing: a bounded `number` is written in plain decimal notation (no exponent). With exponents
the set of texts inside a bound is not a regular language ("1e999999" against 1e1000000), so
the grammar keeps to the decimal form, where exact digit-by-digit comparison is possible.
Negative zero ("-0", "-0.0", ...) is never produced by a bounded grammar; "0", "0.0", ... are
produced when 0 is in range.
"""

from __future__ import annotations

import re
from decimal import Decimal
from weakref import WeakKeyDictionary

from grammars.gbnf import GrammarBuilder, GrammarTooLarge, char_class, literal, repeat

INTEGER_BODY = '"0" | "-"? [1-9] [0-9]*'
# Numbers no schema bound limits keep to what a JSON parser holds in a double: at most 17 digits
# before and after the point and an exponent of at most 308. Without such a limit a model may
# write digits until `max_tokens` ("population": 81922222000000000000...).
MAX_FREE_DIGITS = 17
_EXPONENT = '[eE] [+\\-]? ([0-9]{1,2} | [0-2] [0-9] [0-9] | "30" [0-8])'
NUMBER_BODY = (f'"-"? ("0" | [1-9] [0-9]{{0,{MAX_FREE_DIGITS - 1}}}) ("." [0-9]{{1,{MAX_FREE_DIGITS}}})? '
               f'({_EXPONENT})?')
_FREE_FRACTION = f"[0-9]{{1,{MAX_FREE_DIGITS}}}"
_ANY_FRACTION = f'("." {_FREE_FRACTION})?'
# Integers no bound limits are 64-bit, as most JSON parsers hold them.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

MAX_DIVISOR = 1000
# Bounds with more digits than this (integer part, or fraction without trailing zeros) raise
# GrammarTooLarge: the grammar grows with the digits, and no real schema needs them.
MAX_BOUND_DIGITS = 300


# --- integers --------------------------------------------------------------------------------


def integer_range(builder: GrammarBuilder, minimum: int | None, maximum: int | None) -> str:
    """A rule for the canonical JSON integers n with minimum <= n <= maximum (None: unbounded)."""
    if minimum is not None and maximum is not None and minimum > maximum:
        raise ValueError(f"empty integer range [{minimum}, {maximum}]")
    if minimum is None and maximum is None:
        return builder.rule("integer", INTEGER_BODY)
    _check_digits(minimum)
    _check_digits(maximum)
    alternatives = []
    if minimum is None or minimum < 0:
        # n <= -1 and n >= minimum: "-" then a magnitude in [max(1, -maximum), -minimum]
        low = 1 if maximum is None or maximum >= 0 else -maximum
        high = None if minimum is None else -minimum
        alternatives.append(_seq(literal("-"), _group(_naturals(builder, low, high))))
    if maximum is None or maximum >= 0:
        alternatives.extend(_naturals(builder, max(minimum or 0, 0), maximum))
    return builder.rule("integer-range", " | ".join(alternatives))


def _check_digits(bound: int | None) -> None:
    # bit_length first: str() of a huge int is slow (and refused past 4300 digits)
    if bound is None:
        return
    if abs(bound).bit_length() > 4 * MAX_BOUND_DIGITS or len(str(abs(bound))) > MAX_BOUND_DIGITS:
        raise GrammarTooLarge(f"an integer bound has more than {MAX_BOUND_DIGITS} digits")


def _naturals(builder: GrammarBuilder, low: int, high: int | None) -> list[str]:
    """Alternatives for the decimal texts of the naturals in [low, high], 0 <= low <= high."""
    low_text = str(low)
    width = len(low_text)
    if high is None:
        longer = _seq("[1-9]", repeat(builder, "[0-9]", width, None))
        return [_between(builder, low_text, "9" * width), longer]
    high_text = str(high)
    if len(high_text) == width:
        return [_between(builder, low_text, high_text)]
    alternatives = [_between(builder, low_text, "9" * width)]
    if len(high_text) - width >= 2:  # every number with a length strictly between the two
        alternatives.append(_seq("[1-9]", repeat(builder, "[0-9]", width, len(high_text) - 2)))
    alternatives.append(_between(builder, "1" + "0" * (len(high_text) - 1), high_text))
    return alternatives


def _between(builder: GrammarBuilder, low: str, high: str) -> str:
    """Digit strings of one length between `low` and `high` (same length, low <= high) as
    numbers; leading zeros are possible only when `low` has them. Alternatives are disjoint."""
    if low == high:
        return literal(low)
    prefix = 0
    while low[prefix] == high[prefix]:
        prefix += 1
    head = literal(low[:prefix]) if prefix else ""
    low, high = low[prefix:], high[prefix:]
    rest = len(low) - 1
    if rest == 0:
        return _seq(head, _digit_class(low[0], high[0]))
    low_full = low[1:] == "0" * rest  # low's first digit takes every suffix
    high_full = high[1:] == "9" * rest
    first = low[0] if low_full else chr(ord(low[0]) + 1)
    last = high[0] if high_full else chr(ord(high[0]) - 1)
    alternatives = []
    if not low_full:
        alternatives.append(_seq(literal(low[0]), _between(builder, low[1:], "9" * rest)))
    if first <= last:
        alternatives.append(_seq(_digit_class(first, last), repeat(builder, "[0-9]", rest, rest)))
    if not high_full:
        alternatives.append(_seq(literal(high[0]), _between(builder, "0" * rest, high[1:])))
    return _seq(head, _group(alternatives))


def _digit_class(first: str, last: str) -> str:
    return literal(first) if first == last else char_class([(ord(first), ord(last))])


def _group(alternatives: list[str]) -> str:
    """Alternatives as one element of a sequence (a lone sequence needs no parentheses)."""
    if len(alternatives) == 1:
        return alternatives[0]
    return "(" + " | ".join(alternatives) + ")"


_SIMPLE = re.compile(r'^(?:[a-zA-Z0-9-]+|"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\])(?:[?*+]|\{[0-9,]+\})?$')


def _is_simple(expression: str) -> bool:
    """One rule name, literal or class, maybe quantified: needs no parentheses."""
    return bool(_SIMPLE.match(expression))


def _seq(*parts: str) -> str:
    return " ".join(p for p in parts if p and p != '""') or '""'


# --- multiples -------------------------------------------------------------------------------


def integer_multiple_of(builder: GrammarBuilder, divisor: int) -> str:
    """A rule for the canonical JSON integers divisible by `divisor` (1 <= divisor <= 1000).

    The digits are read by the remainder automaton (state: the value so far modulo `divisor`),
    minimized first, so that e.g. 1000 needs 4 states, not 1000. One rule per state; each digit
    class leads to one next state, so every text has one parse. The sign does not change
    divisibility."""
    if not 1 <= divisor <= MAX_DIVISOR:
        raise ValueError(f"divisor must be between 1 and {MAX_DIVISOR}")
    if divisor == 1:
        return builder.rule("integer", INTEGER_BODY)
    # The states refer to each other in cycles, so `rule` cannot deduplicate them by body; the
    # builder remembers each divisor's automaton instead.
    known = _MULTIPLES.setdefault(builder, {})
    if divisor in known:
        return known[divisor]
    block_of, blocks = _minimal_remainder_automaton(divisor)
    names = [builder.reserve(f"m{divisor}-{k}") for k in range(len(blocks))]
    for name, remainder in zip(names, blocks):
        builder.define(name, _state_body(remainder, divisor, block_of, names, range(10), accepting=remainder == 0))
    start = _state_body(0, divisor, block_of, names, range(1, 10), accepting=False)
    known[divisor] = builder.rule(f"multiple-of-{divisor}", f'"0" | "-"? ({start})')
    return known[divisor]


_MULTIPLES: WeakKeyDictionary[GrammarBuilder, dict[int, str]] = WeakKeyDictionary()


def _state_body(
    remainder: int, divisor: int, block_of: list[int], names: list[str], digits: range, *, accepting: bool
) -> str:
    targets: dict[int, list[int]] = {}
    for digit in digits:
        targets.setdefault(block_of[(remainder * 10 + digit) % divisor], []).append(digit)
    alternatives = ['""'] if accepting else []
    for block, chosen in targets.items():
        alternatives.append(f"{char_class(_runs(chosen))} {names[block]}")
    return " | ".join(alternatives)


def _runs(digits: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for digit in digits:
        code = ord("0") + digit
        if runs and runs[-1][1] == code - 1:
            runs[-1] = (runs[-1][0], code)
        else:
            runs.append((code, code))
    return runs


def _minimal_remainder_automaton(divisor: int) -> tuple[list[int], list[int]]:
    """Moore's partition refinement of the remainder automaton (accepting state: 0). Returns
    each remainder's block and a representative remainder per block; block 0 holds 0."""
    block_of = [0 if r == 0 else 1 for r in range(divisor)]
    count = len(set(block_of))
    while True:
        signatures: dict[tuple[int, ...], int] = {}
        refined = []
        for r in range(divisor):
            signature = (block_of[r], *(block_of[(r * 10 + d) % divisor] for d in range(10)))
            refined.append(signatures.setdefault(signature, len(signatures)))
        if len(signatures) == count:
            break
        block_of, count = refined, len(signatures)
    representatives: dict[int, int] = {}
    for r in range(divisor):
        representatives.setdefault(block_of[r], r)
    return block_of, [representatives[k] for k in range(count)]


# --- decimals --------------------------------------------------------------------------------

# A bound on a digit string compared as a fraction: (digits without trailing zeros, strict).
# Digits "" stand for 0.
_FracBound = tuple[str, bool] | None
# A bound on a magnitude: (integer part, fraction digits, strict).
_Bound = tuple[int, str, bool] | None


def number_range(
    builder: GrammarBuilder,
    minimum: Decimal | float | None,
    maximum: Decimal | float | None,
    exclusive_minimum: bool = False,
    exclusive_maximum: bool = False,
) -> str:
    """A rule for the JSON numbers x within the bounds (None: unbounded; `exclusive_*`: strict).

    Unbounded: the JSON number syntax within `NUMBER_BODY`'s limits. Bounded: decimal notation
    only (no exponent), the fraction digits a bound needs and otherwise at most MAX_FREE_DIGITS,
    trailing zeros included ("1.50"), no negative zero; exact comparison.
    A float bound is taken as its shortest repr (0.1 is 0.1, not the binary double)."""
    low = None if minimum is None else _decimal(minimum)
    high = None if maximum is None else _decimal(maximum)
    if low is None and high is None:
        return builder.rule("number", NUMBER_BODY)
    exclusive = exclusive_minimum or exclusive_maximum
    if low is not None and high is not None and (low > high or low == high and exclusive):
        raise ValueError(f"empty number range {minimum}..{maximum}")
    alternatives = []
    if low is None or low < 0:  # the negatives: "-" and a magnitude m > 0
        if high is not None and high < 0:
            magnitude_low = _split(high.copy_negate(), exclusive_maximum)
        else:
            magnitude_low = (0, "", True)
        magnitude_high = None if low is None else _split(low.copy_negate(), exclusive_minimum)
        negatives = _magnitudes(builder, magnitude_low, magnitude_high)
        if negatives:
            alternatives.append(_seq(literal("-"), _group(negatives)))
    if high is None or high > 0 or high == 0 and not exclusive_maximum:
        magnitude_low = (0, "", False) if low is None or low < 0 else _split(low, exclusive_minimum)
        magnitude_high = None if high is None else _split(high, exclusive_maximum)
        alternatives.extend(_magnitudes(builder, magnitude_low, magnitude_high))
    if not alternatives:
        raise ValueError(f"empty number range {minimum}..{maximum}")
    return builder.rule("number-range", " | ".join(alternatives))


def _decimal(value: Decimal | float) -> Decimal:
    if isinstance(value, float):  # the shortest repr is what the schema author wrote
        value = Decimal(repr(value))
    value = Decimal(value)
    if not value.is_finite():
        raise ValueError(f"bound {value} is not finite")
    digits, exponent = value.as_tuple().digits, int(value.as_tuple().exponent)
    trailing_zeros = len(digits) - len("".join(map(str, digits)).rstrip("0"))
    if value and (len(digits) + exponent > MAX_BOUND_DIGITS or exponent + trailing_zeros < -MAX_BOUND_DIGITS):
        raise GrammarTooLarge(f"number bound {value} has more than {MAX_BOUND_DIGITS} digits")
    return value


def _split(value: Decimal, strict: bool) -> tuple[int, str, bool]:
    """A non-negative decimal as (integer part, fraction digits without trailing zeros)."""
    whole, _, fraction = format(value, "f").partition(".")
    return int(whole), fraction.rstrip("0"), strict


def _magnitudes(builder: GrammarBuilder, low: tuple[int, str, bool], high: _Bound) -> list[str]:
    """Alternatives for unsigned decimal texts `(0 | [1-9][0-9]*) ("." [0-9]{1,17})?` whose value
    lies within `low` and `high`; each integer part is in one alternative only."""
    low_int, low_frac, low_strict = low
    low_trivial = low_frac == "" and not low_strict  # x >= an integer: any fraction
    if high is not None:
        high_int, high_frac, high_strict = high
        if low_int == high_int:
            tail = _fraction_part(builder, (low_frac, low_strict), (high_frac, high_strict))
            return [] if tail is None else [_seq(literal(str(low_int)), tail)]
    alternatives = []
    if not low_trivial:
        tail = _fraction_part(builder, (low_frac, low_strict), None)
        if tail is not None:
            alternatives.append(_seq(literal(str(low_int)), tail))
    first = low_int if low_trivial else low_int + 1
    last = None if high is None else high_int - 1
    if last is None or first <= last:
        integers = _naturals(builder, first, last)
        alternatives.append(_seq(_group(integers), _ANY_FRACTION))
    if high is not None:
        tail = _fraction_part(builder, None, (high_frac, high_strict))
        if tail is not None:
            alternatives.append(_seq(literal(str(high_int)), tail))
    return alternatives


def _fraction_part(builder: GrammarBuilder, low: _FracBound, high: _FracBound) -> str | None:
    """The optional `"." digits` after an integer part, given bounds on the fraction; None when
    no fraction (not even none at all) fits."""
    low = _normalize(low)
    digits = _fraction_digits(builder, low, high)
    dotted = None if digits is None else _seq(literal("."), digits)
    if not _zero_fits(low, high):
        return dotted
    return '""' if dotted is None else _optional(dotted)


def _normalize(low: _FracBound) -> _FracBound:
    return None if low is not None and low == ("", False) else low


def _zero_fits(low: _FracBound, high: _FracBound) -> bool:
    """Whether a fraction of value 0 (no digits, or only zeros) satisfies the bounds."""
    return low is None and (high is None or high[0] != "" or not high[1])


def _fraction_digits(builder: GrammarBuilder, low: _FracBound, high: _FracBound) -> str | None:
    """Non-empty digit strings F with low <= 0.F <= high (strictness as given); None if none."""
    if low is None and high is None:
        return _FREE_FRACTION
    if high is None and low == ("", True):
        return f'"0"{{0,{MAX_FREE_DIGITS - 1}}} [1-9] [0-9]{{0,{MAX_FREE_DIGITS - 1}}}'
    if high is not None and high[0] == "":
        return f'"0"{{1,{MAX_FREE_DIGITS}}}' if low is None and not high[1] else None
    groups: list[tuple[int, int, str]] = []  # (first digit, last digit, what follows)
    for digit in "0123456789":
        follow = _after_digit(builder, digit, low, high)
        if follow is None:
            continue
        if groups and groups[-1][2] == follow and groups[-1][1] == ord(digit) - 1:
            groups[-1] = (groups[-1][0], ord(digit), follow)
        else:
            groups.append((ord(digit), ord(digit), follow))
    if not groups:
        return None
    body = " | ".join(_seq(_digit_class(chr(first), chr(last)), follow) for first, last, follow in groups)
    return builder.rule("fraction", body)


def _after_digit(builder: GrammarBuilder, digit: str, low: _FracBound, high: _FracBound) -> str | None:
    """What may follow `digit` as the first fraction digit (possibly nothing: '""')."""
    next_low: _FracBound = None
    if low is not None:
        first = low[0][:1] or "0"
        if digit < first:
            return None
        if digit == first:
            next_low = _normalize((low[0][1:], low[1]))
    next_high: _FracBound = None
    if high is not None:
        first = high[0][:1] or "0"
        if digit > first:
            return None
        if digit == first:
            next_high = (high[0][1:], high[1])
    digits = _fraction_digits(builder, next_low, next_high)
    if not _zero_fits(next_low, next_high):
        return digits
    if digits is None:
        return '""'
    return _optional(digits)


def _optional(expression: str) -> str:
    if expression.endswith("+") and _is_simple(expression):
        return expression[:-1] + "*"
    if _is_simple(expression) and expression[-1] not in "?*}":
        return expression + "?"
    return f"({expression})?"
