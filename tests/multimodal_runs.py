"""What the projector tests (images with M-RoPE, sound) share: a model with its projector and an
engine, the engine's greedy answer with the first token's top 5, and the top 5 of a logits row
as the references compute them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from backends.engine import Engine, EngineOptions
from backends.jobs import (
    ChoiceFinished,
    GenerationJob,
    JobFailed,
    LogprobOptions,
    PromptSpec,
    SamplingParams,
    TextDelta,
)
from backends.llama_model import LlamaModel, ModelOptions
from backends.vision import Projector
from tests.servers import engine_threads


@contextmanager
def projector_engine(text_path: Path, projector_path: Path) -> Iterator[tuple[LlamaModel, Projector, Engine, Path]]:
    """The model, its projector, an engine of two slots over it, and the projector's path."""
    model = LlamaModel(text_path, ModelOptions())
    projector = Projector(model, projector_path, threads=engine_threads())
    engine = Engine(model, EngineOptions(ctx_size=512, parallel=2, threads=engine_threads()))
    try:
        yield model, projector, engine, projector_path
    finally:
        engine.close()
        projector.close()
        model.close()


def engine_greedy(engine: Engine, prompt: PromptSpec) -> tuple[str, list[tuple[int, float]], ChoiceFinished]:
    """The greedy text, the first token's 5 most likely (token, logprob), and the usage."""
    async def run() -> tuple[str, list[tuple[int, float]], ChoiceFinished]:
        handle = engine.submit(GenerationJob((prompt,), 1, SamplingParams(temperature=0), special_text=True,
                                             logprobs=LogprobOptions(top=5)))
        text, top, finished = "", [], None
        async for event in handle.events():
            if isinstance(event, TextDelta):
                text += event.text
                if not top and event.logprob is not None:
                    top = list(event.logprob.top)
            elif isinstance(event, ChoiceFinished):
                finished = event
            elif isinstance(event, JobFailed):
                raise event.error
        assert finished is not None
        return text, top, finished
    return asyncio.run(run())


def top5(logits: np.ndarray) -> list[tuple[int, float]]:
    """A logits row's 5 most likely (token, logprob), in float64."""
    logprobs = logits.astype(np.float64) - np.log(np.exp(logits - logits.max()).sum()) - logits.max()
    return [(int(i), float(logprobs[i])) for i in np.argsort(-logprobs, kind="stable")[:5]]
