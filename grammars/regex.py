"""ECMAScript regular expressions (JSON Schema `pattern`) translated to llama.cpp GBNF.

The pattern is parsed into a small AST (`CharSet`, `Seq`, `Alt`, `Repeat`, `Anchor`) with
Unicode-mode ECMAScript semantics: characters are code points, `.` excludes the line
terminators, `\\d \\w \\s` have their ECMAScript (not Python) meaning. Anything the
translation cannot express exactly (lookaround, backreferences, word boundaries, property
escapes, flags) raises `RegexError` instead of giving an approximate grammar.

JSON Schema patterns are not anchored: a string matches when the pattern matches anywhere in
it, and `^` / `$` are zero-width assertions that may sit anywhere. Each path through the
pattern is therefore classified by whether it contains `^` and whether it contains `$`; a
path is only satisfiable when no character precedes its `^` and none follows its `$`. That
turns the pattern into up to four anchor-free languages (the "variants"), and the string
grammar is their union, padded with `json-char*` on every side that is not anchored:

    ^a|b$|c   ->   "a" json-char* | json-char* "b" | json-char* "c" json-char*

Padding absorbs optional material next to it (`json-char* x* y` is `json-char* y`), so such
edges are trimmed, which keeps the grammar small and less ambiguous.

Every character is written as canonical JSON writes it inside a string (see `grammars.gbnf`),
so the grammar describes the text between the quotes of the JSON string, not the raw value.

`minLength` / `maxLength` beside the pattern are combined exactly (`regex_to_gbnf`'s
`min_length` / `max_length`): bounds the pattern keeps anyway change nothing; a part with one
free repetition gets its counts bounded (`^[a-z]+$`, 3..20 -> `[a-z]{3,20}`); anything else
becomes a minimal DFA paired with the count of characters read, or `RegexError` when that
would be too large.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass, fields
from functools import cached_property

from grammars.gbnf import (
    JSON_CHAR,
    JSON_CHAR_BODY,
    MAX_CODE_POINT,
    GrammarBuilder,
    Ranges,
    char_class,
    complement,
    intersect,
    json_chars,
    json_string_literal,
    literal,
    normalize,
    repeat,
    subtract,
)


class RegexError(ValueError):
    """The pattern is invalid, or uses a feature that has no exact grammar translation."""


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
_DIGIT: Ranges = [(0x30, 0x39)]
_WORD: Ranges = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
_SPACE: Ranges = normalize(
    [
        (0x09, 0x0D),
        (0x20, 0x20),
        (0xA0, 0xA0),
        (0x1680, 0x1680),
        (0x2000, 0x200A),
        (0x2028, 0x2029),
        (0x202F, 0x202F),
        (0x205F, 0x205F),
        (0x3000, 0x3000),
        (0xFEFF, 0xFEFF),
    ]
)
_LINE_TERMINATORS: Ranges = [(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]
_CLASS_ESCAPES: dict[str, Ranges] = {
    "d": _DIGIT,
    "D": subtract(ANY, _DIGIT),
    "w": _WORD,
    "W": subtract(ANY, _WORD),
    "s": _SPACE,
    "S": subtract(ANY, _SPACE),
}
_CONTROL_ESCAPES = {"t": 0x09, "n": 0x0A, "r": 0x0D, "f": 0x0C, "v": 0x0B}


def _charset(ranges: Ranges) -> CharSet:
    return CharSet(tuple(intersect(normalize(ranges), ANY)))


def _char(code: int) -> CharSet:
    return CharSet(((code, code),) if not 0xD800 <= code <= 0xDFFF else ())


DOT = _charset(subtract(ANY, _LINE_TERMINATORS))


# ---------------------------------------------------------------------------------------------
# Parser

_MAX_DEPTH = 100
_QUANTIFIER_SHAPE = re.compile(r"\{(\d*)(,?)(\d*)\}")
_HEX = frozenset("0123456789abcdefABCDEF")
_NONZERO_DIGITS = frozenset("123456789")


class _Parser:
    """Recursive descent over the ECMAScript pattern grammar (Annex B leniency only where
    ECMAScript and Python agree: a `{`, `}` or `]` that cannot be syntax is a literal)."""

    def __init__(self, pattern: str):
        self.pattern = pattern
        self.pos = 0
        self.depth = 0

    def error(self, what: str, pos: int | None = None) -> RegexError:
        return RegexError(f"{what} at position {self.pos if pos is None else pos}")

    def peek(self, offset: int = 0) -> str:
        index = self.pos + offset
        return self.pattern[index] if index < len(self.pattern) else ""

    def parse(self) -> Node:
        node = self.alternation()
        if self.pos < len(self.pattern):
            raise self.error("unmatched ')'")
        return node

    def alternation(self) -> Node:
        options = [self.sequence()]
        while self.peek() == "|":
            self.pos += 1
            options.append(self.sequence())
        return options[0] if len(options) == 1 else Alt(tuple(options))

    def sequence(self) -> Node:
        items: list[Node] = []
        while self.peek() not in ("", "|", ")"):
            items.append(self.quantified())
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def quantified(self) -> Node:
        start = self.pos
        bare_anchor = self.peek() in ("^", "$")  # an assertion; `(?:^)*` is fine
        atom = self.atom()
        bounds = self.quantifier()
        if bounds is None:
            return atom
        if bare_anchor:
            raise self.error("nothing to repeat", start)
        if self.peek() == "?":  # lazy: the same language
            self.pos += 1
        if self.peek() in ("*", "+", "?") or self.quantifier_ahead():
            raise self.error("nothing to repeat")
        return Repeat(atom, *bounds)

    def quantifier_ahead(self) -> bool:
        return self.peek() == "{" and _QUANTIFIER_SHAPE.match(self.pattern, self.pos) is not None

    def quantifier(self) -> tuple[int, int | None] | None:
        char = self.peek()
        simple = {"*": (0, None), "+": (1, None), "?": (0, 1)}.get(char)
        if simple is not None:
            self.pos += 1
            return simple
        if char != "{":
            return None
        found = _QUANTIFIER_SHAPE.match(self.pattern, self.pos)
        if found is None:
            return None  # a literal `{`
        low_text, comma, high_text = found.groups()
        if not low_text:
            raise self.error(f"invalid quantifier {found.group()}")
        low = int(low_text)
        high = (int(high_text) if high_text else None) if comma else low
        if high is not None and high < low:
            raise self.error(f"quantifier range out of order {found.group()}")
        self.pos = found.end()
        return low, high

    def atom(self) -> Node:
        char = self.peek()
        if char == "(":
            return self.group()
        if char == "[":
            return self.class_set()
        if char in ("*", "+", "?") or self.quantifier_ahead():
            raise self.error("nothing to repeat")
        self.pos += 1
        if char == ".":
            return DOT
        if char in ("^", "$"):
            return Anchor(end=char == "$")
        if char == "\\":
            return self.escape()
        return _char(ord(char))

    def group(self) -> Node:
        start = self.pos
        self.pos += 1
        if self.peek() == "?":
            self.group_kind(start)
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise self.error(f"groups nested more than {_MAX_DEPTH} deep", start)
        node = self.alternation()
        self.depth -= 1
        if self.peek() != ")":
            raise self.error("unterminated group", start)
        self.pos += 1
        return node

    def group_kind(self, start: int) -> None:
        """Consume what follows `(?`: only non-capturing and named groups are supported."""
        ahead = self.pattern[self.pos : self.pos + 4]
        for prefix, name in (
            ("?<=", "lookbehind (?<=...)"),
            ("?<!", "lookbehind (?<!...)"),
            ("?=", "lookahead (?=...)"),
            ("?!", "lookahead (?!...)"),
        ):
            if ahead.startswith(prefix):
                raise self.error(name, start)
        if ahead.startswith("?:"):
            self.pos += 2
            return
        if ahead.startswith("?<"):
            close = self.pattern.find(">", self.pos)
            name = self.pattern[self.pos + 2 : close] if close >= 0 else ""
            if not name or not name.replace("$", "_").isidentifier():
                raise self.error("invalid group name", start)
            self.pos = close + 1
            return
        raise self.error(f"inline flags or unsupported group syntax (?{self.peek(1)}", start)

    def escape(self) -> Node:
        """After a `\\` outside a class."""
        start = self.pos - 1
        char = self.peek()
        if char in ("b", "B"):
            raise self.error(f"word boundary \\{char}", start)
        if char in _CLASS_ESCAPES:
            self.pos += 1
            return _charset(_CLASS_ESCAPES[char])
        return _char(self.char_escape(start))

    def char_escape(self, start: int) -> int:
        """The code point of the escape after `\\` (at `start`), shared by both contexts."""
        char = self.peek()
        if not char:
            raise self.error("\\ at end of pattern", start)
        self.pos += 1
        if char in _CONTROL_ESCAPES:
            return _CONTROL_ESCAPES[char]
        if char == "0":
            if self.peek().isascii() and self.peek().isdigit():
                raise self.error("octal escape", start)
            return 0
        if char in _NONZERO_DIGITS or (char == "k" and self.peek() == "<"):
            raise self.error(f"backreference \\{char}", start)
        if char in ("p", "P"):
            raise self.error(f"unicode property escape \\{char}", start)
        if char == "c":
            letter = self.peek()
            if not (letter.isascii() and letter.isalpha()):
                raise self.error("invalid control escape \\c", start)
            self.pos += 1
            return ord(letter) % 32
        if char == "x":
            return self.hex_digits(2, start)
        if char == "u":
            return self.unicode_escape(start)
        if char.isascii() and (char.isalnum() or char == "_"):
            raise self.error(f"unknown escape \\{char}", start)
        return ord(char)  # identity escape of a syntax or other non-word character

    def hex_digits(self, count: int, start: int) -> int:
        digits = self.pattern[self.pos : self.pos + count]
        if len(digits) != count or any(d not in _HEX for d in digits):
            raise self.error("invalid hexadecimal escape", start)
        self.pos += count
        return int(digits, 16)

    def unicode_escape(self, start: int) -> int:
        if self.peek() == "{":
            close = self.pattern.find("}", self.pos)
            digits = self.pattern[self.pos + 1 : close] if close >= 0 else ""
            if not digits or any(d not in _HEX for d in digits) or int(digits, 16) > MAX_CODE_POINT:
                raise self.error("invalid unicode escape", start)
            self.pos = close + 1
            return int(digits, 16)
        code = self.hex_digits(4, start)
        if 0xD800 <= code <= 0xDBFF and self.pattern.startswith("\\u", self.pos):
            # a surrogate pair written as two escapes is one code point
            saved = self.pos
            self.pos += 2
            try:
                low = self.hex_digits(4, start)
            except RegexError:
                low = 0
            if 0xDC00 <= low <= 0xDFFF:
                return 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
            self.pos = saved
        return code

    def class_set(self) -> CharSet:
        start = self.pos
        self.pos += 1
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        ranges: Ranges = []
        while True:
            if not self.peek():
                raise self.error("unterminated character class", start)
            if self.peek() == "]":
                self.pos += 1
                break
            atom_start = self.pos
            first = self.class_atom()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.pos += 1
                last = self.class_atom()
                if isinstance(first, list) or isinstance(last, list):
                    raise self.error("character class escape in a range", atom_start)
                if last < first:
                    raise self.error("character class range out of order", atom_start)
                ranges.append((first, last))
            elif isinstance(first, list):
                ranges.extend(first)
            else:
                ranges.append((first, first))
        ranges = normalize(ranges)
        return _charset(complement(ranges) if negated else ranges)

    def class_atom(self) -> int | Ranges:
        char = self.peek()
        self.pos += 1
        if char != "\\":
            return ord(char)
        start = self.pos - 1
        escaped = self.peek()
        if escaped in _CLASS_ESCAPES:
            self.pos += 1
            return _CLASS_ESCAPES[escaped]
        if escaped == "b":
            self.pos += 1
            return 0x08
        if escaped == "B":
            raise self.error("\\B in a character class", start)
        return self.char_escape(start)


def parse(pattern: str) -> Node:
    """The AST of an ECMAScript pattern; raises `RegexError`."""
    return _Parser(pattern).parse()


# ---------------------------------------------------------------------------------------------
# Normalizing constructors (all on anchor-free nodes with nonempty languages)


def _seq(*nodes: Node) -> Node:
    items: list[Node] = []
    for node in nodes:
        items.extend(node.items if isinstance(node, Seq) else (node,))
    return items[0] if len(items) == 1 else Seq(tuple(items))


def _alt(nodes: list[Node]) -> Node:
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
    options = [_charset(chars) if isinstance(o, CharSet) else o for o in options]
    if EMPTY in options and len(options) > 1:
        options.remove(EMPTY)
        return _repeat(_alt(options), 0, 1)
    return options[0] if len(options) == 1 else Alt(tuple(options))


def _repeat(item: Node, low: int, high: int | None) -> Node:
    if high == 0 or item == EMPTY:
        return EMPTY
    if item.nullable:
        if high == 1:
            return item
        if high is None:
            # x* for an x that may be empty: llama.cpp sees left recursion in (y*)*, and the
            # ambiguity costs parser stacks, so repeat a generator that cannot be empty
            generator = _generator(item)
            return _repeat(generator, 0, None) if generator is not None else EMPTY
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
            return _alt(kept) if kept else None
        case Repeat(item, _, _):
            return item  # normalized: the item itself cannot be empty
    return None


# ---------------------------------------------------------------------------------------------
# Anchors: a node becomes up to four anchor-free languages keyed by (has ^, has $)

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
            result = _concat(result, {_PLAIN: _seq(*plain)})
            plain = []
        if item is not None:
            result = _concat(result, _variants(item))
    return result


def _union(*all_variants: Variants) -> Variants:
    grouped: dict[Signature, list[Node]] = {}
    for variants in all_variants:
        for signature, language in variants.items():
            grouped.setdefault(signature, []).append(language)
    return {signature: _alt(languages) for signature, languages in grouped.items()}


def _concat(first: Variants, second: Variants) -> Variants:
    """Paths of `first` then `second`, keeping those where no character precedes a `^` and
    none follows a `$`: across the join that forces one side to match the empty string."""
    grouped: dict[Signature, list[Node]] = {}
    for (start_a, end_a), a in first.items():
        for (start_b, end_b), b in second.items():
            if not end_a and not start_b:
                grouped.setdefault((start_a, end_b), []).append(_seq(a, b))
            elif end_a and not start_b:
                if b.nullable:
                    grouped.setdefault((start_a, True), []).append(a)
            elif not end_a and start_b:
                if a.nullable:
                    grouped.setdefault((True, end_b), []).append(b)
            elif a.nullable and b.nullable:
                grouped.setdefault((True, True), []).append(EMPTY)
    return {signature: _alt(languages) for signature, languages in grouped.items()}


def _repeat_variants(item: Variants, low: int, high: int | None) -> Variants:
    plain = item.get(_PLAIN)
    if set(item) <= {_PLAIN}:
        if plain is None:
            return {_PLAIN: EMPTY} if low == 0 else {}
        return {_PLAIN: _repeat(plain, low, high)}
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
    middle = _repeat(plain, 0, None) if plain is not None else EMPTY
    starting, ending, both = item.get((True, False)), item.get((False, True)), item.get((True, True))
    result: Variants = {_PLAIN: middle}
    if starting is not None:
        result[(True, False)] = _seq(starting, middle)
    if ending is not None:
        result[(False, True)] = _seq(middle, ending)
    whole = [_seq(starting, middle, ending)] if starting is not None and ending is not None else []
    if both is not None:
        whole.append(both)
    if whole:
        result[(True, True)] = _alt(whole)
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
            return _seq(_trim_start(items[first]), *items[first + 1 :])
        case Alt(options):
            return _alt([_trim_start(option) for option in options])
        case Repeat(item, low, _):
            trimmed = _trim_start(item)
            return _repeat(item, low, low) if trimmed == item else _seq(trimmed, _repeat(item, low - 1, low - 1))
    return node


def _trim_end(node: Node) -> Node:
    """A node with `node json-char*` == `result json-char*`."""
    if node.nullable:
        return EMPTY
    match node:
        case Seq(items):
            last = max(i for i, item in enumerate(items) if not item.nullable)
            return _seq(*items[:last], _trim_end(items[last]))
        case Alt(options):
            return _alt([_trim_end(option) for option in options])
        case Repeat(item, low, _):
            trimmed = _trim_end(item)
            return _repeat(item, low, low) if trimmed == item else _seq(_repeat(item, low - 1, low - 1), trimmed)
    return node


@dataclass
class _Languages:
    """The pattern as anchor-free languages: exact (^...$), followed by anything (^...),
    preceded by anything (...$), and surrounded (...). EMPTY in a padded one: all strings."""

    exact: Node | None
    prefix: Node | None
    suffix: Node | None
    infix: Node | None

    @property
    def everything(self) -> bool:
        return EMPTY in (self.prefix, self.suffix, self.infix)


def _languages(pattern: str) -> _Languages:
    variants = _variants(parse(pattern))
    prefix, suffix, infix = variants.get((True, False)), variants.get((False, True)), variants.get(_PLAIN)
    return _Languages(
        exact=variants.get((True, True)),
        prefix=_trim_end(prefix) if prefix is not None else None,
        suffix=_trim_start(suffix) if suffix is not None else None,
        infix=_trim_end(_trim_start(infix)) if infix is not None else None,
    )


# ---------------------------------------------------------------------------------------------
# GBNF


_SIMPLE_EXPRESSION = re.compile(r'^(?:[a-zA-Z0-9-]+|"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\])$')
_SHORT_JSON_ESCAPES = {0x22: '"', 0x5C: "\\", 0x08: "b", 0x0C: "f", 0x0A: "n", 0x0D: "r", 0x09: "t"}
_JSON_ESCAPED = normalize([(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)])
_NEVER = char_class([(0, MAX_CODE_POINT)], negated=True)
NEVER = _NEVER  # what a pattern that matches no string (within the bounds) translates to


class _Emitter:
    def __init__(self, builder: GrammarBuilder):
        self.builder = builder
        self.done: dict[Node, str] = {}

    def any_char(self) -> str:
        return self.builder.fixed(JSON_CHAR, JSON_CHAR_BODY)

    def emit(self, node: Node) -> str:
        """An expression for `node` that can stand in a sequence (no top-level `|`)."""
        expression = self.done.get(node)
        if expression is None:
            expression = self.done[node] = self.fresh(node)
        elif not _SIMPLE_EXPRESSION.match(expression):
            # a node reached twice (the anchor analysis shares subtrees) gets a rule, so the
            # text stays linear in the number of distinct nodes
            expression = self.done[node] = self.builder.rule("seq", expression)
        return expression

    def fresh(self, node: Node) -> str:
        match node:
            case CharSet(ranges):
                return self.char_set(list(ranges))
            case Seq(items):
                return self.sequence(items)
            case Alt(options):
                return self.builder.rule("alt", " | ".join(self.emit(option) for option in options))
            case Repeat(item, low, high):
                return repeat(self.builder, self.emit(item), low, high)
        raise TypeError(node)

    def sequence(self, items: tuple[Node, ...]) -> str:
        parts: list[str] = []
        text = ""
        for item in items:
            if isinstance(item, CharSet) and len(item.ranges) == 1 and item.ranges[0][0] == item.ranges[0][1]:
                text += chr(item.ranges[0][0])
                continue
            if text:
                parts.append(json_string_literal(text))
                text = ""
            parts.append(self.emit(item))
        if text:
            parts.append(json_string_literal(text))
        return " ".join(parts) if parts else '""'

    def char_set(self, ranges: Ranges) -> str:
        if ranges == ANY:
            return self.any_char()
        if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
            return json_string_literal(chr(ranges[0][0]))
        escaped = intersect(ranges, _JSON_ESCAPED)
        if sum(last - first + 1 for first, last in escaped) <= 2:
            expression = json_chars(ranges)
        else:
            expression = self.compact_char_set(ranges, escaped)
        return expression if _SIMPLE_EXPRESSION.match(expression) else self.builder.rule("char", expression)

    @staticmethod
    def compact_char_set(ranges: Ranges, escaped: Ranges) -> str:
        """Like `json_chars`, but all escaped characters share one `\\` branch, instead of a
        literal each (`[^a]` would otherwise be 34 alternatives, each one parser stack)."""
        codes = [code for first, last in escaped for code in range(first, last + 1)]
        after_backslash = []
        short = [ord(_SHORT_JSON_ESCAPES[c]) for c in codes if c in _SHORT_JSON_ESCAPES]
        if short:
            after_backslash.append(char_class(normalize((c, c) for c in short)))
        by_high_digit = []
        for high in (0, 1):
            low_digits = [f"{c & 0xF:x}" for c in codes if c >> 4 == high and c not in _SHORT_JSON_ESCAPES]
            if low_digits:
                digits = normalize((ord(d), ord(d)) for d in low_digits)
                by_high_digit.append(f"{literal(str(high))} {char_class(digits)}")
        if by_high_digit:
            after_backslash.append(f"{literal('u00')} ({' | '.join(by_high_digit)})")
        escapes = after_backslash[0] if len(after_backslash) == 1 else f"({' | '.join(after_backslash)})"
        alternatives = [f"{literal(chr(0x5C))} {escapes}"]
        raw = subtract(ranges, _JSON_ESCAPED)
        if raw:
            alternatives.insert(0, json_chars(raw))
        return " | ".join(alternatives)


# ---------------------------------------------------------------------------------------------
# Length bounds: L(pattern) ∩ {strings of min_length..max_length code points}
#
# Structurally where one part carries all the freedom (`[a-z]+` -> `[a-z]{3,20}`, a fixed
# prefix or suffix around one quantified part, alternatives each on their own); elsewhere
# (two variable parts in a row, such as padding on both sides of an unanchored pattern, or a
# repetition of variable-length items) the part becomes a minimal DFA whose states are paired
# with the number of characters read so far, written as right-linear rules.

_MAX_NFA_STATES = 20_000
_MAX_DFA_STATES = 2_000
_MAX_PRODUCT_STATES = 3_000
_TOO_COMPLEX = "pattern together with minLength/maxLength is too complex to combine exactly"

Bound = int | None  # an upper length bound; None: unbounded


def _too_complex(detail: str) -> RegexError:
    return RegexError(f"{_TOO_COMPLEX}: {detail}")


def _contained(node: Node, low: int, high: Bound) -> bool:
    node_low, node_high = node.lengths
    return low <= node_low and (high is None or (node_high is not None and node_high <= high))


def _disjoint(node: Node, low: int, high: Bound) -> bool:
    node_low, node_high = node.lengths
    return (high is not None and node_low > high) or (node_high is not None and node_high < low)


def _fixed(node: Node) -> bool:
    return node.lengths[0] == node.lengths[1]


def _splits(node: Node, low: int, high: Bound) -> bool:
    """Whether `_Bounded.node` handles the node without a product automaton at its top."""
    if _contained(node, low, high) or _disjoint(node, low, high):
        return True
    match node:
        case Seq(items):
            return sum(not _fixed(item) for item in items) <= 1
        case Repeat(item, _, _):
            return _fixed(item)
    return True  # Alt splits into its options


class _Alphabet:
    """The code points split into classes ("atoms") that no character set of the node tells
    apart; every character set is a union of atoms."""

    def __init__(self, node: Node):
        sets: dict[tuple[tuple[int, int], ...], None] = {}
        _collect_sets(node, sets, set())
        points = sorted({p for ranges in sets for first, last in ranges for p in (first, last + 1)})
        members: list[list[int]] = [[] for _ in points]
        for index, ranges in enumerate(sets):
            for first, last in ranges:
                for k in range(bisect_left(points, first), bisect_left(points, last + 1)):
                    members[k].append(index)
        by_signature: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        for k, signature in enumerate(members):
            if signature:
                by_signature.setdefault(tuple(signature), []).append((points[k], points[k + 1] - 1))
        self.ranges: list[Ranges] = list(by_signature.values())
        atoms_of: list[list[int]] = [[] for _ in sets]
        for atom, signature in enumerate(by_signature):
            for index in signature:
                atoms_of[index].append(atom)
        self.atoms = {ranges: frozenset(atoms) for ranges, atoms in zip(sets, atoms_of)}

    def union(self, atoms: list[int]) -> Ranges:
        return normalize(r for atom in atoms for r in self.ranges[atom])


def _collect_sets(node: Node, found: dict, seen: set) -> None:
    if node in seen:
        return
    seen.add(node)
    match node:
        case CharSet(ranges):
            if ranges:
                found[ranges] = None
        case Seq(children) | Alt(children):
            for child in children:
                _collect_sets(child, found, seen)
        case Repeat(item, _, _):
            _collect_sets(item, found, seen)


class _Nfa:
    """Thompson construction over atoms; parts that cannot fit in `high` characters are left
    out, and bounded repetitions get no more copies than `high` characters can use."""

    def __init__(self, alphabet: _Alphabet, high: Bound):
        self.alphabet = alphabet
        self.high = high
        self.edges: list[list[tuple[frozenset[int], int]]] = []
        self.empty: list[list[int]] = []

    def new(self) -> int:
        if len(self.edges) >= _MAX_NFA_STATES:
            raise _too_complex(f"the pattern needs more than {_MAX_NFA_STATES} automaton states")
        self.edges.append([])
        self.empty.append([])
        return len(self.edges) - 1

    def build(self, node: Node, start: int) -> int:
        """Add the node after state `start`; returns its end state."""
        if self.high is not None and node.lengths[0] > self.high:
            return self.new()  # a dead end
        match node:
            case CharSet(ranges):
                end = self.new()
                if ranges:
                    self.edges[start].append((self.alphabet.atoms[ranges], end))
                return end
            case Seq(items):
                for item in items:
                    start = self.build(item, start)
                return start
            case Alt(options):
                end = self.new()
                for option in options:
                    entry = self.new()
                    self.empty[start].append(entry)
                    self.empty[self.build(option, entry)].append(end)
                return end
            case Repeat(item, low, high):
                return self.repetition(item, low, high, start)
        raise TypeError(node)

    def repetition(self, item: Node, low: int, high: Bound, start: int) -> int:
        if high is not None and self.high is not None:
            shortest = item.lengths[0]
            useful = self.high // shortest if shortest else self.high
            high = min(high, max(low, useful))
        for _ in range(low):
            start = self.build(item, start)
        if high is None:
            loop = self.new()
            self.empty[start].append(loop)
            self.empty[self.build(item, loop)].append(loop)
            return loop
        end = self.new()
        for _ in range(high - low):
            self.empty[start].append(end)
            entry = self.new()
            self.empty[start].append(entry)
            start = self.build(item, entry)
        self.empty[start].append(end)
        return end


@dataclass
class _Dfa:
    start: int
    accepting: list[bool]
    moves: list[dict[int, int]]  # atom -> state; a missing atom: no way to accept


def _dfa(node: Node, alphabet: _Alphabet, high: Bound) -> _Dfa | None:
    """The minimal DFA of the node without dead states; None when nothing fits.

    With an upper bound, states first reached after `high` characters are not expanded: a
    state first reached after d characters is only used with at most high - d characters left,
    and on those strings the truncated automaton agrees with the full one (so do merged states,
    which agree on the truncated language)."""
    nfa = _Nfa(alphabet, high)
    first = nfa.new()
    final = nfa.build(node, first)

    closures: dict[frozenset[int], frozenset[int]] = {}

    def closure(states: frozenset[int]) -> frozenset[int]:
        done = closures.get(states)
        if done is None:
            seen, stack = set(states), list(states)
            while stack:
                for target in nfa.empty[stack.pop()]:
                    if target not in seen:
                        seen.add(target)
                        stack.append(target)
            done = closures[states] = frozenset(seen)
        return done

    # subsets holding a state that accepts every string (such as the padding after an
    # unanchored pattern) all behave alike: one state stands for them, or the subsets would
    # go on telling apart the partial matches that no longer matter
    universal = _universal_states(nfa, final, closure, len(alphabet.ranges))
    everything = frozenset((-1,))

    def state_of(states: frozenset[int]) -> frozenset[int]:
        subset = closure(states)
        return everything if subset & universal else subset

    start = state_of(frozenset((first,)))
    numbers = {start: 0}
    sets = [start]
    depths = [0]  # breadth first: the fewest characters that reach each state
    moves: list[dict[int, int]] = []
    while len(moves) < len(sets):
        if high is not None and depths[len(moves)] >= high:
            moves.append({})  # only ever reached with no characters left
            continue
        if sets[len(moves)] is everything:
            moves.append(dict.fromkeys(range(len(alphabet.ranges)), len(moves)))
            continue
        targets: dict[int, set[int]] = {}
        for state in sets[len(moves)]:
            for atoms, target in nfa.edges[state]:
                for atom in atoms:
                    targets.setdefault(atom, set()).add(target)
        row: dict[int, int] = {}
        for atom in sorted(targets):
            subset = state_of(frozenset(targets[atom]))
            number = numbers.get(subset)
            if number is None:
                if len(sets) >= _MAX_DFA_STATES:
                    raise _too_complex(f"the pattern needs more than {_MAX_DFA_STATES} automaton states")
                number = numbers[subset] = len(sets)
                sets.append(subset)
                depths.append(depths[len(moves)] + 1)
            row[atom] = number
        moves.append(row)
    accepting = [final in subset or subset is everything for subset in sets]
    return _minimize(_Dfa(0, accepting, moves))


def _universal_states(nfa: _Nfa, final: int, closure, atoms: int) -> frozenset[int]:
    """NFA states that surely accept every string: the greatest set of states that reach the
    final state without reading and, for every atom, can read it into the set again."""
    back: dict[int, list[int]] = {}
    for source, targets in enumerate(nfa.empty):
        for target in targets:
            back.setdefault(target, []).append(source)
    candidates, stack = {final}, [final]
    while stack:
        for source in back.get(stack.pop(), ()):
            if source not in candidates:
                candidates.add(source)
                stack.append(source)
    while True:
        failing = set()
        for state in candidates:
            covered: set[int] = set()
            for member in closure(frozenset((state,))):
                for labels, target in nfa.edges[member]:
                    if closure(frozenset((target,))) & candidates:
                        covered.update(labels)
            if len(covered) < atoms:
                failing.add(state)
        if not failing:
            return frozenset(candidates)
        candidates -= failing


def _minimize(dfa: _Dfa) -> _Dfa | None:
    """Drop the states that cannot reach an accepting one, then merge the states that behave
    identically (Moore's partition refinement)."""
    count = len(dfa.moves)
    back: list[list[int]] = [[] for _ in range(count)]
    for state, row in enumerate(dfa.moves):
        for target in row.values():
            back[target].append(state)
    live = {state for state in range(count) if dfa.accepting[state]}
    stack = list(live)
    while stack:
        for source in back[stack.pop()]:
            if source not in live:
                live.add(source)
                stack.append(source)
    if dfa.start not in live:
        return None
    states = sorted(live)
    block = {state: int(dfa.accepting[state]) for state in states}
    blocks = len(set(block.values()))
    while True:
        signatures = {
            state: (block[state], tuple((atom, block[t]) for atom, t in dfa.moves[state].items() if t in live))
            for state in states
        }
        numbering: dict[tuple, int] = {}
        for state in states:
            numbering.setdefault(signatures[state], len(numbering))
        block = {state: numbering[signatures[state]] for state in states}
        if len(numbering) == blocks:
            break
        blocks = len(numbering)
    # renumber by first appearance from the start, so output is stable
    order = {block[dfa.start]: 0}
    queue = [dfa.start]
    representative = {0: dfa.start}
    for state in queue:
        for target in dfa.moves[state].values():
            if target in live and block[target] not in order:
                order[block[target]] = len(order)
                representative[order[block[target]]] = target
                queue.append(target)
    moves = [
        {atom: order[block[t]] for atom, t in dfa.moves[representative[i]].items() if t in live}
        for i in range(len(order))
    ]
    accepting = [dfa.accepting[representative[i]] for i in range(len(order))]
    return _Dfa(0, accepting, moves)


class _Bounded:
    """GBNF for a node's language restricted to lengths `low`..`high` (None: unbounded)."""

    def __init__(self, emitter: _Emitter):
        self.emitter = emitter
        self.builder = emitter.builder

    def union(self, options: list[Node], low: int, high: Bound, hint: str = "alt") -> str | None:
        parts: list[str] = []
        rest: list[Node] = []
        for option in options:
            if _splits(option, low, high):
                part = self.node(option, low, high)
                if part is not None:
                    parts.append(part)
            else:
                rest.append(option)
        if rest:  # one automaton for all of them
            part = self.product(rest[0] if len(rest) == 1 else Alt(tuple(rest)), low, high)
            if part is not None:
                parts.append(part)
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else self.builder.rule(hint, " | ".join(parts))

    def node(self, node: Node, low: int, high: Bound) -> str | None:
        if _contained(node, low, high):
            return self.emitter.emit(node)
        if _disjoint(node, low, high):
            return None
        match node:
            case Alt(options):
                return self.union(list(options), low, high)
            case Seq(items):
                variable = [i for i, item in enumerate(items) if not _fixed(item)]
                if len(variable) == 1:
                    index = variable[0]
                    fixed = sum(item.lengths[0] for i, item in enumerate(items) if i != index)
                    inner = self.node(items[index], max(0, low - fixed), None if high is None else high - fixed)
                    if inner is None:
                        return None
                    before = self.emitter.sequence(items[:index]) if index else '""'
                    after = self.emitter.sequence(items[index + 1 :]) if index + 1 < len(items) else '""'
                    return _join(before, inner, after)
            case Repeat(item, count_low, count_high) if _fixed(item):
                size = item.lengths[0]  # > 0, or the node would be contained or disjoint
                count_low = max(count_low, -(-low // size))
                if high is not None:
                    count_high = high // size if count_high is None else min(count_high, high // size)
                if count_high is not None and count_low > count_high:
                    return None
                return repeat(self.builder, self.emitter.emit(item), count_low, count_high)
        return self.product(node, low, high)

    def product(self, node: Node, low: int, high: Bound) -> str | None:
        """Right-linear rules for pairs (DFA state, characters read), the count capped at
        `high`, or at `low` when there is no upper bound."""
        alphabet = _Alphabet(node)
        dfa = _dfa(node, alphabet, high)
        if dfa is None:
            return None
        cap = high if high is not None else low
        # a tail state accepts and only loops on itself: what follows it is any string of its
        # loop characters, and a repetition writes that for every count at once
        tails: dict[int, Ranges] = {
            state: alphabet.union(list(row))
            for state, row in enumerate(dfa.moves)
            if dfa.accepting[state] and all(t == state for t in row.values())
        }
        distance = _distance_to_accept(dfa)

        def next_count(count: int) -> int | None:
            if high is None:
                return min(count + 1, cap)
            return count + 1 if count < high else None

        def tail_fits(state: int, count: int) -> bool:
            return bool(tails[state]) or count >= low

        # the pairs reachable from the start that may still reach an accepting pair
        if dfa.start in tails:
            return self.tail(tails[dfa.start], 0, low, high) if tail_fits(dfa.start, 0) else None
        pairs: dict[tuple[int, int], None] = {(dfa.start, 0): None}
        queue = [(dfa.start, 0)]
        for state, count in queue:
            following = next_count(count)
            if following is None:
                continue
            for target in dict.fromkeys(dfa.moves[state].values()):
                pair = (target, following)
                if target in tails or pair in pairs:
                    continue
                if high is not None and distance[target] > high - following:
                    continue
                pairs[pair] = None
                queue.append(pair)
                if len(pairs) > _MAX_PRODUCT_STATES:
                    raise _too_complex(
                        f"more than {_MAX_PRODUCT_STATES} combinations of pattern position and length"
                    )

        # bodies from the longest count down: the targets of a pair come first, except
        # at the cap without an upper bound, where the pairs loop among themselves
        ordered = sorted(pairs, key=lambda pair: (-pair[1], pair[0]))
        expressions: dict[tuple[int, int], str | None] = {}
        looping = {pair for pair in ordered if high is None and pair[1] == cap}
        for state, count in sorted(looping):
            expressions[(state, count)] = self.builder.reserve(f"len-{state}-{count}")
        tail_expressions: dict[tuple[int, int], str | None] = {}

        def target_expression(state: int, count: int) -> str | None:
            if state in tails:
                key = (state, count)
                if key not in tail_expressions:
                    tail_expressions[key] = self.tail(tails[state], count, low, high) if tail_fits(state, count) else None
                return tail_expressions[key]
            return expressions.get((state, count))

        for state, count in ordered:
            following = next_count(count)
            by_target: dict[str, list[int]] = {}
            if following is not None:
                for atom, target in dfa.moves[state].items():
                    expression = target_expression(target, following)
                    if expression is not None:
                        by_target.setdefault(expression, []).append(atom)
            alternatives = [
                _join(self.emitter.char_set(alphabet.union(atoms)), expression)
                for expression, atoms in by_target.items()
            ]
            if dfa.accepting[state] and count >= low:
                alternatives.append('""')
            body = " | ".join(alternatives)
            if (state, count) in looping:
                self.builder.define(expressions[(state, count)], body)  # type: ignore[arg-type]
            elif not alternatives:
                expressions[(state, count)] = None  # cannot reach an accepting pair
            elif body == '""':
                expressions[(state, count)] = '""'
            else:
                expressions[(state, count)] = self.builder.rule(f"len-{state}-{count}", body)
        return expressions[(dfa.start, 0)]

    def tail(self, ranges: Ranges, count: int, low: int, high: Bound) -> str:
        """Any string of `ranges` characters that brings `count` within the bounds."""
        if not ranges:
            return '""'
        return repeat(
            self.builder,
            self.emitter.char_set(ranges),
            max(0, low - count),
            None if high is None else high - count,
        )


def _distance_to_accept(dfa: _Dfa) -> list[int]:
    """The fewest characters from each state to an accepting one (every state has a way)."""
    back: list[list[int]] = [[] for _ in dfa.moves]
    for state, row in enumerate(dfa.moves):
        for target in set(row.values()):
            back[target].append(state)
    distance = [0 if accepting else -1 for accepting in dfa.accepting]
    queue = [state for state, accepting in enumerate(dfa.accepting) if accepting]
    for state in queue:
        for source in back[state]:
            if distance[source] < 0:
                distance[source] = distance[state] + 1
                queue.append(source)
    return distance


def _join(*parts: str) -> str:
    kept = [part for part in parts if part != '""']
    return " ".join(kept) if kept else '""'


# ---------------------------------------------------------------------------------------------
# Entry points


def regex_to_gbnf(pattern: str, builder: GrammarBuilder, *, min_length: int = 0, max_length: int | None = None) -> str:
    """A GBNF expression matching the *content* (between the quotes, as canonical JSON writes it)
    of every JSON string whose value the ECMAScript pattern matches under JSON Schema semantics
    (a pattern matches anywhere in the string unless anchored: ^ / $) and whose length in code
    points is between `min_length` and `max_length` (None: no upper bound).

    The length bounds are combined exactly; where that would take too large a grammar,
    `RegexError` is raised rather than giving a wider or narrower language."""
    if min_length < 0 or (max_length is not None and max_length < 0):
        raise ValueError("length bounds must not be negative")
    languages = _languages(pattern)
    emitter = _Emitter(builder)
    if max_length is not None and max_length < min_length:
        return _NEVER
    low, high = _length_range(languages)
    if min_length <= low and (max_length is None or (high is not None and high <= max_length)):
        return _plain(languages, emitter)
    anything = Repeat(_charset(ANY), 0, None)
    if languages.everything:
        options: list[Node] = [anything]
    else:
        options = []
        if languages.exact is not None:
            options.append(languages.exact)
        if languages.prefix is not None:
            options.append(_seq(languages.prefix, anything))
        if languages.suffix is not None:
            options.append(_seq(anything, languages.suffix))
        if languages.infix is not None:
            options.append(_seq(anything, languages.infix, anything))
    expression = _Bounded(emitter).union(options, min_length, max_length, hint="pattern")
    return _NEVER if expression is None else expression


def _plain(languages: _Languages, emitter: _Emitter) -> str:
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
        return _NEVER  # the pattern can never match
    return options[0] if len(options) == 1 else builder.rule("pattern", " | ".join(options))


def regex_length_range(pattern: str) -> tuple[int, int | None]:
    """Min and max length in code points of strings the pattern's language (with the
    unanchored padding) contains; None = unbounded. Used to decide if minLength/maxLength are redundant.

    A pattern that can never match gives (0, 0)."""
    return _length_range(_languages(pattern))


def _length_range(languages: _Languages) -> tuple[int, int | None]:
    if languages.everything:
        return 0, None
    present = [n for n in (languages.exact, languages.prefix, languages.suffix, languages.infix) if n is not None]
    if not present:
        return 0, 0
    low = min(node.lengths[0] for node in present)
    if languages.prefix is not None or languages.suffix is not None or languages.infix is not None:
        return low, None
    return low, languages.exact.lengths[1]  # type: ignore[union-attr]
