"""ECMAScript `pattern` -> GBNF: grammars are run through llama.cpp's own grammar engine on the
canonical JSON text of each probe string, and compared with Python's `re` (translated where the
two dialects differ) or with explicit ECMAScript expectations."""

from __future__ import annotations

import functools
import json
import re

import pytest

from grammars.gbnf import GrammarBuilder, literal
from grammars.regex import RegexError, regex_length_range, regex_to_gbnf
from tests.grammar_support import accepts


@functools.cache
def string_grammar(pattern: str) -> str:
    builder = GrammarBuilder()
    expression = regex_to_gbnf(pattern, builder)
    return builder.render(literal('"') + " " + expression + " " + literal('"'))


def grammar_matches(pattern: str, value: str) -> bool:
    return accepts(string_grammar(pattern), json.dumps(value, ensure_ascii=False))


def python_pattern(pattern: str) -> str:
    """The same pattern for Python's `re`: `$` only at the very end (Python's also matches
    before a final newline) and `(?<name>` spelled `(?P<name>`."""
    out, i, in_class = [], 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "$":
            char = r"\Z"
        elif pattern.startswith("(?<", i) and pattern[i + 3] not in "=!":
            char = "(?P<"
            i += 2
        out.append(char)
        i += 1
    return "".join(out)


def python_truth(pattern: str, value: str) -> bool:
    # re.ASCII: ECMAScript's \d \w \s classes (ASCII for d and w) and case rules
    return re.search(python_pattern(pattern), value, re.ASCII) is not None


