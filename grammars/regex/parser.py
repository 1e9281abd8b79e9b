"""ECMAScript patterns parsed into the AST of `grammars.regex.nodes`, with Unicode-mode
semantics: characters are code points, `.` excludes the line terminators, `\\d \\w \\s` have
their ECMAScript (not Python) meaning. Anything the translation cannot express exactly
(lookaround, backreferences, word boundaries, property escapes, flags) raises `RegexError`
instead of giving an approximate grammar."""

from __future__ import annotations

import re

from grammars.gbnf import MAX_CODE_POINT, Ranges, complement, normalize, subtract
from grammars.regex.errors import RegexError
from grammars.regex.nodes import ANY, Alt, Anchor, CharSet, Node, Repeat, Seq, charset

# ---------------------------------------------------------------------------------------------
# Character sets

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


def _char(code: int) -> CharSet:
    return CharSet(((code, code),) if not 0xD800 <= code <= 0xDFFF else ())


DOT = charset(subtract(ANY, _LINE_TERMINATORS))


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
            return charset(_CLASS_ESCAPES[char])
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
        return charset(complement(ranges) if negated else ranges)

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
