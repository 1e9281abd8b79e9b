"""The engine's per-token log-probability records shaped into a choice's `logprobs`.

Two shapes, as the spec has them: the legacy one (`logprobs`: N; `LogProbs`, parallel lists) and
the OpenAI one (`logprobs: true`; `NewLogProbs`, one `LogProbContent` per token, which also
carries the sampling mask). The same shaper serves a whole answer and a stream: it keeps each
choice's running `text_offset`, so consecutive chunks continue where the previous one stopped.

This runs on the event loop, per streamed token when logprobs are asked for, so token texts are
decoded once per model and cached, and the work per token is a few list appends.
"""

from __future__ import annotations

import base64
import codecs
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from app.api.common.outputs import (
    ChoiceLogprobs,
    LogProbContent,
    LogProbs,
    NewLogProbs,
    TopLogProb,
)
from app.pipeline.plan import MaskMode
from app.pipeline.stream_buffer import Entry
from backends.jobs import MASK_LIST_LIMIT, TokenLogprob
from backends.model_cache import per_model


class PieceSource(Protocol):
    """What `TokenTexts` needs of a model: a thread-safe token-to-bytes lookup."""

    def token_piece(self, token: int, *, special: bool = True) -> bytes: ...


@dataclass(frozen=True, slots=True)
class TokenText:
    """One token as logprobs show it.

    `bytes` is shared by every response that mentions the token: never mutate it.
    `plain` is the piece as the choice's text has it when special tokens are not rendered
    (empty for control tokens), which is what text offsets count in that case.
    """

    text: str  # the piece, special tokens as their text, invalid UTF-8 replaced
    bytes: list[int]
    piece: bytes
    plain: bytes


class TokenTexts:
    """Token id -> `TokenText`, filled on first use; one per model (see `token_texts`).

    Safe from any thread: two threads missing the same id both compute it and store equal values.
    """

    def __init__(self, model: PieceSource) -> None:
        self._model = model
        self._cache: dict[int, TokenText] = {}

    def get(self, token: int) -> TokenText:
        cached = self._cache.get(token)
        if cached is None:
            cached = self._cache[token] = self._load(token)
        return cached

    def _load(self, token: int) -> TokenText:
        piece = self._model.token_piece(token, special=True)
        plain = self._model.token_piece(token, special=False)
        return TokenText(piece.decode("utf-8", errors="replace"), list(piece), piece, plain)


token_texts = per_model(TokenTexts)  # the model's shared token text cache


class _Offset:
    """A choice's running text offset in characters of its text.

    Pieces go through an incremental UTF-8 decoder, as the engine builds the choice's text, so a
    character split over two tokens counts once (at the token that completes it) rather than as
    one replacement character per token.
    """

    __slots__ = ("decoder", "value")

    def __init__(self, value: int = 0) -> None:
        self.value = value
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def advance(self, piece: bytes) -> None:
        self.value += len(self.decoder.decode(piece))


