"""The prompt as fragments: plain text to tokenize without special tokens, and single special tokens.

A rendered chat prompt is one string in which the template's markup (`<|im_start|>`, `<|im_end|>`,
...) is written as text. `prompt_fragments` splits it at the texts of the vocabulary's special
tokens exactly as llama.cpp's tokenizer does when it parses special tokens
(`llama_vocab::impl::tokenizer_st_partition` in `src/llama-vocab.cpp`):

* the tokens considered are those with the CONTROL, USER_DEFINED or UNKNOWN attribute, longest
  text (in bytes) first;
* for each token in turn, every leftmost non-overlapping occurrence of its text inside the
  fragments that are still text becomes that token;
* a token with the LSTRIP (RSTRIP) attribute swallows the ASCII whitespace on its left (right).

CONTROL and UNKNOWN tokens are only recognised with `parse_special`, so they become `int`
fragments. USER_DEFINED tokens are recognised in plain text too, so they stay text: tokenizing a
text fragment with `parse_special=False` finds them again at the same places.

`fragment_tokens` tokenizes each text fragment on its own. That gives llama.cpp's own tokens for
the whole text, because llama.cpp tokenizes every text piece between special tokens on its own
as well, and SentencePiece's space prefix (added before a piece that starts the prompt or follows
a special token) is what a separate call adds before each fragment, each of which starts the
prompt or follows an `int` fragment.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

Fragment = str | int

_ASCII_SPACE = frozenset(" \t\n\v\f\r")  # C's isspace() in the "C" locale, which llama.cpp uses


class SpecialToken(Protocol):
    """A special token of the vocabulary, as the engine reads it (`backends.vocab.SpecialToken`)."""

    @property
    def id(self) -> int: ...
    @property
    def text(self) -> str: ...
    @property
    def needs_parse_special(self) -> bool:
        """CONTROL and UNKNOWN tokens: plain-text tokenization never produces them."""
    @property
    def lstrip(self) -> bool: ...
    @property
    def rstrip(self) -> bool: ...


class SpecialVocab:
    """A vocabulary's special tokens in the order llama.cpp matches them; build once per model."""

    def __init__(self, tokens: Iterable[SpecialToken]):
        # llama.cpp sorts by text length in bytes with std::sort, which leaves the order of equal
        # lengths unspecified; ids break ties here. The order only matters for two texts of the
        # same length that overlap in the prompt.
        self.tokens: tuple[SpecialToken, ...] = tuple(
            sorted((t for t in tokens if t.text), key=lambda t: (-len(t.text.encode()), t.id)))
        self.by_id: dict[int, SpecialToken] = {t.id: t for t in self.tokens}
        # The texts that only parse_special turns into tokens: what user text must never produce.
        self.control_texts: tuple[str, ...] = tuple(dict.fromkeys(t.text for t in self.tokens if t.needs_parse_special))
        self._first_chars = frozenset(t.text[0] for t in self.tokens)

    def present(self, text: str) -> list[SpecialToken]:
        """The tokens whose text occurs in `text`, in matching order: the others cannot split it."""
        chars = self._first_chars.intersection(text)
        return [t for t in self.tokens if t.text[0] in chars and t.text in text] if chars else []

    def partition(self, text: str) -> list[tuple[int, int] | int]:
        """llama.cpp's partition of `text` with `parse_special`: (start, end) spans of text and token ids."""
        pieces: list[tuple[int, int] | int] = [(0, len(text))] if text else []
        for token in self.present(text):
            split: list[tuple[int, int] | int] = []
            for piece in pieces:
                if isinstance(piece, int):
                    split.append(piece)
                else:
                    _split_at(text, piece, token, split)
            pieces = split
        return pieces


def _split_at(text: str, span: tuple[int, int], token: SpecialToken, out: list[tuple[int, int] | int]) -> None:
    """Appends to `out` the span cut at every leftmost non-overlapping occurrence of the token."""
    start, end = span
    while True:
        match = text.find(token.text, start, end)
        if match < 0:
            if start < end:
                out.append((start, end))
            return
        left_end = match
        if token.lstrip:
            while left_end > start and text[left_end - 1] in _ASCII_SPACE:
                left_end -= 1
        if left_end > start:
            out.append((start, left_end))
        out.append(token.id)
        start = match + len(token.text)
        if token.rstrip:
            while start < end and text[start] in _ASCII_SPACE:
                start += 1


def prompt_fragments(text: str, vocab: SpecialVocab, *, restore: dict[int, str] | None = None) -> list[Fragment]:
    """`text` as fragments: special tokens (CONTROL, UNKNOWN) as ids, the text between them as
    strings, adjacent text merged into one string.

    `restore` is a `str.translate` table applied to the text between special tokens: marker
    characters standing for user text that must stay plain text (see `templates.safe_prompt`).
    """
    fragments: list[Fragment] = []
    for piece in vocab.partition(text):
        if isinstance(piece, tuple):
            between = text[piece[0]:piece[1]]
            _append_text(fragments, between.translate(restore) if restore else between)
        elif vocab.by_id[piece].needs_parse_special:
            fragments.append(piece)
        else:
            _append_text(fragments, vocab.by_id[piece].text)
    return fragments


def _append_text(fragments: list[Fragment], text: str) -> None:
    if fragments and isinstance(fragments[-1], str):
        fragments[-1] += text
    else:
        fragments.append(text)


class Tokenizer(Protocol):
    add_bos: bool
    bos_token_id: int

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]: ...


def fragment_tokens(model: Tokenizer, fragments: Sequence[Fragment]) -> list[int]:
    """The prompt's tokens: the model's BOS when it adds one and the fragments do not start with
    it, then each text fragment tokenized as plain text and each id as it is. No EOS is added."""
    tokens: list[int] = []
    if model.add_bos and model.bos_token_id >= 0 and (not fragments or fragments[0] != model.bos_token_id):
        tokens.append(model.bos_token_id)
    for fragment in fragments:
        if isinstance(fragment, int):
            tokens.append(fragment)
        elif fragment:
            tokens.extend(model.tokenize(fragment, add_special=False, parse_special=False))
    return tokens