# (pattern, probe strings); the truth for each probe comes from Python's re
ORACLE_CASES: list[tuple[str, list[str]]] = [
    (r"^\+?1?[-. ]?\(?\d{3}\)?[-. ]?\d{3}[-. ]?\d{4}$",
     ["555-123-4567", "+1 (555) 123-4567", "5551234567", "555-1234", "555-123-45678", "abc-def-ghij",
      "555-123-4567\n"]),
    (r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$",
     ["2024-02-29", "2024-12-31", "2024-13-01", "2024-1-01", "x2024-01-01", "2024-01-01\n", "2024-00-10"]),
    (r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$",
     ["2024-01-02T03:04:05Z", "2024-01-02T03:04:05.123+01:00", "2024-01-02 03:04:05Z", "2024-01-02T03:04:05"]),
    (r"^[a-z0-9]+(?:-[a-z0-9]+)*$", ["hello-world", "a", "hello--world", "-hello", "hello-", "", "Hello"]),
    (r"^[^@\s]+@[^@\s]+\.[a-z]{2,}$",
     ["a@b.co", "é@ü.org", '"q"@x.io', "a b@c.de", "a@b@c.de", "a@b.c", "a\\b@c.de", "a@b.co\n"]),
    (r"^#(?:[0-9a-fA-F]{3}){1,2}$", ["#fff", "#FFFFFF", "#a1B2c3", "#ffff", "#ggg", "fff", "#fffffff"]),
    (r"^[A-Z]{2,3}-\d{4}$", ["AB-1234", "ABC-1234", "A-1234", "ABCD-1234", "AB-123", "ab-1234", "AB-12345"]),
    (r"abc", ["abc", "xxabcxx", 'q"abc\\', "ab", "aXbc", "", "ABC"]),
    (r"^abc", ["abc", "abcdef", "xabc", "ab"]),
    (r"abc$", ["abc", "xxabc", "abcx", "abc\n"]),
    (r"^(cat|dog|bird)$", ["cat", "dog", "bird", "cats", "", "do", "catdog"]),
    (r"cat|^dog|fish$", ["a cat!", "dog food", "hot dog", "goldfish", "fish tank", "", "do g"]),
    (r"^(a|b|)c$", ["c", "ac", "bc", "abc", "cc"]),
    (r"^((ab|cd)(ef|gh)?)+$", ["ab", "abef", "cdghab", "abe", "", "efab", "abcdcdgh"]),
    (r"^[^aeiou\s]+$", ["rhythm", "ñ", "\"'\\", "hello", "xyz zy", "", "tab\there"]),
    (r"^\d{3,}$", ["12", "123", "1234567", "12a3"]),
    (r"\d+", ["abc1", "9", "abc", ""]),
    (r"^\.\\\/\-\*\+\?\(\)\[\]\{\}\|\^\$$", [".\\/-*+?()[]{}|^$", ".\\/-*+?()[]{}|^", "x.\\/-*+?()[]{}|^$"]),
    (r'^"[^"]*"$', ['"hi"', '""', '"a"b"', "hi", '"'],),
    (r"^[A-Z]:\\[^\\]+$", ["C:\\Users", "C:\\a\\b", "C:/x", "C:\\"]),
    (r"^line1\nline2$", ["line1\nline2", "line1\\nline2", "line1\r\nline2", "line1 line2"]),
    (r"^\t[\x00-\x1f]\x7f$", ["\t\x01\x7f", "\t\x1f\x7f", "\t\n\x7f", "\t\x00\x7f", "\t \x7f", "\t\x01\x7e"]),
    (r"^[\x00-\x05\n\"\\]+$", ["\x00\x05", '\n"\\', "\x06", "\t", '"a']),
    (r"^[à-ÿ]+$", ["éèà", "ÿ", "abc", "Ā", ""]),
    (r"^😀+$", ["😀", "😀😀😀", "😀 ", "😁"]),
    (r"^.{2,4}$", ["ab", "😀😀", "abcd", "a", "abcde", "a\nb"]),
    (r"^\w+$", ["hello_world1", "héllo", "a-b", "_"]),
    (r"^\S+\s*$", ["abc", "abc \t\n", " abc", "", "a b"]),
    (r"^a+?b*?$", ["aab", "a", "b", "aba"]),
    (r"^(?:\+|-)?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?$", ["1", "-1.5", "+2e10", "1E-7", "1.", ".5", "1e", "--1"]),
    (r"^[\w.+-]+$", ["a.b+c-d", "a b", "a/b", "-"]),
    (r"^[-a-c]$", ["-", "b", "d", "a-"]),
    (r"^[a-]$", ["-", "a", "b"]),
    (r"(^|,)x(,|$)", ["x", "a,x", "x,b", "a,x,b", "ax", "xa", "a,xb", ""]),
    (r"^(?:^a|b)+$", ["a", "ab", "abb", "b", "ba", "aa", ""]),
    (r"(a$|^b)c", ["bc", "bcx", "xbc", "ac", "c"]),
    (r"^$", ["", "a", "\n"]),
    (r"^(a*)*$", ["", "aaa", "b", "ab"]),
    (r"(\d{1,3}\.){3}\d{1,3}", ["ip 192.168.0.1 x", "1.2.3.4", "1.2.3", "a.b.c.d"]),
    (r'^[^"\\]*$', ["abc", "", "tab\tnew\nline", 'a"b', "a\\b"]),
    (r"^[\b]$", ["\b", "b", "\\b"]),
    (r"^(?<year>\d{4})-(?<month>\d{2})$", ["2024-05", "2024-5", "24-05"]),
    (r"^a{2}?b{1,2}?$", ["aab", "aabb", "ab", "aabbb"]),
    (r"^(?:a|b)*abb$", ["abb", "aababb", "ab", "abba"]),
    (r"^[\s\S]{3}$", ["a\nb", "abc", "ab", "abcd"]),
    (r"^(a|ab)(c|bcd)(d*)$", ["abcd", "abc", "acd", "abd", "abcdd"]),
    (r"^é+$", ["é", "éé", "e\u0301"]),
    (r"[^a]", ["a", "aaa", "ab", "", "\n"]),
    (r"^(x|^y|z$)+$", ["x", "y", "z", "xz", "yx", "xy", "zx", "yxxz"]),
    (r"^(\^|\$)?[$^]+$", ["^", "$", "^$", "$$", "", "a"]),
    (r"(?:^)+a|b(?:$){2}", ["a", "xa", "b", "bx", "xb"]),
    (r"a{x", ["a{x", "a{", "ax"]),
    (r"x{2,3", ["x{2,3", "xx"]),
    (r"^a}b]$", ["a}b]", "ab"]),
]


