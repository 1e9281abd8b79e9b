"""The embedding context (backends/embedder.py) on real models: all-MiniLM-L6-v2 against the
independent numpy reference, SmolLM2 with last-token pooling, batching that changes nothing."""

from __future__ import annotations

import numpy as np
import pytest

from backends.embedder import EmbeddingContext, EmbeddingError, Pooling, model_pooling
from backends.llama_model import LlamaModel, ModelOptions
from backends.registry import default_model_path
from tests.embedding_model import minilm_gguf, reference_embedding, reference_tokens
from tests.servers import engine_threads

TEXTS = ["A man is playing a guitar.", "Fireside runs GGUF models on the computer you already own.",
         "The weather in Paris is sunny today.", "Héllo, wörld!"]


@pytest.fixture(scope="module")
def minilm():
    model = LlamaModel(minilm_gguf(), ModelOptions())
    context = EmbeddingContext(model, ctx_size=512, threads=engine_threads(), max_inputs=2)
    yield model, context
    context.close()
    model.close()


@pytest.fixture(scope="module")
def smol():
    model = LlamaModel(default_model_path(), ModelOptions())
    context = EmbeddingContext(model, ctx_size=256, threads=engine_threads())
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
        EmbeddingContext(model, ctx_size=512, threads=engine_threads(), max_inputs=3)
    with pytest.raises(EmbeddingError, match="empty"):
        context.batches([[101, 102], []])
    with pytest.raises(EmbeddingError, match="600 tokens; this model embeds at most 512"):
        context.batches([[101] * 600])


# ------------------------------------------------------------------------------ through the engine's scheduler

def _engine_embed(model: LlamaModel, job_inputs: tuple[tuple[int, ...], ...], *, with_generation: bool = False):
    import asyncio

    from backends.engine import Engine, EngineOptions
    from backends.jobs import (
        ChoiceFinished,
        Embedded,
        EmbeddingJob,
        GenerationJob,
        JobFailed,
        PromptSpec,
        SamplingParams,
    )

    engine = Engine(model, EngineOptions(ctx_size=512, parallel=2, threads=engine_threads()))

    async def run() -> tuple[dict[int, np.ndarray], list[str], int]:
        jobs = [engine.submit(EmbeddingJob(job_inputs))]
        if with_generation:
            prompt = tuple(model.tokenize("Once upon a time", add_special=True, parse_special=False))
            jobs.append(engine.submit(GenerationJob((PromptSpec(prompt, 24),), 1, SamplingParams(temperature=0))))
        vectors: dict[int, np.ndarray] = {}
        failures: list[str] = []
        generated = 0
        for handle in jobs:
            async for event in handle.events():
                if isinstance(event, Embedded):
                    vectors[event.choice] = event.vector
                elif isinstance(event, JobFailed):
                    failures.append(str(event.error))
                elif isinstance(event, ChoiceFinished):
                    generated = event.completion_tokens
        return vectors, failures, generated

    try:
        return asyncio.run(run())
    finally:
        engine.close()


def test_the_engine_embeds_many_inputs_in_batches(minilm) -> None:
    model, _ = minilm
    texts = [f"sentence {i} about the weather in town" for i in range(100)]
    inputs = tuple(tuple(model.tokenize(t, add_special=True, parse_special=False)) for t in texts)
    vectors, failures, _ = _engine_embed(model, inputs)
    assert not failures and sorted(vectors) == list(range(100))
    for i in (0, 57, 99):
        assert float(_unit(vectors[i]) @ reference_embedding(list(inputs[i]))) >= 0.999


def test_embedding_and_generation_share_the_scheduler(smol) -> None:
    model, _ = smol
    inputs = tuple(tuple(model.tokenize(f"note {i}", add_special=True, parse_special=False)) for i in range(40))
    vectors, failures, generated = _engine_embed(model, inputs, with_generation=True)
    assert not failures and len(vectors) == 40 and generated == 24


def test_the_engine_fails_a_job_with_an_input_it_cannot_embed(minilm) -> None:
    model, _ = minilm
    vectors, failures, _ = _engine_embed(model, ((101, 102), ()))
    assert vectors == {} and failures == ["an input is empty: it has no tokens to embed"]
