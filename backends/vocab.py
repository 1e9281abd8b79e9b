"""A model's special tokens as llama.cpp's tokenizer sees them, read from its vocabulary.

`templates.prompt_fragments` splits rendered prompts at these tokens' texts the way llama.cpp does
(`llama_vocab::impl::tokenizer_st_partition`): it considers the tokens with the CONTROL,
USER_DEFINED or UNKNOWN attribute; CONTROL and UNKNOWN ones only exist with `parse_special`; a
token with LSTRIP (RSTRIP) swallows the ASCII whitespace on its left (right).
"""

from __future__ import annotations

from dataclasses import dataclass

import llama_cpp

from backends.llama_model import LlamaModel
from backends.model_cache import per_model

CONTROL = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL
USER_DEFINED = llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
UNKNOWN = llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
LSTRIP = llama_cpp.LLAMA_TOKEN_ATTR_LSTRIP
RSTRIP = llama_cpp.LLAMA_TOKEN_ATTR_RSTRIP
_ONLY_WITH_PARSE_SPECIAL = CONTROL | UNKNOWN
_PARTITIONED = _ONLY_WITH_PARSE_SPECIAL | USER_DEFINED


@dataclass(frozen=True)
class SpecialToken:
    id: int
    text: str
    attr: int  # llama.cpp's LLAMA_TOKEN_ATTR_* bits

    @property
    def needs_parse_special(self) -> bool:
        """CONTROL and UNKNOWN tokens: plain-text tokenization never produces them."""
        return bool(self.attr & _ONLY_WITH_PARSE_SPECIAL)

    @property
    def lstrip(self) -> bool:
        return bool(self.attr & LSTRIP)

    @property
    def rstrip(self) -> bool:
        return bool(self.attr & RSTRIP)


def read_special_tokens(model: LlamaModel) -> tuple[SpecialToken, ...]:
    """The model's special tokens, in id order (tens of milliseconds for 250k tokens)."""
    tokens = []
    for token in range(model.n_vocab):
        attr = llama_cpp.llama_vocab_get_attr(model.vocab, token)
        if attr & _PARTITIONED:
            raw = llama_cpp.llama_vocab_get_text(model.vocab, token) or b""
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                continue  # never found whole in valid UTF-8 text
            tokens.append(SpecialToken(token, text, attr))
    return tuple(tokens)


special_tokens = per_model(read_special_tokens)  # read once per model, dropped with it


def marker_texts(model: LlamaModel) -> tuple[frozenset[str], frozenset[str]]:
    """The texts of the model's special tokens, and of those among them that are CONTROL tokens
    (rendered as text only on request): the vocabulary's cues for chat-format recognition."""
    tokens = special_tokens(model)
    return (frozenset(t.text for t in tokens if t.text),
            frozenset(t.text for t in tokens if t.text and t.attr & CONTROL))
