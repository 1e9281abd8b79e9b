"""Test support: does a GBNF grammar accept a text? Answered by llama.cpp's own grammar engine
(the one that constrains decoding), fed the text's tokens one by one."""

from __future__ import annotations

import functools

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
