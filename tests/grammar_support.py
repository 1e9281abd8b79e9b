"""Test support: does a GBNF grammar accept a text? Answered by llama.cpp's own grammar engine
(the one that constrains decoding), fed the text's tokens one by one. And how long can a sentence
of a grammar be (the token budget that lets a constrained answer end on any machine)?"""

from __future__ import annotations

import functools
from collections.abc import Callable

from backends.grammar import GrammarCache
from backends.llama_model import LlamaModel, ModelOptions
from backends.registry import default_model_path


@functools.cache
def _model() -> LlamaModel:
    return LlamaModel(default_model_path(), ModelOptions())


@functools.cache
def _cache() -> GrammarCache:
    return GrammarCache(_model().vocab, capacity=4096)


def accepts(grammar: str, text: str, root: str = "root") -> bool:
    """Whether `text`, and nothing more, is a sentence of `grammar` (starting at rule `root`)."""
    model = _model()
    state = _cache().get(grammar, root).start()
    try:
        for token in model.tokenize(text, add_special=False, parse_special=False):
            if not state.allows(token):
                return False
            state.accept(token)
        return state.allows(model.eos_token_id)
    finally:
        state.close()


def compiles(grammar: str) -> None:
    """Raise `GrammarError` with llama.cpp's message if the grammar does not parse."""
    _cache().get(grammar)


# ---- the longest sentence of a grammar, in bytes --------------------------------------------------

def longest_sentence(grammar: str, root: str = "root") -> int | None:
    """The most bytes a sentence of `grammar` can have (None: no bound, a `*`, `+`, `{m,}` or a
    recursion that can repeat something non-empty). A bound on the tokens too: the grammar sampler
    never allows an empty piece, so every token writes a byte at least. Tests give a constrained
    answer that many tokens, so that it ends whatever the model chooses within the grammar."""
    rules = _rules(grammar)
    known: dict[str, int | None] = {}
    busy: set[str] = set()

    def rule(name: str) -> int | None:
        if name in known:
            return known[name]
        if name in busy:
            return None  # a recursion: unbounded (the generated grammars have none that stays finite)
        busy.add(name)
        length = _longest(rules[name], rule)
        busy.discard(name)
        known[name] = length
        return length

    return rule(root)


def _rules(grammar: str) -> dict[str, str]:
    """Each rule's body (`name ::= body`, a rule starting on a line of its own)."""
    import re

    parts = re.split(r"(?:^|\n)\s*([A-Za-z0-9_-]+)\s*::=", grammar)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def _longest(body: str, rule: Callable[[str], int | None]) -> int | None:
    """The longest sentence of one rule's body; `rule` answers for the rules it names."""
    position = 0

    def space() -> None:
        nonlocal position
        while position < len(body) and body[position] in " \t\r\n#":
            if body[position] == "#":  # a comment, to the end of its line
                newline = body.find("\n", position)
                position = len(body) if newline < 0 else newline
            else:
                position += 1

    def alternatives() -> int | None:
        nonlocal position
        best: int | None = 0
        while True:
            length = sequence()
            best = None if best is None or length is None else max(best, length)
            space()
            if position < len(body) and body[position] == "|":
                position += 1
                continue
            return best

    def sequence() -> int | None:
        total: int | None = 0
        while True:
            space()
            if position >= len(body) or body[position] in "|)":
                return total
            length = quantified(item())
            total = None if total is None or length is None else total + length

    def item() -> int | None:
        nonlocal position
        char = body[position]
        if char == '"':
            end = position + 1
            while body[end] != '"':
                end += 2 if body[end] == "\\" else 1
            length = len(_unescape(body[position + 1:end]).encode())
            position = end + 1
            return length
        if char == "[":
            end = position + 1
            while body[end] != "]" or end == position + 1:
                end += 2 if body[end] == "\\" else 1
            inside = body[position + 1:end]
            position = end + 1
            if inside.startswith("^"):
                return 4  # any character but some: up to 4 bytes in UTF-8
            return max(len(c.encode()) for c in _unescape(inside.replace("-", "")))
        if char == "(":
            position += 1
            length = alternatives()
            space()
            assert body[position] == ")", body[position:position + 20]
            position += 1
            return length
        if char == ".":
            position += 1
            return 4
        start = position
        while position < len(body) and (body[position].isalnum() or body[position] in "_-"):
            position += 1
        assert position > start, f"cannot read {body[start:start + 20]!r}"
        return rule(body[start:position])

    def quantified(length: int | None) -> int | None:
        nonlocal position
        if position < len(body) and body[position] == "?":
            position += 1
            return length
        if position < len(body) and body[position] in "*+":
            position += 1
            return 0 if length == 0 else None
        if position < len(body) and body[position] == "{":
            end = body.index("}", position)
            counts = body[position + 1:end].split(",")
            position = end + 1
            most = counts[-1].strip()
            if not most:
                return 0 if length == 0 else None
            return None if length is None else length * int(most)
        return length

    return alternatives()


def _unescape(text: str) -> str:
    """A GBNF literal's or character class's text with its escapes read."""
    import re

    simple = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-", "^": "^"}

    def one(match: re.Match[str]) -> str:
        escape = match[1]
        if escape[0] in "xuU":
            return chr(int(escape[1:], 16))
        return simple.get(escape, escape)

    return re.sub(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)", one, text)
