"""Embedding requests on the shared run path, whatever door they came through (`/v1/embeddings`,
Ollama's `/api/embed` and `/api/embeddings`): the embedding plan, its inputs as tokens, the pooled
vectors from the engine (`app.pipeline.run.submit` and `job_events`: a client that leaves cancels
the job, failures map as for generation), and each vector shaped as the plan asks.

`normalize` scales each vector to unit length; `dimensions` keeps the first N components (then
renormalises when `normalize`), as Matryoshka-trained models are meant to be cut. With `logits`,
as Fireworks' `return_logits` does, each vector holds the logits of the listed ids instead (all of
them for an empty list): a generative model's vocabulary at the input's last position, a ranking
model's class scores; `normalize` then makes them probabilities (softmax over the listed ids).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np
from litestar.types import Receive

from app.pipeline.embedding_inputs import Item, format_objects
from app.pipeline.errors import BadRequest
from app.pipeline.run import job_events, submit
from backends.embedder import Pooling, declared_pooling
from backends.jobs import Embedded, EmbeddingJob
from backends.registry import Lease, ServedModel


@dataclass(frozen=True)
class EmbeddingPlan:
    """What an embedding request asks for, in Fireside's terms (each door builds it from its body)."""

    model: str
    inputs: tuple[Item, ...]
    prompt_template: str | None = None  # formats object inputs (app.pipeline.embedding_inputs)
    normalize: bool = False
    dimensions: int | None = None
    logits: tuple[int, ...] | None = None  # token or class ids whose logits replace the vector; (): all
    truncate: bool = False  # cut each input to what the model embeds at once (else a 400 says it is too long)


def shape_vector(vector: np.ndarray, plan: EmbeddingPlan) -> np.ndarray:
    """The vector the client asked for: cut to `dimensions`, then normalised when asked; logits
    become probabilities over the selected ids (softmax) when asked to normalise."""
    if plan.logits is not None:
        if not plan.normalize:
            return vector
        exp = np.exp(vector.astype(np.float64) - vector.max())
        return np.asarray(exp / exp.sum(), dtype=np.float32)
    if plan.dimensions is not None:
        if plan.dimensions > len(vector):
            raise BadRequest(f"dimensions {plan.dimensions} exceeds the model's {len(vector)}", param="dimensions")
        vector = vector[:plan.dimensions]
    if plan.normalize:
        norm = float(np.linalg.norm(vector))
        vector = vector / norm if norm > 0 else vector
    return np.asarray(vector, dtype=np.float32)


async def pooled(served: ServedModel, inputs: tuple[tuple[int, ...], ...], receive: Receive,
                 logits: tuple[int, ...] | None = None) -> list[np.ndarray]:
    """The engine's pooled output for each input (in order), from one embedding job: a client that
    leaves (`receive`) cancels it. Rerank's cross-encoder scores its pairs through this too."""
    if served.adapters is not None:  # the embedding context reads the base's weights alone
        raise BadRequest(f"{served.id} is a LoRA adapter on {served.base}: pooled outputs (embeddings, a "
                         f"cross-encoder's scores) come from the base model without adapters; ask {served.base} "
                         "for them", param="model")
    vectors: dict[int, np.ndarray] = {}
    async for event in job_events(submit(served, EmbeddingJob(inputs, logits)), receive):
        assert isinstance(event, Embedded)
        vectors[event.choice] = event.vector
    return [vectors[index] for index in range(len(inputs))]


async def embed_on(lease: Lease, plan: EmbeddingPlan, receive: Receive) -> tuple[list[np.ndarray], int]:
    """The plan's vectors, shaped as asked (`shape_vector`), and the prompt tokens they took, on a
    model the caller holds a lease on; a client that leaves (`receive`) cancels the job."""
    served = lease.served
    model = served.model
    if declared_pooling(model) == Pooling.rank and plan.logits is None:
        raise BadRequest(f"{plan.model} is a cross-encoder: it scores (query, document) pairs and has no "
                         "embedding; use /v1/rerank, or return_logits for its class scores", param="model")
    items = plan.inputs
    if plan.prompt_template is not None:
        items = tuple(await asyncio.to_thread(format_objects, plan.prompt_template, list(items), model,
                                              served.engine.embedding_input_limit))
    inputs = []
    for i, item in enumerate(items):
        tokens = (tuple(model.tokenize(item, add_special=True, parse_special=False)) if isinstance(item, str)
                  else item)
        if any(t < 0 or t >= model.n_vocab for t in tokens):
            raise BadRequest(f"input[{i}] holds a token id outside the vocabulary (0 to {model.n_vocab - 1})",
                             param="input")
        if plan.truncate:
            tokens = tokens[:served.engine.embedding_input_limit]
        inputs.append(tokens)
    vectors = await pooled(served, tuple(inputs), receive, plan.logits)
    return [shape_vector(vector, plan) for vector in vectors], sum(map(len, inputs))