@pytest.mark.parametrize(("pattern", "probes"), ORACLE_CASES, ids=[case[0] for case in ORACLE_CASES])
def test_agrees_with_python_re(pattern: str, probes: list[str]) -> None:
    for value in probes:
        assert grammar_matches(pattern, value) == python_truth(pattern, value), (pattern, value)


def test_probes_include_matches_and_non_matches() -> None:
    for pattern, probes in ORACLE_CASES:
        truths = {python_truth(pattern, value) for value in probes}
        assert truths == {True, False}, pattern


# ECMAScript semantics where Python's re disagrees or has no syntax
EXPLICIT_CASES: list[tuple[str, list[str], list[str]]] = [
    (r"^.$", ["a", "😀", "\x01", '"', "\\"], ["\n", "\r", "\u2028", "\u2029", "", "ab"]),
    (r"^\s$", [" ", "\t", "\x0b", "\x0c", "\u00a0", "\ufeff", "\u3000", "\u2028", "\u2009"], ["\u200b", "a", ""]),
    (r"^\d+$", ["0123456789"], ["\u0663", "1\u0663"]),
    (r"^\w$", ["a", "Z", "_", "0"], ["é", "ß", "-"]),
    (r"^\S$", ["a", "é"], ["\u00a0", "\u3000", " "]),
    (r"abc$", ["xabc"], ["abc\n"]),
    (r"^[]$", [], ["", "a", "[]"]),
    (r"a[]|b", ["b", "abc"], ["a", ""]),
    (r"^[^]$", ["\n", "a", "😀"], ["", "ab"]),
    (r"[^\s\S]", [], ["", "a", "[^\\s\\S]"]),
    (r"^\u{1F600}\u{61}$", ["😀a"], ["😀", "a"]),
    (r"^[\uD83D\uDE00-\uD83D\uDE4F]+$", ["😀🙏", "🙂"], ["🚀", "\\uD83D\\uDE00", ""]),
    (r"^\cJ\cj$", ["\n\n"], ["cJcj", "\n"]),
    (r"^\x41\u0042\0$", ["AB\x00"], ["AB", "AB0"]),
    (r"^\v\f\r$", ["\x0b\x0c\r"], ["vfr"]),
    (r"^[\cA-\cZ]$", ["\x01", "\x1a"], ["\x00", "A"]),
]


@pytest.mark.parametrize(("pattern", "good", "bad"), EXPLICIT_CASES, ids=[case[0] for case in EXPLICIT_CASES])
def test_ecmascript_semantics(pattern: str, good: list[str], bad: list[str]) -> None:
    for value in good:
        assert grammar_matches(pattern, value), (pattern, value)
    for value in bad:
        assert not grammar_matches(pattern, value), (pattern, value)


@pytest.mark.parametrize(
    ("pattern", "ecmascript"),
    [
        ("^[^a]$", lambda c: c != "a"),
        ("^.$", lambda c: c not in "\n\r"),
        (r'^[\x00-\x1f"\\]$', lambda c: c < " " or c in '"\\'),
        (r"^[^\x01\n\x1f]$", lambda c: c not in "\x01\n\x1f"),
    ],
)
def test_every_ascii_character_is_written_as_json_writes_it(pattern: str, ecmascript) -> None:
    for code in range(0x80):
        char = chr(code)
        assert grammar_matches(pattern, char) == ecmascript(char), (pattern, hex(code))


