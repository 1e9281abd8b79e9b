"""Writing llama.cpp GBNF: string literals, character classes, JSON string characters, and a
rule builder that names, deduplicates and bounds the rules of one grammar.

Every grammar here describes *canonical* JSON text: characters inside strings are written as
`json.dumps(..., ensure_ascii=False)` writes them (`\\"`, `\\\\`, `\\b \\f \\n \\r \\t`, other
control characters as lowercase `\\u00xx`, everything else as itself).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_CODE_POINT = 0x10FFFF

# (first, last) inclusive code point ranges
Ranges = list[tuple[int, int]]

_SHORT_ESCAPES = {0x08: "\\b", 0x0C: "\\f", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x22: '\\"', 0x5C: "\\\\"}


class GrammarTooLarge(Exception):
    """The grammar would exceed the builder's limit on rules or text."""


def _escape_char(code: int, specials: str) -> str:
    char = chr(code)
    if char in specials:
        return "\\" + char
    if code == 0x0A:
        return "\\n"
    if code == 0x0D:
        return "\\r"
    if code == 0x09:
        return "\\t"
    if code < 0x20 or code == 0x7F or char == "^" or 0xD800 <= code <= 0xDFFF or code in (0x2028, 0x2029, 0xFEFF):
        return f"\\x{code:02X}" if code < 0x100 else f"\\u{code:04X}"
    return char


def literal(text: str) -> str:
    """A GBNF string literal matching `text` exactly."""
    return '"' + "".join(_escape_char(ord(c), '"\\') for c in text) + '"'


_CLASS_SPECIALS = "]\\-["  # `^` is written as \x5E: GBNF has no `\^`


def char_class(ranges: Ranges, *, negated: bool = False) -> str:
    """A GBNF character class `[...]` for code point ranges."""
    parts = []
    for first, last in ranges:
        low = _escape_char(first, _CLASS_SPECIALS)
        parts.append(low if first == last else low + "-" + _escape_char(last, _CLASS_SPECIALS))
    return "[" + ("^" if negated else "") + "".join(parts) + "]"


def normalize(ranges: Iterable[tuple[int, int]]) -> Ranges:
    """Sorted, merged ranges."""
    merged: Ranges = []
    for first, last in sorted(ranges):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


def complement(ranges: Ranges) -> Ranges:
    """Every code point not in `ranges` (which must be normalized)."""
    result, start = [], 0
    for first, last in ranges:
        if first > start:
            result.append((start, first - 1))
        start = last + 1
    if start <= MAX_CODE_POINT:
        result.append((start, MAX_CODE_POINT))
    return result


def subtract(ranges: Ranges, removed: Ranges) -> Ranges:
    return intersect(ranges, complement(normalize(removed)))


def intersect(a: Ranges, b: Ranges) -> Ranges:
    result = []
    for first_a, last_a in a:
        for first_b, last_b in b:
            first, last = max(first_a, first_b), min(last_a, last_b)
            if first <= last:
                result.append((first, last))
    return normalize(result)


def json_escape(code: int) -> str:
    """How canonical JSON writes one character inside a string."""
    if code in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[code]
    if code < 0x20:
        return f"\\u{code:04x}"
    return chr(code)


