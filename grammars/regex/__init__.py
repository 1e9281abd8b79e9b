"""ECMAScript regular expressions (JSON Schema `pattern`) translated to llama.cpp GBNF.

The pattern is parsed into a small AST (`CharSet`, `Seq`, `Alt`, `Repeat`, `Anchor`) with
Unicode-mode ECMAScript semantics: characters are code points, `.` excludes the line
terminators, `\\d \\w \\s` have their ECMAScript (not Python) meaning. Anything the
translation cannot express exactly (lookaround, backreferences, word boundaries, property
escapes, flags) raises `RegexError` instead of giving an approximate grammar.

JSON Schema patterns are not anchored: a string matches when the pattern matches anywhere in
it, and `^` / `$` are zero-width assertions that may sit anywhere. The pattern therefore
becomes up to four anchor-free languages (the "variants", by whether a path holds `^` and
whether it holds `$`), and the string grammar is their union, padded with `json-char*` on
every side that is not anchored:

    ^a|b$|c   ->   "a" json-char* | json-char* "b" | json-char* "c" json-char*

Every character is written as canonical JSON writes it inside a string (see `grammars.gbnf`),
so the grammar describes the text between the quotes of the JSON string, not the raw value.

`minLength` / `maxLength` beside the pattern are combined exactly (`regex_to_gbnf`'s
`min_length` / `max_length`): bounds the pattern keeps anyway change nothing; a part with one
free repetition gets its counts bounded (`^[a-z]+$`, 3..20 -> `[a-z]{3,20}`); anything else
becomes a minimal DFA paired with the count of characters read, or `RegexError` when that
would be too large.

The modules, each importing only those listed before it:

    errors     `RegexError`
    nodes      the AST, its small analyses, character sets and normalizing constructors
    parser     ECMAScript pattern -> AST
    anchors    AST -> anchor-free languages, with the unanchored edges trimmed
    emit       anchor-free AST -> GBNF (and `NEVER`, the expression that matches nothing)
    automata   minimal DFAs, for the length bounds
    bounded    a language restricted to a range of lengths -> GBNF
    translate  the entry points `regex_to_gbnf` and `regex_length_range`
"""

from grammars.regex.emit import NEVER
from grammars.regex.errors import RegexError
from grammars.regex.translate import regex_length_range, regex_to_gbnf

__all__ = ["NEVER", "RegexError", "regex_length_range", "regex_to_gbnf"]