@pytest.mark.parametrize(
    ("pattern", "char", "lengths"),
    [
        ("^a{0,3000}$", "a", {0: True, 1: True, 2999: True, 3000: True, 3001: False}),
        ("^[a-z]{2500,3000}$", "q", {2499: False, 2500: True, 2777: True, 3000: True, 3001: False}),
        ("^x{2001}$", "x", {2000: False, 2001: True, 2002: False}),
        ("^(?:ab){300,310}$", "ab", {299: False, 300: True, 310: True, 311: False}),
        ("^b{2100,}$", "b", {2099: False, 2100: True, 2500: True}),
    ],
)
def test_large_repetition_bounds_are_exact(pattern: str, char: str, lengths: dict[int, bool]) -> None:
    for count, expected in lengths.items():
        assert grammar_matches(pattern, char * count) == expected, (pattern, count)
    assert not grammar_matches(pattern, char * (min(lengths) + 1) + "!")


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("a(?=b)", "lookahead (?=...) at position 1"),
        ("a(?!b)", "lookahead (?!...)"),
        ("(?<=a)b", "lookbehind (?<=...)"),
        ("(?<!a)b", "lookbehind (?<!...)"),
        (r"(a)\1", "backreference"),
        (r"(?<x>a)\k<x>", "backreference"),
        (r"\bword\b", "word boundary"),
        (r"a\B", "word boundary"),
        (r"\p{L}+", "unicode property"),
        (r"\P{Lu}", "unicode property"),
        ("(?i)abc", "inline flags"),
        ("(?i:abc)", "inline flags"),
        ("(?P<n>a)", "(?P"),
        ("(ab", "unterminated group"),
        ("ab)", "unmatched ')'"),
        ("[ab", "unterminated character class"),
        ("*a", "nothing to repeat"),
        ("a|+", "nothing to repeat"),
        ("a**", "nothing to repeat"),
        ("a{2}{3}", "nothing to repeat"),
        ("^*", "nothing to repeat"),
        ("{2}", "nothing to repeat"),
        ("[z-a]", "out of order"),
        ("a{2,1}", "out of order"),
        ("a{,5}", "invalid quantifier"),
        (r"[\d-z]", "class escape in a range"),
        ("a\\", "end of pattern"),
        (r"\q", "unknown escape"),
        (r"\x4", "hexadecimal"),
        (r"\u12", "hexadecimal"),
        (r"\u{110000}", "unicode escape"),
        (r"\c1", "control escape"),
        (r"\01", "octal"),
        ("(?<1a>x)", "group name"),
        ("(^a){20}", "anchor"),
    ],
)
def test_unsupported_or_invalid_patterns_raise(pattern: str, message: str) -> None:
    with pytest.raises(RegexError, match=re.escape(message)):
        regex_to_gbnf(pattern, GrammarBuilder())
    with pytest.raises(RegexError):
        regex_length_range(pattern)


def test_regex_error_is_a_value_error() -> None:
    assert issubclass(RegexError, ValueError)


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("^abc$", (3, 3)),
        ("abc", (3, None)),
        ("^abc", (3, None)),
        ("abc$", (3, None)),
        (r"^[A-Z]{2,3}-\d{4}$", (7, 8)),
        ("^a{0,3000}$", (0, 3000)),
        ("^(a|bc)?$", (0, 2)),
        ("^(a|bcd)$", (1, 3)),
        ("^a|^bcd$", (1, None)),
        ("(^a|b$)", (1, None)),
        ("^(ab){2,}$", (4, None)),
        ("^$", (0, 0)),
        ("a*", (0, None)),
        ("", (0, None)),
        ("^😀{2}$", (2, 2)),
        (r"^\u{1F600}\n$", (2, 2)),
        (r"^(x|^y|z$)+$", (1, None)),
        ("^(^a|b$|c){3}$", (3, 3)),
        (r"[^\s\S]", (0, 0)),
    ],
)
def test_length_range(pattern: str, expected: tuple[int, int | None]) -> None:
    assert regex_length_range(pattern) == expected


def test_anchored_literal_is_just_the_literal() -> None:
    builder = GrammarBuilder()
    assert regex_to_gbnf("^abc$", builder) == '"abc"'
    assert builder.render('""') == 'root ::= ""\n'