class LogprobShaper:
    """Shapes positions of one request's choices into `LogProbs` (legacy) or `NewLogProbs`.

    `top`: alternatives per position. `mask`: the request's `sampling_mask` (new shape only; the
    spec puts it on new-format entries). `special_text`: whether the choice's text includes
    special tokens' text (the job's `special_text`), which decides what text offsets count.
    """

    def __init__(
        self,
        texts: TokenTexts,
        *,
        legacy: bool,
        top: int,
        mask: MaskMode | None = None,
        special_text: bool = False,
    ) -> None:
        self.texts = texts
        self.legacy = legacy
        self.top = top
        self.mask = mask
        self.special_text = special_text
        self._offsets: dict[int, _Offset] = {}

    def set_offset(self, choice: int, offset: int) -> None:
        """Continue `choice`'s offsets from `offset` (for example the length of echoed prompt
        text that comes before the completion)."""
        self._offsets[choice] = _Offset(offset)

    def offset(self, choice: int) -> int:
        """The text offset the choice's next position gets."""
        state = self._offsets.get(choice)
        return state.value if state is not None else 0

    def shape(
        self, choice: int, entries: Iterable[Entry], *, special_text: bool | None = None
    ) -> LogProbs | NewLogProbs:
        """The next positions of `choice`, in the request's shape; offsets continue from the
        previous call. `special_text` overrides the shaper's for these positions (an echoed
        prompt whose special tokens are written out, say)."""
        state = self._offsets.get(choice)
        if state is None:
            state = self._offsets[choice] = _Offset()
        plain = not (self.special_text if special_text is None else special_text)
        if self.legacy:
            return self._legacy(entries, state, plain)
        return NewLogProbs(content=[self._content(token, record, state, plain) for token, record in entries])

    def _legacy(self, entries: Iterable[Entry], state: _Offset, plain: bool) -> LogProbs:
        tokens: list[str] = []
        token_logprobs: list[float | None] = []
        top_logprobs: list[dict[str, float] | None] = []
        offsets: list[int] = []
        ids: list[int] = []
        for token, record in entries:
            info = self.texts.get(token)
            tokens.append(info.text)
            ids.append(token)
            offsets.append(state.value)
            state.advance(info.plain if plain else info.piece)
            if record is None:
                token_logprobs.append(None)
                top_logprobs.append(None)
            else:
                token_logprobs.append(float(record.logprob))
                top_logprobs.append(self._legacy_top(info.text, record))
        return LogProbs(
            tokens=tokens, token_logprobs=token_logprobs, top_logprobs=top_logprobs,
            text_offset=offsets, token_ids=ids,
        )

    def _legacy_top(self, text: str, record: TokenLogprob) -> dict[str, float]:
        """The `top` most likely tokens by text, plus the sampled token always ("up to
        `logprobs`+1 elements"). Tokens whose texts collide keep the more likely one's value,
        except that the sampled token's own value wins."""
        top: dict[str, float] = {}
        for alternative, logprob in record.top[: self.top]:
            top.setdefault(self.texts.get(alternative).text, float(logprob))
        top[text] = float(record.logprob)
        return top

    def _content(self, token: int, record: TokenLogprob | None, state: _Offset, plain: bool) -> LogProbContent:
        info = self.texts.get(token)
        offset = state.value
        state.advance(info.plain if plain else info.piece)
        if record is None:
            return LogProbContent(
                token=info.text, logprob=None, sampling_logprob=None, bytes=info.bytes,
                top_logprobs=[], token_id=token, text_offset=offset,
            )
        sampling = record.sampling_logprob
        entry = LogProbContent(
            token=info.text,
            logprob=float(record.logprob),
            sampling_logprob=None if sampling is None else float(sampling),
            bytes=info.bytes,
            top_logprobs=[self._alternative(alt, logprob) for alt, logprob in record.top[: self.top]],
            token_id=token,
            text_offset=offset,
        )
        if self.mask is not None and record.active_count is not None:
            self._add_mask(entry, record)
        return entry

    def _alternative(self, token: int, logprob: float) -> TopLogProb:
        info = self.texts.get(token)
        return TopLogProb(token=info.text, logprob=float(logprob), token_id=token, bytes=info.bytes)

    def _add_mask(self, entry: LogProbContent, record: TokenLogprob) -> None:
        """The count always; the ids too when asked for and at most MASK_LIST_LIMIT of them
        (the engine leaves `active_ids` None above it)."""
        count = record.active_count
        entry.sampling_mask_count = count
        ids = record.active_ids
        if self.mask == "count" or ids is None or count > MASK_LIST_LIMIT:
            return
        entry.sampling_mask = mask_list(ids) if self.mask == "non_zero_list" else mask_buffer(ids)


def mask_list(ids: np.ndarray) -> list[int]:
    return ids.tolist()


def mask_buffer(ids: np.ndarray) -> str:
    """Base64 of the ids as little-endian uint32, as `non_zero_buffer` asks."""
    return base64.b64encode(np.asarray(ids, dtype="<u4").tobytes()).decode("ascii")


def merge_logprobs(first: ChoiceLogprobs, second: ChoiceLogprobs) -> ChoiceLogprobs:
    """`first` followed by `second` (coalescing stream chunks); either may be None.

    `first` is extended in place and returned, so that coalescing many chunks stays linear:
    do not use it on its own afterwards. Both must have the same shape.
    """
    if first is None:
        return second
    if second is None:
        return first
    if isinstance(first, NewLogProbs) and isinstance(second, NewLogProbs):
        first.content.extend(second.content)
        return first
    if isinstance(first, LogProbs) and isinstance(second, LogProbs):
        return _merge_legacy(first, second)
    raise TypeError(f"cannot merge {type(first).__name__} with {type(second).__name__}")


def _merge_legacy(first: LogProbs, second: LogProbs) -> LogProbs:
    before, after = len(first.tokens), len(second.tokens)
    first.tokens.extend(second.tokens)
    first.token_logprobs.extend(second.token_logprobs)
    first.text_offset.extend(second.text_offset)
    if first.top_logprobs is None and second.top_logprobs is None:
        pass
    elif first.top_logprobs is None:
        first.top_logprobs = [None] * before + second.top_logprobs
    else:
        first.top_logprobs.extend(second.top_logprobs if second.top_logprobs is not None else [None] * after)
    if first.token_ids is not None and second.token_ids is not None:
        first.token_ids.extend(second.token_ids)
    else:
        first.token_ids = None  # ids of only some positions would misalign with the tokens
    return first
