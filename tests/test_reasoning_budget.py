"""The engine caps reasoning: after the budget, it forces the closing tokens, and the answer
follows. Real engine and model, no HTTP; the markers are plain text here."""

from __future__ import annotations

import asyncio

import pytest

from backends.engine import Engine, EngineOptions
from backends.jobs import (
    ChoiceFinished,
    GenerationJob,
    PromptSpec,
    SamplingParams,
    TextDelta,
)
from backends.llama_model import LlamaModel, ModelOptions
from backends.reasoning_budget import BudgetTracker, ReasoningBudget
from tests.servers import engine_threads


@pytest.fixture(scope="module")
def engine(model_path):
    model = LlamaModel(model_path, ModelOptions())
    engine = Engine(model, EngineOptions(ctx_size=512, parallel=2, threads=engine_threads()))
    yield engine
    engine.close()
    model.close()


def run(engine: Engine, prompt: str, budget: ReasoningBudget | None, max_tokens: int = 60) -> tuple[list[str], int]:
    model = engine.model
    job = GenerationJob((PromptSpec(tuple(model.tokenize(prompt, add_special=True, parse_special=True)), max_tokens),),
                        1, SamplingParams(temperature=0, ignore_eos=True), reasoning_budget=budget)

    async def collect() -> tuple[list[str], int]:
        pieces, generated = [], 0
        async for event in engine.submit(job).events():
            if isinstance(event, TextDelta):
                pieces.append(event.text)
            elif isinstance(event, ChoiceFinished):
                generated = event.completion_tokens
        return pieces, generated

    return asyncio.run(collect())


def closing(engine: Engine, text: str) -> tuple[int, ...]:
    return tuple(engine.model.tokenize(text, add_special=False, parse_special=True))


def test_budget_spent_inside_an_open_block_forces_the_closing(engine) -> None:
    budget = ReasoningBudget(tokens=8, start=None, end="</think>", closing=closing(engine, " Time to answer.</think>\n\n"))
    pieces, generated = run(engine, "Think about the sea.", budget, max_tokens=40)
    text = "".join(pieces)
    reasoning, _, answer = text.partition(" Time to answer.</think>\n\n")
    assert _ == " Time to answer.</think>\n\n", text
    assert reasoning == "".join(pieces[:8])  # exactly the budget, then the forced tokens
    assert answer and generated == 40


def test_budget_counts_only_after_the_start_marker(engine) -> None:
    free, _ = run(engine, "The lighthouse keeper", None, max_tokens=30)
    start = "".join(free[:4])  # the model's own text, so it surely appears: treat it as the opener
    budget = ReasoningBudget(tokens=5, start=start, end="</think>", closing=closing(engine, "</think>"))
    pieces, _ = run(engine, "The lighthouse keeper", budget, max_tokens=30)
    assert pieces[:9] == free[:9]  # 4 opener tokens + 5 reasoning tokens, as without a budget
    assert "".join(pieces[9:]).startswith("</think>")


def test_no_forcing_when_the_block_closes_in_time() -> None:
    tracker = BudgetTracker(ReasoningBudget(tokens=3, start="<think>", end="</think>", closing=(1, 2)))
    for piece in ("Hi ", "<thi", "nk>", "a", "b", "</th", "ink>", "c", "d", "e", "f"):
        tracker.observe(piece, was_forced=False)
    assert not tracker.forced


def test_forcing_after_the_budget_inside_the_block() -> None:
    tracker = BudgetTracker(ReasoningBudget(tokens=3, start="<think>", end="</think>", closing=(7, 8)))
    for piece in ("<think>", "a", "b"):
        tracker.observe(piece, was_forced=False)
    assert not tracker.forced
    tracker.observe("c", was_forced=False)
    assert list(tracker.forced) == [7, 8]
    tracker.forced.popleft()
    tracker.observe("x", was_forced=True)
    tracker.observe("</think>", was_forced=True)
    assert not tracker.forced
