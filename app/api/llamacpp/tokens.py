"""Tokens as llama-server reads and writes them: prompts of text and ids mixed, pieces as text
or bytes, token ids turned back into text."""

from __future__ import annotations

import asyncio

from app.api.common.logprobs import TokenTexts, token_texts
from app.api.llamacpp.wire import TokenPiece
from app.pipeline.errors import BadRequest
from backends.llama_model import LlamaModel

MixedPrompt = str | list[int | str]


def check_ids(tokens: list[int], n_vocab: int, param: str) -> None:
    """400 for an id outside the vocabulary (llama-server reads past its tables there)."""
    for i, token in enumerate(tokens):
        if not 0 <= token < n_vocab:
            raise BadRequest(f"{param}[{i}]: token id {token} is outside the vocabulary (0..{n_vocab - 1})",
                             param=param)


def mixed_tokens(model: LlamaModel, prompt: MixedPrompt, *, add_special: bool, parse_special: bool,
                 param: str) -> list[int]:
    """A prompt of text, token ids or both, as llama-server's `tokenize_mixed` reads it: only a
    leading text gets the special tokens (BOS); ids are checked against the vocabulary."""
    if isinstance(prompt, str):
        return model.tokenize(prompt, add_special=add_special, parse_special=parse_special)
    tokens: list[int] = []
    for i, item in enumerate(prompt):
        if isinstance(item, str):
            tokens += model.tokenize(item, add_special=add_special and i == 0, parse_special=parse_special)
        else:
            check_ids([item], model.n_vocab, param)
            tokens.append(item)
    return tokens


def pieces(texts: TokenTexts, tokens: list[int]) -> list[TokenPiece]:
    """Each token with its piece: text where the piece is valid UTF-8 by itself, else its bytes."""
    out = []
    for token in tokens:
        piece = texts.get(token).piece
        try:
            out.append(TokenPiece(token, piece.decode("utf-8")))
        except UnicodeDecodeError:
            out.append(TokenPiece(token, list(piece)))
    return out


def pieces_text(texts: TokenTexts, tokens: list[int]) -> str:
    """The tokens' pieces joined (special tokens as their text), as `/detokenize` answers; bytes
    that are not UTF-8 (a character cut between tokens) become U+FFFD."""
    return b"".join(texts.get(token).piece for token in tokens).decode("utf-8", errors="replace")


async def detokenized(model: LlamaModel, tokens: list[int]) -> str:
    """`tokens` as text (`pieces_text`), after checking every id: both detokenize routes' answer."""
    check_ids(tokens, model.n_vocab, "tokens")
    return await asyncio.to_thread(pieces_text, token_texts(model), tokens)


def valid_prefix(piece: bytes) -> str:
    """A piece's text up to where its UTF-8 breaks off (llama-server's `validate_utf8`; stray bytes dropped)."""
    return piece.decode("utf-8", errors="ignore")
