"""The test embedding model itself: all-MiniLM-L6-v2 converted to GGUF (tests/embedding_model.py)
tokenizes as Hugging Face's tokenizer does and, run by llama.cpp, gives the vectors of an
independent numpy forward pass of the same weights. The server's /v1/embeddings is checked
against the same reference."""

from __future__ import annotations

import numpy as np
import pytest

from tests.embedding_model import minilm_gguf, reference_embedding, reference_tokens

TEXTS = [
    "A man is playing a guitar.",
    "Fireside runs GGUF models on the computer you already own.",
    "Héllo, wörld! 123 tokens_with-odd punctuation... and UPPER case",
    "日本語のテキストも少し。",
]


@pytest.fixture(scope="module")
def llama():
    from llama_cpp import Llama

    model = Llama(str(minilm_gguf()), embedding=True, verbose=False)
    yield model
    model.close()


def test_the_gguf_is_a_mean_pooled_bert() -> None:
    import gguf

    reader = gguf.GGUFReader(minilm_gguf())
    assert reader.fields["general.architecture"].contents() == "bert"
    assert reader.fields["bert.pooling_type"].contents() == int(gguf.PoolingType.MEAN)
    assert reader.fields["tokenizer.ggml.model"].contents() == "bert"


@pytest.mark.parametrize("text", TEXTS)
def test_llama_cpp_reads_the_converted_model_as_the_reference_does(llama, text: str) -> None:
    tokens = llama.tokenize(text.encode(), add_bos=True, special=False)
    assert tokens == reference_tokens(text)
    vector = np.array(llama.embed(text))
    cosine = float(vector @ reference_embedding(tokens) / np.linalg.norm(vector))
    assert cosine >= 0.999, cosine


def test_the_reference_tells_texts_apart() -> None:
    """The check would fail for a wrong model: unrelated sentences are far apart in the reference."""
    a, b = (reference_embedding(reference_tokens(t)) for t in TEXTS[:2])
    assert float(a @ b) < 0.5
