"""The AST of a regular expression (`CharSet`, `Seq`, `Alt`, `Repeat`, `Anchor`) with its small
analyses (nullable, length range, contains an anchor), character sets, and the normalizing
constructors that the anchor analysis builds its languages with."""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cached_property

from grammars.gbnf import Ranges, complement, intersect, normalize

# ---------------------------------------------------------------------------------------------
# AST


class _Node:
    """Equality and hash by value, computed once: after the anchor analysis the AST is a DAG
    with shared subtrees, and a dataclass hash would walk the whole subtree on every lookup."""

    def _key(self) -> tuple:
        return tuple(getattr(self, f.name) for f in fields(self))  # type: ignore[arg-type]

    def __eq__(self, other: object) -> bool:
        return self is other or (type(self) is type(other) and self._key() == other._key())  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return self._hash

    @cached_property
    def _hash(self) -> int:
        return hash((type(self).__name__, self._key()))

    @cached_property
    def nullable(self) -> bool:
        """Whether the empty string is in the (anchor-free) language."""
        return _nullable(self)  # type: ignore[arg-type]

    @cached_property
    def lengths(self) -> tuple[int, int | None]:
        return _lengths(self)  # type: ignore[arg-type]

    @cached_property
    def has_anchor(self) -> bool:
        return _has_anchor(self)  # type: ignore[arg-type]


@dataclass(frozen=True, eq=False)
class CharSet(_Node):
    """One character from a set of code point ranges (normalized, possibly empty)."""

    ranges: tuple[tuple[int, int], ...]


@dataclass(frozen=True, eq=False)
class Seq(_Node):
    items: tuple[Node, ...]


@dataclass(frozen=True, eq=False)
class Alt(_Node):
    options: tuple[Node, ...]


@dataclass(frozen=True, eq=False)
class Repeat(_Node):
    item: Node
    low: int
    high: int | None  # None: unbounded


@dataclass(frozen=True, eq=False)
class Anchor(_Node):
    end: bool  # False: `^`, True: `$`


Node = CharSet | Seq | Alt | Repeat | Anchor
EMPTY = Seq(())


def _has_anchor(node: Node) -> bool:
    match node:
        case Anchor():
            return True
        case Seq(children) | Alt(children):
            return any(child.has_anchor for child in children)
        case Repeat(item, _, _):
            return item.has_anchor
    return False


def _nullable(node: Node) -> bool:
    match node:
        case CharSet() | Anchor():
            return False
        case Seq(items):
            return all(item.nullable for item in items)
        case Alt(options):
            return any(option.nullable for option in options)
        case Repeat(item, low, _):
            return low == 0 or item.nullable
    raise TypeError(node)


def _lengths(node: Node) -> tuple[int, int | None]:
    """Shortest and longest string (None: unbounded) of an anchor-free, nonempty language."""
    match node:
        case CharSet():
            return 1, 1
        case Anchor():
            return 0, 0
        case Seq(items):
            low, high = 0, 0
            for item in items:
                item_low, item_high = item.lengths
                low += item_low
                high = None if high is None or item_high is None else high + item_high
            return low, high
        case Alt(options):
            bounds = [option.lengths for option in options]
            highs = [high for _, high in bounds]
            return min(low for low, _ in bounds), None if None in highs else max(highs)  # type: ignore[type-var]
        case Repeat(item, low, high):
            item_low, item_high = item.lengths
            if item_high == 0:
                return 0, 0
            return item_low * low, None if high is None or item_high is None else item_high * high
    raise TypeError(node)


# ---------------------------------------------------------------------------------------------
# Character sets

_SURROGATES: Ranges = [(0xD800, 0xDFFF)]
# Lone surrogates cannot occur in UTF-8 text, so sets never contain them.
ANY: Ranges = complement(_SURROGATES)


def charset(ranges: Ranges) -> CharSet:
    return CharSet(tuple(intersect(normalize(ranges), ANY)))


# ---------------------------------------------------------------------------------------------
# Normalizing constructors (all on anchor-free nodes with nonempty languages)


def make_seq(*nodes: Node) -> Node:
    items: list[Node] = []
    for node in nodes:
        items.extend(node.items if isinstance(node, Seq) else (node,))
    return items[0] if len(items) == 1 else Seq(tuple(items))


def make_alt(nodes: list[Node]) -> Node:
    """The union; single characters merge into one set, and an empty option becomes `?`."""
    options: list[Node] = []
    seen: set[Node] = set()
    chars: Ranges = []
    for node in nodes:
        for option in node.options if isinstance(node, Alt) else (node,):
            if isinstance(option, CharSet):
                if not chars:
                    options.append(option)  # placeholder, replaced by the merged set
                chars.extend(option.ranges)
            elif option not in seen:
                seen.add(option)
                options.append(option)
    options = [charset(chars) if isinstance(o, CharSet) else o for o in options]
    if EMPTY in options and len(options) > 1:
        options.remove(EMPTY)
        return make_repeat(make_alt(options), 0, 1)
    return options[0] if len(options) == 1 else Alt(tuple(options))


def make_repeat(item: Node, low: int, high: int | None) -> Node:
    if high == 0 or item == EMPTY:
        return EMPTY
    if item.nullable:
        if high == 1:
            return item
        if high is None:
            # x* for an x that may be empty: llama.cpp sees left recursion in (y*)*, and the
            # ambiguity costs parser stacks, so repeat a generator that cannot be empty
            generator = _generator(item)
            return make_repeat(generator, 0, None) if generator is not None else EMPTY
    if low == high == 1:
        return item
    if isinstance(item, Repeat) and item.high is None and high is None and (low > 0 or item.low <= 1):
        # (x{a,}){b,} is x{ab,}: every count from ab up splits into b or more parts of a or more
        # (and (x+)* is x*)
        return Repeat(item.item, item.low * low, None)
    return Repeat(item, low, high)


def _generator(node: Node) -> Node | None:
    """A language G without the empty string such that G* equals node*; None when node* is
    just the empty string."""
    if not node.nullable:
        return node
    match node:
        case Seq(children) | Alt(children):
            # every part of a nullable sequence can be chosen alone, so (a?b*)* is (a|b)*
            kept = [g for g in (_generator(child) for child in children) if g is not None]
            return make_alt(kept) if kept else None
        case Repeat(item, _, _):
            return item  # normalized: the item itself cannot be empty
    return None
