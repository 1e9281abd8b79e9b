"""Safe tokenization: text that users supplied never becomes a special token; the template's
markup still does.

Every string of the request's messages and tools (message contents, `reasoning_content`, tool-call
names, arguments and ids, tool definitions) is rendered with each piece that could make a special
token replaced by a marker: a private-use character that stands for that piece. The pieces are

* every occurrence of the text of a CONTROL or UNKNOWN token (`<|im_end|>`, `<s>`, ...);
* the string's end when it ends with the start of such a text (`...<|im_`) and its start when
  it starts with the end of one (`end|>...`), so that the string cannot complete a special token
  together with the text around it. Whitespace at the edges is looked through, since templates
  often strip it.

The markers are then put back and the result must be exactly the prompt rendered from the
original request: otherwise the template changed the user's text in a way the markers do not
survive, and `SafeTokenizationError` says so. Splitting the marked prompt at special tokens then
finds only the template's markup; the marked pieces become plain text again.

USER_DEFINED tokens are left alone: llama.cpp recognises them in plain text as well, as Hugging
Face tokenizers recognise non-special added tokens.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from templates.prompt_fragments import Fragment, SpecialVocab, prompt_fragments

Render = Callable[[list[dict[str, Any]], list[dict[str, Any]] | None], str]

# Keys whose values templates compare with fixed words; requests can only hold known words there.
_STRUCTURAL_KEYS = frozenset({"role", "type"})
_MARKERS = range(0x10FFFD, 0xFFFFF, -1)  # Supplementary Private Use Area-B, from its end


class SafeTokenizationError(Exception):
    """The template changes user text in a way that hides where it is in the prompt."""


@dataclass(frozen=True)
class RenderedPrompt:
    text: str  # the prompt rendered from the request as it is
    fragments: list[Fragment]  # its text and special tokens; user text always text
    marked: int  # how many of the request's strings held text kept from becoming special tokens


def prompt_from_render(render: Render, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                       vocab: SpecialVocab, *, safe: bool) -> RenderedPrompt:
    """The prompt and its fragments. With `safe`, user text is never a special token (see the
    module's doc); without it, special-token texts are tokens wherever they are, as with
    llama.cpp's `parse_special`. `render(messages, tools)` renders the chat template; its errors
    propagate. Raises `SafeTokenizationError` when `safe` cannot be honoured."""
    text = render(messages, tools)
    if not safe or not vocab.control_texts:
        return RenderedPrompt(text, prompt_fragments(text, vocab), 0)
    masker = _Masker(vocab, avoid=_characters(text, messages, tools))
    masked_messages = masker.walk(messages)
    masked_tools = masker.walk(tools)
    if not masker.pieces:
        return RenderedPrompt(text, prompt_fragments(text, vocab), 0)
    try:
        marked = render(masked_messages, masked_tools)
    except Exception as error:  # noqa: BLE001 - the same request rendered unmarked; the markers made it fail
        raise SafeTokenizationError(f"the chat template fails on marked user text: {error}") from None
    restore = masker.restore_table()
    if marked.translate(restore) != text:
        raise SafeTokenizationError("the chat template changes user text that holds special-token text, "
                                    "so it cannot be kept apart from the template's own special tokens")
    return RenderedPrompt(text, prompt_fragments(marked, vocab, restore=restore), masker.count)


def _characters(text: str, *values: Any) -> set[str]:
    chars = set(text)
    for value in values:
        for string in _strings(value):
            chars.update(string)
    return chars


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


class _Masker:
    """Replaces the pieces of strings that could make special tokens with marker characters."""

    def __init__(self, vocab: SpecialVocab, avoid: set[str]):
        self.vocab = vocab
        self.edges = _edges(vocab.control_texts)
        self.pieces: dict[str, str] = {}  # piece -> its marker
        self.count = 0
        forbidden = avoid.union(*vocab.control_texts)
        self._free = (chr(c) for c in _MARKERS if chr(c) not in forbidden)

    def walk(self, value: Any) -> Any:
        """A copy of `value` with every string masked (keys: only whole special-token texts)."""
        if isinstance(value, str):
            return self.mask(value, edges=True)
        if isinstance(value, dict):
            return {self.mask(key, edges=False) if isinstance(key, str) else key:
                    item if key in _STRUCTURAL_KEYS else self.walk(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.walk(item) for item in value]
        return value

    def mask(self, string: str, *, edges: bool) -> str:
        spans = _occurrences(string, self.vocab.control_texts)
        if edges:
            spans += self.edges.spans(string)
        if not spans:
            return string
        out, done = [], 0
        for start, end in _merged(spans):
            out.append(string[done:start])
            out.append(self._marker(string[start:end]))
            done = end
        out.append(string[done:])
        self.count += 1
        return "".join(out)

    def _marker(self, piece: str) -> str:
        marker = self.pieces.get(piece)
        if marker is None:
            marker = next(self._free, None)
            if marker is None:
                raise SafeTokenizationError("too many distinct special-token texts in user text")
            self.pieces[piece] = marker
        return marker

    def restore_table(self) -> dict[int, str]:
        return {ord(marker): piece for piece, marker in self.pieces.items()}


def _occurrences(string: str, texts: tuple[str, ...]) -> list[tuple[int, int]]:
    """Leftmost-longest occurrences of the texts: no text occurs in what lies outside them."""
    present = tuple(t for t in texts if t in string)
    if not present:
        return []
    return [match.span() for match in _alternation(present).finditer(string)]


@lru_cache(maxsize=256)
def _alternation(texts: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(t) for t in sorted(texts, key=len, reverse=True)))


@dataclass(frozen=True)
class _Edges:
    heads: frozenset[str]  # proper prefixes of special-token texts
    tails: frozenset[str]  # proper suffixes
    longest: int

    def spans(self, string: str) -> list[tuple[int, int]]:
        """The string's end that starts a special-token text and its start that ends one, at the
        string's very edges and inside the whitespace at them."""
        spans = []
        for end in {len(string), len(string.rstrip())}:
            span = self._head_before(string, end)
            if span:
                spans.append(span)
        for start in {0, len(string) - len(string.lstrip())}:
            span = self._tail_after(string, start)
            if span:
                spans.append(span)
        return spans

    def _head_before(self, string: str, end: int) -> tuple[int, int] | None:
        for size in range(min(self.longest, end), 0, -1):
            if string[end - size:end] in self.heads:
                return end - size, end
        return None

    def _tail_after(self, string: str, start: int) -> tuple[int, int] | None:
        for size in range(min(self.longest, len(string) - start), 0, -1):
            if string[start:start + size] in self.tails:
                return start, start + size
        return None


@lru_cache(maxsize=16)
def _edges(texts: tuple[str, ...]) -> _Edges:
    heads = frozenset(t[:k] for t in texts for k in range(1, len(t)))
    tails = frozenset(t[k:] for t in texts for k in range(1, len(t)))
    return _Edges(heads, tails, max((len(t) - 1 for t in texts), default=0))


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged
