"""The embedding context (backends/embedder.py) on real models: all-MiniLM-L6-v2 against the
independent numpy reference, SmolLM2 with last-token pooling, batching that changes nothing."""

from __future__ import annotations

import numpy as np
import pytest

from backends.embedder import EmbeddingContext, EmbeddingError, Pooling, model_pooling
from backends.llama_model import LlamaModel, ModelOptions
from backends.registry import default_model_path
from tests.embedding_model import minilm_gguf, reference_embedding, reference_tokens

TEXTS = ["A man is playing a guitar.", "Fireside runs GGUF models on the computer you already own.",
         "The weather in Paris is sunny today.", "Héllo, wörld!"]


@pytest.fixture(scope="module")
def minilm():
    model = LlamaModel(minilm_gguf(), ModelOptions())
    context = EmbeddingContext(model, ctx_size=512, threads=2, max_inputs=2)
    yield model, context
    context.close()
    model.close()


@pytest.fixture(scope="module")
def smol():
    model = LlamaModel(default_model_path(), ModelOptions())
    context = EmbeddingContext(model, ctx_size=256, threads=2)
    yield model, context
    context.close()
    model.close()


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def test_a_dedicated_embedding_model_declares_its_pooling(minilm, smol) -> None:
    assert model_pooling(minilm[0]) == Pooling.mean and minilm[1].pooling == Pooling.mean
    assert model_pooling(smol[0]) is None and smol[1].pooling == Pooling.last  # a generative model
    assert minilm[1].dimensions == 384 and smol[1].dimensions == 576


def test_minilm_vectors_match_the_reference(minilm) -> None:
    model, context = minilm
    inputs = [model.tokenize(text, add_special=True, parse_special=False) for text in TEXTS]
    assert inputs == [reference_tokens(text) for text in TEXTS]
    batches = context.batches(inputs)
    assert batches == [[0, 1], [2, 3]]  # at most max_inputs=2 sequences a batch
    vectors = np.concatenate([context.embed_batch([inputs[i] for i in batch]) for batch in batches])
    for tokens, vector in zip(inputs, vectors, strict=True):
        assert float(_unit(vector) @ reference_embedding(tokens)) >= 0.999


def test_batching_changes_no_vector(minilm, smol) -> None:
    for model, context in (minilm, smol):
        inputs = [model.tokenize(text, add_special=True, parse_special=False) for text in TEXTS[:2]]
        together = context.embed_batch(inputs)
        for tokens, vector in zip(inputs, together, strict=True):
            alone = context.embed_batch([tokens])[0]
            assert float(_unit(alone) @ _unit(vector)) > 0.9999
        assert float(_unit(together[0]) @ _unit(together[1])) < 0.99  # different texts, different vectors


def test_last_token_pooling_reads_the_last_position(smol) -> None:
    model, context = smol
    tokens = model.tokenize("The weather in Paris is sunny today.", add_special=True, parse_special=False)
    whole, prefix = context.embed_batch([tokens, tokens[:-1]])
    # causal attention: the prefix's last position is the whole text's second to last, a different vector
    assert float(_unit(whole) @ _unit(prefix)) < 0.999
    assert float(_unit(context.embed_batch([tokens[:-1]])[0]) @ _unit(prefix)) > 0.9999


def test_inputs_the_context_cannot_take_are_refused_with_numbers(minilm) -> None:
    model, context = minilm
    with pytest.raises(ValueError, match="must divide"):  # llama.cpp would abort the process
        EmbeddingContext(model, ctx_size=512, threads=2, max_inputs=3)
    with pytest.raises(EmbeddingError, match="empty"):
        context.batches([[101, 102], []])
    with pytest.raises(EmbeddingError, match="600 tokens; this model embeds at most 512"):
        context.batches([[101] * 600])
