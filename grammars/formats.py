"""GBNF for the contents of JSON strings with a JSON Schema `format`: the text between the quotes.

Every format here is plain ASCII without `"`, `\\` or control characters, so the JSON text of
the string is the value itself, and its length in code points is its length in characters.

Narrowings (the grammar accepts a subset of the valid values, never more):
- date, date-time: years 0001-9999 (as Python's `date.fromisoformat`); no leap second (":60");
  only uppercase "T" and "Z".
- time, date-time: fractional seconds of 1 to 9 digits (a runaway guard: greedy decoding can
  otherwise append zeros forever).
- duration: the number of each component has 1 to 9 digits (the same guard).
- hostname: each label costs ceil((length + 1) / 16) of 15 units, which keeps the total at or
  under 239 characters (the limit is 253); e.g. 15 labels of up to 15 characters, or three of 63.
- email: dot-atom local part of at most 64 characters; the domain is a hostname (as above) of
  at least two labels; no quoted local parts, no address literals.
- uri: hosts are registered names (which covers dotted IPv4 text) or "[" IPv6address "]";
  no IPvFuture literals ("[v1.x]").

Length bounds (`min_length`, `max_length`, JSON Schema's minLength and maxLength):
- Bounds that the format already keeps within give the plain grammar.
- date and uuid have one length; time, date-time, duration, ipv4 and ipv6 are bounded exactly
  (every valid value, as above, of a length within the bounds is accepted).
- hostname, email and uri take a `max_length` by budgets, a subset again:
  hostname: the unit scheme above with units of u characters instead of 16, at most 15 of
  them and units * u - 1 <= max_length, u chosen for the longest names; email: the local part gets about half of the length (at most 64), the
  domain the rest; uri: the scheme (up to 32 characters), userinfo, host (up to 255), port
  (up to 5 digits), path, query and fragment each get a fixed budget, and the largest values of
  all of them together fit. A part's budget (percent-encodings count three characters) is
  exact up to 64 characters; a longer one is spent in blocks of 32 to 34 characters, each
  counted as 34, and up to 31 characters after them. A `min_length` above the format's
  shortest value is not supported for these three (ValueError).
- Bounds no value (of the grammar's language) meets raise ValueError.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from grammars.gbnf import GrammarBuilder, char_class, literal, repeat

_HEX = "[0-9a-fA-F]"
_ALNUM = "[a-zA-Z0-9]"
_LDH = "[a-zA-Z0-9-]"
_ATEXT = char_class(
    [(ord(c), ord(c)) for c in sorted("!#$%&'*+/=?^_`{|}~-")] + [(0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A)]
)
# RFC 3986 unreserved and sub-delims (what a host takes literally), and with ":" and "@" too.
_PLAIN = "[a-zA-Z0-9\\-._~!$&'()*+,;=]"
_USERINFO_CLASS = "[a-zA-Z0-9\\-._~!$&'()*+,;=:]"
_PCHAR_CLASS = "[a-zA-Z0-9\\-._~!$&'()*+,;=:@]"
_PATH_CLASS = "[a-zA-Z0-9\\-._~!$&'()*+,;=:@/]"  # a pchar or "/": the characters after a path's "/"
_QUERY_CLASS = "[a-zA-Z0-9\\-._~!$&'()*+,;=:@/?]"
_PCT = f'"%" {_HEX} {_HEX}'

_HOSTNAME_UNITS = 15  # 16 characters (a label and its dot) per unit: 15 * 16 - 1 <= 253
_UNIT = 16
_HOSTNAME_MAX = _HOSTNAME_UNITS * _UNIT - 1
_EMAIL_LOCAL_MAX = 64
_EMAIL_MIN = 5  # "a@b.c"
_URI_MIN = 2  # "a:"
_DIGITS_MAX = 9  # fractional seconds, and each number of a duration

_ATOM = re.compile(r'^(?:[a-zA-Z0-9-]+|"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\])$')


def _optional(expression: str) -> str:
    return f"{expression}?" if _ATOM.match(expression) else f"({expression})?"


def _join(*parts: str) -> str:
    kept = [p for p in parts if p != '""']
    return " ".join(kept) if kept else '""'


# --- expressions that know the lengths of their strings -----------------------------------------
#
# The formats of bounded length (time, date-time, duration, ipv4, ipv6) are written as small
# trees; `_Writer` renders a tree as GBNF, either whole or restricted to a set of lengths (the
# length of a sequence is split over its parts, part by part). Each tree is unambiguous (every
# string has one parse), and so is every restriction of it.


class _Node:
    lengths: frozenset[int]


class _Fixed(_Node):
    """A GBNF expression all of whose strings have `length` characters."""

    def __init__(self, expr: str, length: int):
        self.expr = expr
        self.lengths = frozenset({length})


class _Rep(_Node):
    """`low` to `high` repetitions of a one-character expression."""

    def __init__(self, atom: str, low: int, high: int):
        self.atom, self.low, self.high = atom, low, high
        self.lengths = frozenset(range(low, high + 1))


class _Seq(_Node):
    def __init__(self, first: _Node, rest: _Node):
        self.first, self.rest = first, rest
        self.lengths = frozenset(a + b for a in first.lengths for b in rest.lengths)


class _Alt(_Node):
    def __init__(self, *options: _Node):
        self.options = options
        self.lengths = frozenset().union(*(o.lengths for o in options))


class _Rule(_Node):
    """A named rule (in a restriction, a rule named after it)."""

    def __init__(self, hint: str, node: _Node):
        self.hint, self.node = hint, node
        self.lengths = node.lengths


_EMPTY = _Fixed('""', 0)


def _lit(text: str) -> _Fixed:
    return _Fixed(literal(text), len(text))


def _seq(*nodes: _Node) -> _Node:
    node = nodes[-1]
    for first in reversed(nodes[:-1]):
        node = _Seq(first, node)
    return node


def _opt(node: _Node) -> _Node:
    return _Alt(_EMPTY, node)


class _Writer:
    def __init__(self, builder: GrammarBuilder):
        self.b = builder
        self._memo: dict[tuple[int, frozenset[int] | None], tuple[_Node, list[str]]] = {}

    def expr(self, node: _Node, lengths: frozenset[int] | None = None) -> str | None:
        """An expression for the strings of `node` (with a length in `lengths`, when given);
        None when there are none."""
        alternatives = self.alternatives(node, lengths)
        if not alternatives:
            return None
        if len(alternatives) == 1:
            return alternatives[0]
        if '""' in alternatives:
            rest = [a for a in alternatives if a != '""']
            return _optional(" | ".join(rest)) if len(rest) > 1 else _optional(rest[0])
        return "(" + " | ".join(alternatives) + ")"

    def alternatives(self, node: _Node, lengths: frozenset[int] | None) -> list[str]:
        if lengths is not None:
            lengths = lengths & node.lengths
            if lengths == node.lengths:
                lengths = None
            elif not lengths:
                return []
        key = (id(node), lengths)
        if key not in self._memo:
            self._memo[key] = (node, self._alternatives(node, lengths))
        return self._memo[key][1]

    def _alternatives(self, node: _Node, lengths: frozenset[int] | None) -> list[str]:
        if isinstance(node, _Fixed):
            return [node.expr]
        if isinstance(node, _Rep):
            if lengths is None:
                return [repeat(self.b, node.atom, node.low, node.high)]
            return [repeat(self.b, node.atom, low, high) for low, high in _intervals(lengths)]
        if isinstance(node, _Alt):
            return [a for option in node.options for a in self.alternatives(option, lengths)]
        if isinstance(node, _Seq):
            if lengths is None:
                return [_join(self.expr(node.first) or '""', self.expr(node.rest) or '""')]
            # split the length: the first part's lengths grouped by what they leave to the rest
            groups: dict[frozenset[int], list[int]] = {}
            for length in sorted(node.first.lengths):
                rest = frozenset(total - length for total in lengths) & node.rest.lengths
                if rest:
                    groups.setdefault(rest, []).append(length)
            alternatives = [
                _join(self.expr(node.first, frozenset(firsts)) or '""', self.expr(node.rest, rest) or '""')
                for rest, firsts in groups.items()
            ]
            if len(alternatives) > 1:
                return [self.b.rule("len", " | ".join(alternatives))]
            return alternatives
        if isinstance(node, _Rule):
            body = self.expr(node.node, lengths)
            assert body is not None
            if body.startswith("(") and body.endswith(")") and self._one_group(body):
                body = body[1:-1]
            hint = node.hint if lengths is None else f"{node.hint}-len"
            return [self.b.rule(hint, body)]
        raise TypeError(node)

    @staticmethod
    def _one_group(text: str) -> bool:
        """Whether `text` (which starts with "(") is one parenthesized group."""
        depth, quoted, bracket, escaped = 0, False, False, False
        for i, c in enumerate(text):
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif quoted:
                quoted = c != '"'
            elif bracket:
                bracket = c != "]"
            elif c == '"':
                quoted = True
            elif c == "[":
                bracket = True
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    return i == len(text) - 1
        return False


def _intervals(values: frozenset[int]) -> list[tuple[int, int]]:
    result: list[tuple[int, int]] = []
    for value in sorted(values):
        if result and value == result[-1][1] + 1:
            result[-1] = (result[-1][0], value)
        else:
            result.append((value, value))
    return result


# --- date and time ----------------------------------------------------------------------------


def _date(b: GrammarBuilder) -> str:
    year = b.rule("year", '"000" [1-9] | "00" [1-9] [0-9] | "0" [1-9] [0-9]{2} | [1-9] [0-9]{3}')
    # a multiple of 4 in two digits: an even tens digit with 0/4/8, or an odd one with 2/6
    four = '"0" [48] | [2468] [048] | [13579] [26]'
    leap_year = b.rule("leap-year", f"[0-9]{{2}} ({four}) | ({four}) \"00\"")
    month_day = b.rule(
        "month-day",
        '("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01])'
        ' | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30")'
        ' | "02-" ("0" [1-9] | "1" [0-9] | "2" [0-8])',
    )
    return b.rule("date", f'{year} "-" {month_day} | {leap_year} "-02-29"')


def _date_node(b: GrammarBuilder) -> _Node:
    return _Fixed(_date(b), 10)


def _time_node(b: GrammarBuilder) -> _Node:
    hour = '([01] [0-9] | "2" [0-3])'
    clock = _Fixed(f'{hour} ":" [0-5] [0-9] ":" [0-5] [0-9]', 8)
    fraction = _opt(_seq(_lit("."), _Rep("[0-9]", 1, _DIGITS_MAX)))
    offset = _Alt(_lit("Z"), _Fixed(f'[+\\-] {hour} ":" [0-5] [0-9]', 6))
    return _Rule("time", _seq(clock, fraction, offset))


def _date_time_node(b: GrammarBuilder) -> _Node:
    return _Rule("date-time", _seq(_Fixed(f'{_date(b)} "T"', 11), _time_node(b)))


def _duration_node(b: GrammarBuilder) -> _Node:
    number = _Rep("[0-9]", 1, _DIGITS_MAX)
    seconds = _seq(number, _lit("S"))
    minutes_on = _Rule("dur-minutes-on", _seq(number, _Alt(_seq(_lit("M"), _opt(seconds)), _lit("S"))))
    time = _Rule("dur-time", _seq(_lit("T"), number, _Alt(
        _seq(_lit("H"), _opt(minutes_on)), _seq(_lit("M"), _opt(seconds)), _lit("S"))))
    days = _seq(number, _lit("D"))
    # after the number that follows "P": which unit it was decides what may come next
    after_years = _seq(number, _Alt(_seq(_lit("M"), _opt(days)), _lit("D")))
    units = _Alt(
        _seq(_lit("Y"), _opt(after_years), _opt(time)),
        _seq(_lit("M"), _opt(days), _opt(time)),
        _seq(_lit("D"), _opt(time)),
        _lit("W"),
    )
    return _Rule("duration", _seq(_lit("P"), _Alt(_seq(number, units), time)))


def _uuid_node(b: GrammarBuilder) -> _Node:
    return _Fixed(b.rule("uuid", f'{_HEX}{{8}} "-" {_HEX}{{4}} "-" {_HEX}{{4}} "-" {_HEX}{{4}} "-" {_HEX}{{12}}'), 36)


# --- IP addresses -----------------------------------------------------------------------------


def _ipv4_node(b: GrammarBuilder) -> _Node:
    octet = _Rule("ipv4-octet", _Alt(
        _Fixed('"25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9]', 3), _Fixed("[1-9] [0-9]", 2), _Fixed("[0-9]", 1)))
    dot = _lit(".")
    return _Rule("ipv4", _seq(octet, dot, octet, dot, octet, dot, octet))


def _ipv6_node(b: GrammarBuilder) -> _Node:
    """RFC 4291 section 2.2: eight groups, a "::" standing for one or more zero groups, and the
    last two groups possibly written as IPv4. Rules count the groups read so far, so each text
    has one parse."""
    h16 = _Rule("h16", _Rep(_HEX, 1, 4))
    ipv4 = _ipv4_node(b)
    colon, double = _lit(":"), _lit("::")
    # tail[m]: after "::", one to m more groups (an IPv4 tail counts two)
    tail: dict[int, _Node] = {1: h16}
    for m in range(2, 8):
        tail[m] = _Rule(f"ipv6-tail-{m}", _Alt(_seq(h16, _opt(_seq(colon, tail[m - 1]))), ipv4))
    # lead[k]: k groups read (1 <= k <= 7), no "::" yet, right after a group
    lead = {7: _Rule("ipv6-lead-7", _Alt(_seq(colon, h16), double))}
    for k in range(6, 0, -1):
        alternatives = [_seq(colon, h16, lead[k + 1]), _seq(double, _opt(tail[7 - k]))]
        if k == 6:
            alternatives.append(_seq(colon, ipv4))
        lead[k] = _Rule(f"ipv6-lead-{k}", _Alt(*alternatives))
    return _Rule("ipv6", _Alt(_seq(h16, lead[1]), _seq(double, _opt(tail[7]))))


# --- hostname and email -----------------------------------------------------------------------


def _label(b: GrammarBuilder, unit: int, units: int) -> str | None:
    """A hostname label whose length, plus one for its dot, takes exactly `units` units of
    `unit` characters (rounded up); None if no label does."""
    shortest, longest = max(1, unit * (units - 1)), min(63, unit * units - 1)
    if shortest > longest:
        return None
    if longest == 1:
        return b.rule("label-1", _ALNUM)
    if shortest == 1:
        return b.rule("label", f"{_ALNUM} ({repeat(b, _LDH, 0, longest - 2)} {_ALNUM})?")
    return b.rule(f"label-{units}", f"{_ALNUM} {repeat(b, _LDH, shortest - 2, longest - 2)} {_ALNUM}")


def _hostnames(b: GrammarBuilder, unit: int, total: int) -> list[str | None]:
    """hosts[u]: one or more labels within u units (1 <= u <= total); None if none fits."""
    hosts: list[str | None] = [None]
    for budget in range(1, total + 1):
        alternatives = []
        for units in range(1, budget + 1):
            label = _label(b, unit, units)
            if label is None:
                continue
            more = hosts[budget - units]
            alternatives.append(f'{label} ("." {more})?' if more else label)
        hosts.append(b.rule(f"hostname-{budget}" if unit == _UNIT else f"hostname-{unit}-{budget}",
                            " | ".join(alternatives)) if alternatives else None)
    return hosts


def _host_units(max_length: int) -> tuple[int, int]:
    """(unit, units) for hostnames of at most `max_length` characters: units * unit - 1 <=
    max_length, at most 15 units, the most characters (then the finest unit)."""
    if max_length >= _HOSTNAME_MAX:
        return _UNIT, _HOSTNAME_UNITS
    finest = -(-(max_length + 1) // _HOSTNAME_UNITS)
    best = max(range(finest, finest + 4), key=lambda unit: ((max_length + 1) // unit * unit, -unit))
    return best, (max_length + 1) // best


def _hostname(b: GrammarBuilder, max_length: int = _HOSTNAME_MAX) -> str:
    unit, units = _host_units(max_length)
    host = _hostnames(b, unit, units)[units]
    assert host is not None
    return host


def _domain(b: GrammarBuilder, max_length: int = _HOSTNAME_MAX) -> str:
    """A hostname of at least two labels."""
    unit, units = _host_units(max_length)
    hosts = _hostnames(b, unit, units)
    alternatives = []
    for first in range(1, units):
        label, rest = _label(b, unit, first), hosts[units - first]
        if label is not None and rest is not None:
            alternatives.append(f'{label} "." {rest}')
    return b.rule("domain" if unit == _UNIT else f"domain-{unit}-{units}", " | ".join(alternatives))


def _email(b: GrammarBuilder, max_length: int | None = None) -> str:
    local_max, domain_max = _EMAIL_LOCAL_MAX, _HOSTNAME_MAX
    if max_length is not None and max_length < _EMAIL_LOCAL_MAX + 1 + _HOSTNAME_MAX:
        local_max = min(_EMAIL_LOCAL_MAX, max(1, (max_length - 1) // 2), max_length - 4)
        domain_max = max_length - 1 - local_max
    atext = b.rule("atext", _ATEXT)
    # rest[k]: at most k more characters of a dot-atom that has begun with an atext character
    rest: dict[int, str] = {}
    for k in range(1, local_max):
        alternatives = [f"{atext} {rest[k - 1]}?" if k > 1 else atext]
        if k >= 2:
            alternatives.append(f'"." {atext} {rest[k - 2]}?' if k > 2 else f'"." {atext}')
        rest[k] = b.rule("local-rest", " | ".join(alternatives))
    local = f"{atext} {rest[local_max - 1]}?" if local_max > 1 else atext
    name = "email" if local_max == _EMAIL_LOCAL_MAX and domain_max == _HOSTNAME_MAX else "email-len"
    return b.rule(name, f'{local} "@" {_domain(b, domain_max)}')


# --- uri --------------------------------------------------------------------------------------

_BLOCK = 32  # a long uri part is counted in blocks of about this many characters
_EXACT_TEXT_MAX = 2 * _BLOCK  # parts up to this budget are counted one character at a time


def _within(b: GrammarBuilder, hint: str, cls: str, size: int) -> str:
    """Characters of `cls` and percent-encodings, one to `size` characters in all."""
    rules = {0: ""}
    for k in range(1, size + 1):
        alternatives = [f"{cls} {rules[k - 1]}?" if k > 1 else cls]
        if k >= 3:
            alternatives.append(f"{_PCT} {rules[k - 3]}?" if k > 3 else _PCT)
        rules[k] = b.rule(f"{hint}-{k}", " | ".join(alternatives))
    return rules[size]


def _exactly(b: GrammarBuilder, hint: str, cls: str, size: int) -> str:
    """Characters of `cls` and percent-encodings, exactly `size` (>= 1) characters in all."""
    rules = {0: ""}
    for k in range(1, size + 1):
        alternatives = [_join(cls, rules[k - 1] or '""')]
        if k >= 3:
            alternatives.append(_join(_PCT, rules[k - 3] or '""'))
        rules[k] = b.rule(f"{hint}-exactly-{k}", " | ".join(alternatives))
    return rules[size]


def _text(b: GrammarBuilder, hint: str, cls: str, budget: int) -> str:
    """Characters of `cls` and percent-encodings, at most `budget` characters in all."""
    if budget <= 0:
        return '""'
    if budget <= _EXACT_TEXT_MAX:
        return f"{_within(b, hint, cls, budget)}?"
    # blocks, then fewer than _BLOCK characters. A block ends with the character or
    # percent-encoding that brings it to _BLOCK characters or more (at most _BLOCK + 2), so a
    # text splits into blocks one way.
    last = _exactly(b, hint, cls, _BLOCK - 1)
    block = b.rule(f"{hint}-block", f"{last} ({cls} | {_PCT})"
                                    f" | ({_exactly(b, hint, cls, _BLOCK - 2)} | {_exactly(b, hint, cls, _BLOCK - 3)})"
                                    f" {_PCT}")
    blocks = (budget - (_BLOCK - 1)) // (_BLOCK + 2)
    return f"{repeat(b, block, 0, blocks)} {_within(b, hint, cls, _BLOCK - 1)}?"


def _uri_budgets(max_length: int) -> dict[str, int]:
    """Budgets of the parts of a uri of at most `max_length` characters. "query", "fragment",
    "userinfo" and "port" include their "?", "#", "@" and ":"; "hier" is the whole hier-part,
    and "host" and "path" its parts after "//" (and userinfo and port)."""
    scheme = max(1, min(32, max_length // 5))
    rest = max_length - scheme - 1
    query = rest // 4 if rest >= 40 else 0
    fragment = rest // 8 if rest >= 40 else 0
    hier = rest - query - fragment
    authority = hier - 2  # after "//"
    port = 6 if authority >= 40 else 0
    userinfo = min(_EMAIL_LOCAL_MAX + 1, authority // 10) if authority >= 40 else 0
    left = max(0, authority - port - userinfo)
    host = min(255, left - left // 3)
    return {"scheme": scheme, "hier": hier, "userinfo": userinfo, "host": host, "port": port,
            "path": left - host, "query": query, "fragment": fragment}


def _uri(b: GrammarBuilder, max_length: int | None = None) -> str:
    if max_length is None:
        pchar = b.rule("pchar", f"{_PCHAR_CLASS} | {_PCT}")
        ip_literal = f'"[" {_ipv6(b)} "]"'
        query_char = b.rule("query-char", f'{pchar} | [/?]')
        segments = f'("/" {pchar}*)*'
        userinfo = b.rule("userinfo", f"({_USERINFO_CLASS} | {_PCT})*")
        host = b.rule("host", f"{ip_literal} | ({_PLAIN} | {_PCT})*")
        authority = b.rule("authority", f'({userinfo} "@")? {host} (":" [0-9]*)?')
        rootless = f"{pchar}+ {segments}"
        hier = b.rule("hier-part", f'"/" ("/" {authority} {segments} | {rootless})? | {rootless}')
        scheme = '[a-zA-Z] [a-zA-Z0-9+\\-.]*'
        return b.rule("uri", f'{scheme} ":" {hier}? ("?" {query_char}*)? ("#" {query_char}*)?')

    budget = _uri_budgets(max_length)
    scheme = _join("[a-zA-Z]", repeat(b, "[a-zA-Z0-9+\\-.]", 0, budget["scheme"] - 1))

    def rootless(size: int) -> str | None:
        """A path that starts with a pchar, of at most `size` characters."""
        if size < 1:
            return None
        alternatives = [_join(_PCHAR_CLASS, _text(b, "path", _PATH_CLASS, size - 1))]
        if size >= 3:
            alternatives.append(_join(_PCT, _text(b, "path", _PATH_CLASS, size - 3)))
        return b.rule("path-rootless", " | ".join(alternatives))

    hier_alternatives = []
    if budget["hier"] >= 1:
        after_slash = rootless(budget["hier"] - 1)
        hier_alternatives.append(f'"/" {after_slash}?' if after_slash else '"/"')
        hier_alternatives.append(rootless(budget["hier"]))
    if budget["hier"] >= 2:
        parts = []
        if budget["userinfo"] >= 1:
            parts.append(_optional(_join(_text(b, "userinfo", _USERINFO_CLASS, budget["userinfo"] - 1), '"@"')))
        hosts = []
        if budget["host"] >= 4:
            ipv6 = _ipv6_node(b)
            bounded = _Writer(b).expr(ipv6, frozenset(range(budget["host"] - 1)))
            hosts.append(f'"[" {bounded} "]"')
        hosts.append(_text(b, "reg-name", _PLAIN, budget["host"]))
        parts.append(b.rule("host-len", " | ".join(hosts)))
        if budget["port"] >= 1:
            parts.append(_optional(_join('":"', repeat(b, "[0-9]", 0, budget["port"] - 1))))
        if budget["path"] >= 1:
            parts.append(_optional(_join('"/"', _text(b, "path", _PATH_CLASS, budget["path"] - 1))))
        hier_alternatives.append(_join('"//"', *parts))
    tail = [_join(scheme, '":"')]
    if hier_alternatives:
        tail.append(_optional(b.rule("hier-part-len", " | ".join(hier_alternatives))))
    for key, mark in (("query", "?"), ("fragment", "#")):
        if budget[key] >= 1:
            tail.append(_optional(_join(literal(mark), _text(b, "query", _QUERY_CLASS, budget[key] - 1))))
    return b.rule("uri-len", " ".join(tail))


def _ipv6(b: GrammarBuilder) -> str:
    return _Writer(b).expr(_ipv6_node(b)) or '""'


# --- the formats ------------------------------------------------------------------------------

# formats written as trees: their lengths are known and bounded exactly
_NODES: dict[str, Callable[[GrammarBuilder], _Node]] = {
    "date": _date_node,
    "time": _time_node,
    "date-time": _date_time_node,
    "duration": _duration_node,
    "uuid": _uuid_node,
    "ipv4": _ipv4_node,
    "ipv6": _ipv6_node,
}

# the others take a maximum length (None: none) and only the shortest minimum
_BUDGETED: dict[str, tuple[Callable[[GrammarBuilder, int | None], str], int, int | None]] = {
    "email": (lambda b, high: _email(b, high), _EMAIL_MIN, _EMAIL_LOCAL_MAX + 1 + _HOSTNAME_MAX),
    "hostname": (lambda b, high: _hostname(b, _HOSTNAME_MAX if high is None else high), 1, _HOSTNAME_MAX),
    "uri": (lambda b, high: _uri(b, high), _URI_MIN, None),
}

FORMATS: frozenset[str] = frozenset(_NODES) | frozenset(_BUDGETED)


def format_length_range(name: str) -> tuple[int, int | None]:
    """The shortest and longest (None: no limit) value the grammar of format `name` accepts.
    Raises KeyError for a format not in FORMATS."""
    if name in _NODES:
        lengths = _NODES[name](GrammarBuilder()).lengths
        return min(lengths), max(lengths)
    _, low, high = _BUDGETED[name]
    return low, high


def format_grammar(builder: GrammarBuilder, name: str, *, min_length: int = 0, max_length: int | None = None) -> str:
    """A GBNF expression for the contents of a JSON string valid for the format `name`
    (without the quotes) whose length is between `min_length` and `max_length` (None: no
    maximum), in code points. Raises KeyError for a format not in FORMATS, and ValueError
    when no value has such a length or the bounds are not supported (see the module notes)."""
    if name not in FORMATS:
        raise KeyError(name)
    low, high = format_length_range(name)
    min_length = max(0, min_length)
    wanted = f"from {min_length} to {max_length}" if max_length is not None else f"of at least {min_length}"
    if max_length is not None and (max_length < min_length or max_length < low) or (
            high is not None and min_length > high):
        shown = f"{low} to {high}" if high is not None else f"at least {low}"
        raise ValueError(f"no `{name}` value has a length {wanted} (its values have {shown} characters)")
    redundant = min_length <= low and (max_length is None or (high is not None and max_length >= high))
    if name in _NODES:
        node = _NODES[name](builder)
        if redundant:
            return _Writer(builder).expr(node) or '""'
        top = max(node.lengths) if max_length is None else max_length
        lengths = frozenset(length for length in node.lengths if min_length <= length <= top)
        if not lengths:
            shown = ", ".join(f"{a}" if a == z else f"{a}-{z}" for a, z in _intervals(node.lengths))
            raise ValueError(f"no `{name}` value has a length {wanted} (its values have {shown} characters)")
        return _Writer(builder).expr(node, lengths) or '""'
    build, _, _ = _BUDGETED[name]
    if min_length > low:
        raise ValueError(f"`format: {name}` with a minimum length above {low} (its shortest value) is not "
                         f"supported, only with a maximum length")
    return build(builder, None if redundant else max_length)