def test_unanchored_literal_is_padded() -> None:
    assert regex_to_gbnf("abc", GrammarBuilder()) == 'json-char* "abc" json-char*'
    assert regex_to_gbnf("^ab", GrammarBuilder()) == '"ab" json-char*'
    assert regex_to_gbnf("ab$", GrammarBuilder()) == 'json-char* "ab"'


def test_padding_absorbs_optional_edges() -> None:
    assert regex_to_gbnf("a*", GrammarBuilder()) == "json-char*"
    assert regex_to_gbnf(r"\s*x+\d?", GrammarBuilder()) == 'json-char* "x" json-char*'


def test_characters_use_the_canonical_json_escapes() -> None:
    value = '"\\\n'  # quote, backslash, newline
    assert regex_to_gbnf("^" + re.escape(value) + "$", GrammarBuilder()) == literal(json.dumps(value)[1:-1])


def test_grammars_stay_small() -> None:
    cases = {
        "^(" + "|".join(f"w{i}" for i in range(300)) + ")$": 4000,
        "^" + "(" * 100 + "a" + ")*" * 100 + "$": 200,
        "^((a{1,100}){1,100}){1,100}$": 300,
        "^" + "(ab|cd)" * 200 + "$": 1200,
        "(^a|b$|c)" * 12: 400,
        "^(" + "a?" * 300 + ")*$": 100,
    }
    for pattern, limit in cases.items():
        grammar = string_grammar(pattern)
        assert len(grammar) < limit, (pattern[:40], len(grammar))
        assert grammar_matches(pattern, "") == python_truth(pattern, "")


def test_expression_can_be_embedded_in_a_sequence() -> None:
    builder = GrammarBuilder()
    first = regex_to_gbnf("^a$|b", builder)
    second = regex_to_gbnf(r"^\d+$", builder)
    grammar = builder.render(f'"[" "\\"" {first} "\\"" "," "\\"" {second} "\\"" "]"')
    assert accepts(grammar, '["xbx","12"]')
    assert accepts(grammar, '["a","0"]')
    assert not accepts(grammar, '["ax","0"]')
    assert not accepts(grammar, '["a","x"]')


# ---------------------------------------------------------------------------------------------
# Length bounds together with a pattern: exactly L(pattern) ∩ {min_length <= len <= max_length}


@functools.cache
def bounded_grammar(pattern: str, low: int, high: int | None) -> str:
    builder = GrammarBuilder()
    expression = regex_to_gbnf(pattern, builder, min_length=low, max_length=high)
    return builder.render(literal('"') + " " + expression + " " + literal('"'))


def bounded_matches(pattern: str, low: int, high: int | None, value: str) -> bool:
    return accepts(bounded_grammar(pattern, low, high), json.dumps(value, ensure_ascii=False))


def bounded_truth(pattern: str, low: int, high: int | None, value: str) -> bool:
    return python_truth(pattern, value) and low <= len(value) and (high is None or len(value) <= high)


# one code point each, whatever JSON makes of them
FILLERS = ("a", "Z", "7", "_", "-", " ", ".", '"', "\\", "\n", "é", "😀")


def length_probes(seeds: list[str], low: int, high: int | None) -> set[str]:
    """The seeds, and the seeds cut or padded (at either end, with each filler) to the lengths
    at and around the bounds."""
    lengths = {low - 1, low, low + 1} | ({high - 1, high, high + 1} if high is not None else {low + 6})
    probes = set(seeds)
    for seed in seeds:
        for length in (n for n in lengths if n >= 0):
            probes.add(seed[:length])
            probes.add(seed[len(seed) - length :] if length else "")
            for filler in FILLERS:
                padding = filler * max(0, length - len(seed))
                probes.update((seed + padding, padding + seed))
    return probes


