"""`RegexError`, raised by every stage of the translation, and its form for a pattern whose
combination with minLength/maxLength would take too large a grammar."""

from __future__ import annotations


class RegexError(ValueError):
    """The pattern is invalid, or uses a feature that has no exact grammar translation."""


_TOO_COMPLEX = "pattern together with minLength/maxLength is too complex to combine exactly"


def too_complex(detail: str) -> RegexError:
    return RegexError(f"{_TOO_COMPLEX}: {detail}")
