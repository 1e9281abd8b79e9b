"""Anchors: a node becomes up to four anchor-free languages keyed by (has ^, has $).

Each path through the pattern is classified by whether it contains `^` and whether it
contains `$`; a path is only satisfiable when no character precedes its `^` and none follows
its `$`. That turns the pattern into up to four anchor-free languages (the "variants"): exact
(^...$), followed by anything (^...), preceded by anything (...$) and surrounded (...).

Padding absorbs optional material next to it (`json-char* x* y` is `json-char* y`), so such
edges are trimmed, which keeps the grammar small and less ambiguous."""

from __future__ import annotations

from dataclasses import dataclass

from grammars.regex.errors import RegexError
from grammars.regex.nodes import (
    EMPTY,
    Alt,
    Anchor,
    CharSet,
    Node,
    Repeat,
    Seq,
    make_alt,
    make_repeat,
    make_seq,
)
from grammars.regex.parser import parse

Signature = tuple[bool, bool]
Variants = dict[Signature, Node]  # a missing key: no such path
_PLAIN: Signature = (False, False)
_MAX_ANCHORED_COPIES = 16


def _variants(node: Node) -> Variants:
    match node:
        case CharSet(ranges):
            return {_PLAIN: node} if ranges else {}
        case Anchor(end):
            return {(not end, end): EMPTY}
        case Seq(items):
            return _sequence_variants(items)
        case Alt(options):
            return _union(*(_variants(option) for option in options))
        case Repeat(item, low, high):
            return _repeat_variants(_variants(item), low, high)
    raise TypeError(node)


def _sequence_variants(items: tuple[Node, ...]) -> Variants:
    result: Variants = {_PLAIN: EMPTY}
    plain: list[Node] = []  # anchor-free items are joined first: one concatenation for the run
    for item in (*items, None):
        if item is not None and not item.has_anchor:
            language = _variants(item).get(_PLAIN)
            if language is None:
                return {}
            plain.append(language)
            continue
        if plain:
            result = _concat(result, {_PLAIN: make_seq(*plain)})
            plain = []
        if item is not None:
            result = _concat(result, _variants(item))
    return result


def _union(*all_variants: Variants) -> Variants:
    grouped: dict[Signature, list[Node]] = {}
    for variants in all_variants:
        for signature, language in variants.items():
            grouped.setdefault(signature, []).append(language)
    return {signature: make_alt(languages) for signature, languages in grouped.items()}


def _concat(first: Variants, second: Variants) -> Variants:
    """Paths of `first` then `second`, keeping those where no character precedes a `^` and
    none follows a `$`: across the join that forces one side to match the empty string."""
    grouped: dict[Signature, list[Node]] = {}
    for (start_a, end_a), a in first.items():
        for (start_b, end_b), b in second.items():
            if not end_a and not start_b:
                grouped.setdefault((start_a, end_b), []).append(make_seq(a, b))
            elif end_a and not start_b:
                if b.nullable:
                    grouped.setdefault((start_a, True), []).append(a)
            elif not end_a and start_b:
                if a.nullable:
                    grouped.setdefault((True, end_b), []).append(b)
            elif a.nullable and b.nullable:
                grouped.setdefault((True, True), []).append(EMPTY)
    return {signature: make_alt(languages) for signature, languages in grouped.items()}


def _repeat_variants(item: Variants, low: int, high: int | None) -> Variants:
    plain = item.get(_PLAIN)
    if set(item) <= {_PLAIN}:
        if plain is None:
            return {_PLAIN: EMPTY} if low == 0 else {}
        return {_PLAIN: make_repeat(plain, low, high)}
    copies = low if high is None else high
    if copies > _MAX_ANCHORED_COPIES:
        raise RegexError(f"anchor (^ or $) inside a repetition of more than {_MAX_ANCHORED_COPIES}")
    result: Variants = {_PLAIN: EMPTY}
    for _ in range(low):
        result = _concat(result, item)
    if high is None:
        return _concat(result, _star(item))
    optional = _union(item, {_PLAIN: EMPTY})
    for _ in range(high - low):
        result = _concat(result, optional)
    return result


def _star(item: Variants) -> Variants:
    """Any number of copies: a `^` copy can only come first among the nonempty ones, a `$`
    copy only last, and a copy holding both only alone."""
    plain = item.get(_PLAIN)
    middle = make_repeat(plain, 0, None) if plain is not None else EMPTY
    starting, ending, both = item.get((True, False)), item.get((False, True)), item.get((True, True))
    result: Variants = {_PLAIN: middle}
    if starting is not None:
        result[(True, False)] = make_seq(starting, middle)
    if ending is not None:
        result[(False, True)] = make_seq(middle, ending)
    whole = [make_seq(starting, middle, ending)] if starting is not None and ending is not None else []
    if both is not None:
        whole.append(both)
    if whole:
        result[(True, True)] = make_alt(whole)
    return result


# ---------------------------------------------------------------------------------------------
# Unanchored edges: json-char* absorbs what may follow it


def _trim_start(node: Node) -> Node:
    """A node with `json-char* node` == `json-char* result`."""
    if node.nullable:
        return EMPTY
    match node:
        case Seq(items):
            first = next(i for i, item in enumerate(items) if not item.nullable)
            return make_seq(_trim_start(items[first]), *items[first + 1 :])
        case Alt(options):
            return make_alt([_trim_start(option) for option in options])
        case Repeat(item, low, _):
            trimmed = _trim_start(item)
            return (
                make_repeat(item, low, low)
                if trimmed == item
                else make_seq(trimmed, make_repeat(item, low - 1, low - 1))
            )
    return node


def _trim_end(node: Node) -> Node:
    """A node with `node json-char*` == `result json-char*`."""
    if node.nullable:
        return EMPTY
    match node:
        case Seq(items):
            last = max(i for i, item in enumerate(items) if not item.nullable)
            return make_seq(*items[:last], _trim_end(items[last]))
        case Alt(options):
            return make_alt([_trim_end(option) for option in options])
        case Repeat(item, low, _):
            trimmed = _trim_end(item)
            return (
                make_repeat(item, low, low)
                if trimmed == item
                else make_seq(make_repeat(item, low - 1, low - 1), trimmed)
            )
    return node


@dataclass
class Languages:
    """The pattern as anchor-free languages: exact (^...$), followed by anything (^...),
    preceded by anything (...$), and surrounded (...). EMPTY in a padded one: all strings."""

    exact: Node | None
    prefix: Node | None
    suffix: Node | None
    infix: Node | None

    @property
    def everything(self) -> bool:
        return EMPTY in (self.prefix, self.suffix, self.infix)


def pattern_languages(pattern: str) -> Languages:
    variants = _variants(parse(pattern))
    prefix, suffix, infix = variants.get((True, False)), variants.get((False, True)), variants.get(_PLAIN)
    return Languages(
        exact=variants.get((True, True)),
        prefix=_trim_end(prefix) if prefix is not None else None,
        suffix=_trim_start(suffix) if suffix is not None else None,
        infix=_trim_end(_trim_start(infix)) if infix is not None else None,
    )