# (pattern, minLength, maxLength, seeds)
BOUNDED_CASES: list[tuple[str, int, int | None, list[str]]] = [
    (r"^[a-z0-9_]+$", 3, 20, ["abc_123", "a-b"]),
    (r"^\w*$", 0, 5, ["hello", "hé"]),
    (r"^\w*$", 2, None, ["ab", "a b"]),
    (r"^[^a]+$", 3, 3, ['"\\\n', "bcd", "bad"]),
    (r"^\d{3,}$", 2, 5, ["1234", "12"]),
    (r"^user-[0-9]+$", 3, 20, ["user-1", "user-"]),
    (r"^user-[0-9]+$", 8, None, ["user-1234"]),
    (r"^(user-[0-9]+|admin|[a-z]{2,})$", 4, 8, ["user-12", "admin", "abcdefghij"]),
    (r"^(ab|c)+$", 3, 5, ["ababab", "cab", "ababc"]),
    (r"^(ab|c)+$", 6, None, ["abcabc", "cccc"]),
    (r"^(a|bc){2,4}$", 3, 5, ["abca", "bcbcbc"]),
    ("abc", 0, 10, ["abc", 'x"\\\nabc', "é😀abc"]),
    ("abc", 4, 6, ["abc", "xabcx"]),
    ("abc", 5, None, ["abc", "xabcx"]),
    (r"^a|b$|c", 2, 4, ["a", "b", "c", 'a"\\']),
    (r"(^a|b$|c)x", 2, 5, ["ax", "bx", "cx", "zcx"]),
    (r"x*y*", 1, 3, ['"\\\n', "😀é"]),
    (r"^.*$", 1, 3, ["ab\n", "😀"]),
    (r"^[A-Z][a-z]*( [A-Z][a-z]*)*$", 0, 30, ["Hello World Foo Bar Baz Qux Quux", "Ab Cd", "ab"]),
    (r"^[A-Z][a-z]*( [A-Z][a-z]*)*$", 5, 12, ["A B C D E F G", "Hello", "Hello World"]),
    (r"^[a-z0-9]+(?:-[a-z0-9]+)*$", 3, 10, ["a-b-c-d-e-f", "hello-world", "a--b"]),
    (r"^[a-z]*\d*$", 2, 4, ["ab12", "a1", "1a"]),
    (r"^(a|b)*abb$", 4, 6, ["aabb", "ababb", "abb"]),
    (r'^"[^"]*"$', 2, 4, ['""', '"ab"', '"\\"']),
    (r"^[^@\s]+@[^@\s]+\.[a-z]{2,}$", 6, 12, ["a@b.co", 'é"@ü\\.org', "😀@x.io"]),
    (r"(\d{1,3}\.){3}\d{1,3}", 7, 9, ["1.2.3.4", "10.20.3.4", "ip 1.2.3.4"]),
    (r"^(?:\+|-)?\d+(?:\.\d+)?$", 2, 5, ["-1.5", "12345", "+1"]),
]


@pytest.mark.parametrize(
    ("pattern", "low", "high", "seeds"), BOUNDED_CASES, ids=[f"{c[0]} {c[1]}..{c[2]}" for c in BOUNDED_CASES]
)
def test_length_bounds_agree_with_python_re(pattern: str, low: int, high: int | None, seeds: list[str]) -> None:
    probes = length_probes(seeds, low, high)
    truths = {value: bounded_truth(pattern, low, high, value) for value in probes}
    # the probes reach both bounds (or the pattern's own) with strings in the language
    pattern_low, pattern_high = regex_length_range(pattern)
    ends = {max(low, pattern_low), high if pattern_high is None or high is None else min(high, pattern_high)}
    assert {len(value) for value, truth in truths.items() if truth} >= ends - {None}
    assert not all(truths.values())
    for value, truth in truths.items():
        assert bounded_matches(pattern, low, high, value) == truth, (pattern, low, high, value)


