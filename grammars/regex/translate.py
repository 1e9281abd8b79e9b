"""The entry points: a pattern (with optional length bounds) as a GBNF expression for the
content of a JSON string, and the range of lengths of the strings it matches."""

from __future__ import annotations

from grammars.gbnf import GrammarBuilder
from grammars.regex.anchors import Languages, pattern_languages
from grammars.regex.bounded import Bounded
from grammars.regex.emit import NEVER, Emitter
from grammars.regex.nodes import ANY, Node, Repeat, charset, make_seq


def regex_to_gbnf(pattern: str, builder: GrammarBuilder, *, min_length: int = 0, max_length: int | None = None) -> str:
    """A GBNF expression matching the *content* (between the quotes, as canonical JSON writes it)
    of every JSON string whose value the ECMAScript pattern matches under JSON Schema semantics
    (a pattern matches anywhere in the string unless anchored: ^ / $) and whose length in code
    points is between `min_length` and `max_length` (None: no upper bound).

    The length bounds are combined exactly; where that would take too large a grammar,
    `RegexError` is raised rather than giving a wider or narrower language."""
    if min_length < 0 or (max_length is not None and max_length < 0):
        raise ValueError("length bounds must not be negative")
    languages = pattern_languages(pattern)
    emitter = Emitter(builder)
    if max_length is not None and max_length < min_length:
        return NEVER
    low, high = _length_range(languages)
    if min_length <= low and (max_length is None or (high is not None and high <= max_length)):
        return _plain(languages, emitter)
    anything = Repeat(charset(ANY), 0, None)
    if languages.everything:
        options: list[Node] = [anything]
    else:
        options = []
        if languages.exact is not None:
            options.append(languages.exact)
        if languages.prefix is not None:
            options.append(make_seq(languages.prefix, anything))
        if languages.suffix is not None:
            options.append(make_seq(anything, languages.suffix))
        if languages.infix is not None:
            options.append(make_seq(anything, languages.infix, anything))
    expression = Bounded(emitter).union(options, min_length, max_length, hint="pattern")
    return NEVER if expression is None else expression


def _plain(languages: Languages, emitter: Emitter) -> str:
    builder = emitter.builder
    if languages.everything:
        return f"{emitter.any_char()}*"
    options = []
    if languages.exact is not None:
        options.append(emitter.emit(languages.exact))
    if languages.prefix is not None:
        options.append(f"{emitter.emit(languages.prefix)} {emitter.any_char()}*")
    if languages.suffix is not None:
        options.append(f"{emitter.any_char()}* {emitter.emit(languages.suffix)}")
    if languages.infix is not None:
        padding = f"{emitter.any_char()}*"
        options.append(f"{padding} {emitter.emit(languages.infix)} {padding}")
    if not options:
        return NEVER  # the pattern can never match
    return options[0] if len(options) == 1 else builder.rule("pattern", " | ".join(options))


def regex_length_range(pattern: str) -> tuple[int, int | None]:
    """Min and max length in code points of strings the pattern's language (with the
    unanchored padding) contains; None = unbounded. Used to decide if minLength/maxLength are redundant.

    A pattern that can never match gives (0, 0)."""
    return _length_range(pattern_languages(pattern))


def _length_range(languages: Languages) -> tuple[int, int | None]:
    if languages.everything:
        return 0, None
    present = [n for n in (languages.exact, languages.prefix, languages.suffix, languages.infix) if n is not None]
    if not present:
        return 0, 0
    low = min(node.lengths[0] for node in present)
    if languages.prefix is not None or languages.suffix is not None or languages.infix is not None:
        return low, None
    return low, languages.exact.lengths[1]  # type: ignore[union-attr]