# What canonical JSON writes as the character itself inside a string.
_RAW = [(0x20, 0x21), (0x23, 0x5B), (0x5D, MAX_CODE_POINT)]
_ESCAPED = [0x22, 0x5C, *range(0x20)]
JSON_CHAR = "json-char"  # rule name of any one character inside a JSON string
_NOT_RAW = [(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]
_ALL_ESCAPES = '"\\\\" ["\\\\bfnrt] | "\\\\u00" ("0" [0-7bef] | "1" [0-9a-f])'
JSON_CHAR_BODY = '[^"\\\\\\x00-\\x1F] | ' + _ALL_ESCAPES


def json_chars(ranges: Ranges) -> str:
    """A GBNF expression for one character of `ranges` as it appears inside a JSON string."""
    ranges = normalize(ranges)
    if ranges == [(0, MAX_CODE_POINT)]:
        return JSON_CHAR
    alternatives = []
    raw = intersect(ranges, _RAW)
    if raw:
        missing = subtract(_RAW, raw)
        # "everything but a few" reads (and parses) better as a negated class
        if len(missing) < len(raw):
            alternatives.append(char_class(normalize([*missing, *_NOT_RAW]), negated=True))
        else:
            alternatives.append(char_class(raw))
    escaped = [code for code in _ESCAPED if any(first <= code <= last for first, last in ranges)]
    if len(escaped) == len(_ESCAPED):
        alternatives.append(_ALL_ESCAPES)
    else:
        alternatives.extend(literal(json_escape(code)) for code in escaped)
    if not alternatives:
        raise ValueError("empty character set")
    return alternatives[0] if len(alternatives) == 1 else "(" + " | ".join(alternatives) + ")"


def json_string_literal(text: str) -> str:
    """A GBNF literal of `text` as canonical JSON writes it inside quotes (quotes not included)."""
    return literal("".join(json_escape(ord(c)) for c in text))


_NAME_CHARS = re.compile(r"[^a-zA-Z0-9-]+")


class GrammarBuilder:
    """Collects the rules of one grammar.

    `rule` names a body and returns the name; the same body always gets the same name, so
    shared sub-schemas become one rule. Names are made from a hint (GBNF allows letters,
    digits and dashes). Exceeding `max_rules` or `max_chars` raises `GrammarTooLarge` early,
    so a hostile schema costs little time.
    """

    def __init__(self, *, max_rules: int = 5000, max_chars: int = 500_000):
        # well-known rules (`fixed`) keep their names: no hint may take one
        self._reserved = {"root", "value", "object", "array", "string", "number", "ws", JSON_CHAR}
        self.max_rules = max_rules
        self.max_chars = max_chars
        self._rules: dict[str, str | None] = {}
        self._by_body: dict[str, str] = {}
        self._chars = 0

    def _fresh(self, hint: str) -> str:
        base = _NAME_CHARS.sub("-", hint).strip("-").lower() or "r"
        if base in self._reserved:
            base += "-1"
        name, i = base, 1
        while name in self._rules or name in self._reserved:
            i += 1
            name = f"{base}-{i}"
        return name

    def rule(self, hint: str, body: str) -> str:
        """The name of a rule with this body, defining it if new."""
        name = self._by_body.get(body)
        if name is not None:
            return name
        name = self._fresh(hint)
        self._by_body[body] = name
        self.define(name, body)
        return name

    def reserve(self, hint: str) -> str:
        """A name to refer to before its body is known (recursion); `define` it later."""
        name = self._fresh(hint)
        self._rules[name] = None
        self._check()
        return name

    def define(self, name: str, body: str) -> None:
        self._rules[name] = body
        self._chars += len(name) + len(body) + 6
        self._check()

    def fixed(self, name: str, body: str) -> str:
        """A rule with a well-known name (shared helpers such as `json-char`), defined once."""
        if name not in self._rules:
            self.define(name, body)
            self._by_body.setdefault(body, name)
        return name

    def snapshot(self) -> tuple[dict[str, str | None], dict[str, str], int]:
        return dict(self._rules), dict(self._by_body), self._chars

    def restore(self, saved: tuple[dict[str, str | None], dict[str, str], int]) -> None:
        """Forget the rules defined since `snapshot` (an alternative that turned out empty)."""
        self._rules, self._by_body, self._chars = dict(saved[0]), dict(saved[1]), saved[2]

    def _check(self) -> None:
        if len(self._rules) > self.max_rules:
            raise GrammarTooLarge(f"the grammar would need more than {self.max_rules} rules")
        if self._chars > self.max_chars:
            raise GrammarTooLarge(f"the grammar would be longer than {self.max_chars} characters")

    def render(self, root_body: str, *, root: str = "root") -> str:
        lines = [f"{root} ::= {root_body}"]
        for name, body in self._rules.items():
            if body is None:
                raise RuntimeError(f"rule {name} was reserved but never defined")
            lines.append(f"{name} ::= {body}")
        return "\n".join(lines) + "\n"


# llama.cpp turns `{m,n}` with n above 2000 into "unbounded" and refuses big expansions, so
# longer bounded repetitions are built from chunks.
_CHUNK = 64
_DIRECT_LIMIT = 256


def repeat(builder: GrammarBuilder, item: str, low: int, high: int | None) -> str:
    """An expression for `low` to `high` (None: unbounded) repetitions of the expression
    `item`, exact for any bounds; each sentence has one parse."""
    if high is not None and high < low:
        raise ValueError("empty repetition range")
    if high == 0:
        return '""'
    atom = item if _is_atom(item) else builder.rule("rep", item)
    if high is None:
        if low <= _DIRECT_LIMIT:
            return {0: f"{atom}*", 1: f"{atom}+"}.get(low, f"{atom}{{{low},}}")
        return f"{repeat(builder, atom, low, low)} {atom}*"
    if high <= _DIRECT_LIMIT:
        if low == high:
            return atom if low == 1 else f"{atom}{{{low}}}"
        if (low, high) == (0, 1):
            return f"{atom}?"
        return f"{atom}{{{low},{high}}}"
    # k = CHUNK * a + b with 0 <= b < CHUNK, so every count has one split
    chunk = builder.rule("chunk", f"{atom}{{{_CHUNK}}}")
    low_a, low_b = divmod(low, _CHUNK)
    high_a, high_b = divmod(high, _CHUNK)
    alternatives = []
    if low_a == high_a:
        alternatives.append(_seq(repeat(builder, chunk, low_a, low_a), repeat(builder, atom, low_b, high_b)))
    else:
        alternatives.append(_seq(repeat(builder, chunk, low_a, low_a), repeat(builder, atom, low_b, _CHUNK - 1)))
        if high_a - low_a > 1:
            alternatives.append(_seq(repeat(builder, chunk, low_a + 1, high_a - 1), repeat(builder, atom, 0, _CHUNK - 1)))
        alternatives.append(_seq(repeat(builder, chunk, high_a, high_a), repeat(builder, atom, 0, high_b)))
    return "(" + " | ".join(alternatives) + ")"


def _seq(*parts: str) -> str:
    kept = [p for p in parts if p != '""']
    return " ".join(kept) if kept else '""'


_ATOM = re.compile(r'^(?:[a-zA-Z0-9-]+|"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\])$')


def _is_atom(expression: str) -> bool:
    """A rule name, one literal or one class: safe to put a quantifier after."""
    return bool(_ATOM.match(expression))


_GBNF_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|#[^\n]*|[a-zA-Z0-9-]+|.', re.S)
_DEFINITION = re.compile(r"^\s*([a-zA-Z0-9-]+)\s*::=", re.M)


def prefix_rules(grammar: str, prefix: str) -> str:
    """`grammar` with every rule it defines renamed `prefix + name` (definitions and references;
    literals, character classes and comments untouched), so that it can sit beside another
    grammar whose rule names may be the same."""
    defined = set(_DEFINITION.findall(grammar))
    return "".join(prefix + token if token in defined else token for token in _GBNF_TOKEN.findall(grammar))