@pytest.mark.parametrize(
    ("pattern", "low", "high", "expected"),
    [
        (r"^[a-z0-9_]+$", 3, 20, "[0-9_a-z]{3,20}"),
        (r"^\w*$", 0, 5, "[0-9A-Z_a-z]{0,5}"),
        (r"^user-[0-9]+$", 3, 20, '"user-" [0-9]{1,15}'),
        (r"^user-[0-9]+$", 8, None, '"user-" [0-9]{3,}'),
        (r"^[a-z]+\.txt$", 0, 12, '[a-z]{1,8} ".txt"'),
        ("^ab", 0, 6, '"ab" json-char{0,4}'),
        ("ab$", 3, None, 'json-char+ "ab"'),
        ("", 2, 4, "json-char{2,4}"),
    ],
)
def test_single_free_part_bounds_its_repetition(pattern: str, low: int, high: int | None, expected: str) -> None:
    assert regex_to_gbnf(pattern, GrammarBuilder(), min_length=low, max_length=high) == expected


@pytest.mark.parametrize(
    ("pattern", "low", "high"),
    [(r"^[A-Z]{2,3}-\d{4}$", 7, 8), (r"^[A-Z]{2,3}-\d{4}$", 0, None), ("abc", 3, None), (r"^\d+$", 1, None),
     ("cat|^dog|fish$", 0, None), ("^(a|bc)?$", 0, 2)],
)
def test_bounds_the_pattern_keeps_anyway_change_nothing(pattern: str, low: int, high: int | None) -> None:
    plain, bounded = GrammarBuilder(), GrammarBuilder()
    expression = regex_to_gbnf(pattern, plain)
    assert regex_to_gbnf(pattern, bounded, min_length=low, max_length=high) == expression
    assert bounded.render(expression) == plain.render(expression)


@pytest.mark.parametrize(
    ("pattern", "low", "high", "limit"),
    [("abc", 0, 10, 2000), (r"^[A-Z][a-z]*( [A-Z][a-z]*)*$", 0, 30, 2500), (r"^(ab|c)+$", 6, None, 500),
     ("abc", 0, 300, 60_000)],
)
def test_product_grammars_stay_small(pattern: str, low: int, high: int | None, limit: int) -> None:
    grammar = bounded_grammar(pattern, low, high)
    assert len(grammar) < limit, len(grammar)


def test_bounds_no_string_of_the_pattern_meets_give_an_empty_language() -> None:
    for pattern, low, high in [("^abc$", 4, None), ("^abc$", 0, 2), ("^$", 1, 3), ("abc", 0, 2), ("x", 3, 2),
                               (r"^(ab)+$", 3, 3)]:
        for value in ("", "abc", "ab", "aba", "x", "xxx"):
            assert not bounded_matches(pattern, low, high, value), (pattern, low, high, value)


def test_large_bounds_use_exact_repetitions() -> None:
    assert bounded_matches(r"^[a-z]+$", 0, 2100, "q" * 2100)
    assert not bounded_matches(r"^[a-z]+$", 0, 2100, "q" * 2101)
    assert bounded_matches(r"^[a-z]+$", 2050, None, "q" * 2050)
    assert not bounded_matches(r"^[a-z]+$", 2050, None, "q" * 2049)
    # a product with a tail: after the match, the rest of the budget is one repetition
    assert bounded_matches("abc", 0, 900, "abc" + "z" * 897)
    assert not bounded_matches("abc", 0, 900, "abc" + "z" * 898)
    assert bounded_matches("abc", 0, 900, "z" * 897 + "abc")
    assert not bounded_matches("abc", 0, 900, "z" * 898 + "abc")


@pytest.mark.parametrize(
    ("pattern", "low", "high"),
    [("abc", 5000, None), ("abc", 0, 5000), (r"^[A-Z][a-z]*( [A-Z][a-z]*)*$", 0, 5000),
     ("a[ab]{12}", 0, 100)],
)
def test_bounds_too_complex_to_combine_raise(pattern: str, low: int, high: int | None) -> None:
    with pytest.raises(RegexError, match="pattern together with minLength/maxLength is too complex to combine exactly"):
        regex_to_gbnf(pattern, GrammarBuilder(), min_length=low, max_length=high)


def test_negative_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        regex_to_gbnf("a", GrammarBuilder(), min_length=-1)
    with pytest.raises(ValueError, match="negative"):
        regex_to_gbnf("a", GrammarBuilder(), max_length=-1)
