"""Fill-in-the-middle prompts with the vocabulary's FIM tokens, for the doors that complete code
between a prefix and a suffix (Ollama's `suffix`, llama-server's `/infill`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import llama_cpp

from app.pipeline.errors import BadRequest
from backends.registry import ServedModel

NO_TOKEN = -1  # LLAMA_TOKEN_NULL


@dataclass(frozen=True)
class FimTokens:
    pre: int
    suf: int
    mid: int
    rep: int  # the repository-level pattern's tokens (Qwen2.5-Coder's); NO_TOKEN when the model has none
    sep: int


def fim_tokens(served: ServedModel, param: str) -> FimTokens:
    """The model's FIM tokens; 400 naming the missing ones when it was not trained for FIM."""
    vocab = served.model.vocab
    tokens = FimTokens(*(int(read(vocab)) for read in (
        llama_cpp.llama_vocab_fim_pre, llama_cpp.llama_vocab_fim_suf, llama_cpp.llama_vocab_fim_mid,
        llama_cpp.llama_vocab_fim_rep, llama_cpp.llama_vocab_fim_sep)))
    missing = [name for name, token in (("FIM_PRE", tokens.pre), ("FIM_SUF", tokens.suf), ("FIM_MID", tokens.mid))
               if token < 0]
    if missing:
        raise BadRequest(f"{param} needs a model trained for fill-in-the-middle; {served.id}'s vocabulary has no "
                         f"{', '.join(missing)} token", param=param)
    return tokens


def fim_prompt(served: ServedModel, fim: FimTokens, prefix: Sequence[int], suffix: Sequence[int],
               extra: Sequence[int] = ()) -> tuple[int, ...]:
    """`[BOS] extra <FIM_PRE>prefix<FIM_SUF>suffix<FIM_MID>` (prefix-suffix-middle order)."""
    model = served.model
    start = [model.bos_token_id] if model.add_bos and model.bos_token_id >= 0 else []
    return (*start, *extra, fim.pre, *prefix, fim.suf, *suffix, fim.mid)
