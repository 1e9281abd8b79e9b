"""LoRA adapters loaded onto a base model (`backends/adapters.py`), with seeded adapters the tests
make (`tests/fixtures/make_tiny_lora.py`). Oracle: llama-cpp-python's own `Llama(model_path,
lora_path=...)`, run in the same test on the same machine: greedy tokens through our loaded adapter
equal its tokens; scale 0 equals the base."""

from __future__ import annotations

import asyncio
import ctypes
import functools
import itertools
from collections.abc import Iterator
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from backends.adapters import BARE, AdapterError, AdapterSet, LoraAdapter, apply
from backends.llama_model import LlamaModel, ModelOptions
from backends.registry import default_model_path
from tests.fixtures.make_tiny_lora import ALPHA, write_adapter
from tests.servers import engine_threads

PROMPT = "<|im_start|>user\nName three fruits.<|im_end|>\n<|im_start|>assistant\n"
TOKENS = 12


@pytest.fixture(scope="module")
def base() -> Iterator[LlamaModel]:
    model = LlamaModel(default_model_path(), ModelOptions())
    yield model
    model.close()


@pytest.fixture(scope="module")
def adapters(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("lora")
    return {"one": write_adapter(folder / "one.gguf", 1), "two": write_adapter(folder / "two.gguf", 2)}


def greedy(model: LlamaModel, adapters: AdapterSet) -> list[int]:
    """TOKENS greedy tokens after PROMPT on a fresh context that applies `adapters`."""
    params = llama_cpp.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_threads, params.n_threads_batch = 256, 256, 1, 1
    ctx = llama_cpp.llama_init_from_model(model.handle, params)
    try:
        apply(ctx, adapters)
        tokens = model.tokenize(PROMPT, add_special=True, parse_special=True)
        out: list[int] = []
        for _ in range(TOKENS):
            ids = (ctypes.c_int32 * len(tokens))(*tokens)  # kept alive: the batch points into it
            batch = llama_cpp.llama_batch_get_one(ids, len(tokens))
            assert llama_cpp.llama_decode(ctx, batch) == 0
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), shape=(model.n_vocab,))
            tokens = [int(logits.argmax())]
            out.extend(tokens)
        return out
    finally:
        llama_cpp.llama_free(ctx)


@functools.cache  # each adapter's oracle is asked more than once: load and decode it once
def oracle(lora: Path | None, scale: float = 1.0) -> list[int]:
    """llama-cpp-python's high-level path: the same prompt, greedy, with `lora_path` at `lora_scale`;
    with flash attention, as llama.cpp's default ("auto") chooses on a CPU and the engine runs (a
    random adapter this strong makes the other attention kernel's rounding show in greedy tokens)."""
    llm = llama_cpp.Llama(str(default_model_path()), lora_path=str(lora) if lora else None, lora_scale=scale,
                          n_ctx=256, n_threads=1, flash_attn=True, verbose=False)
    try:
        prompt = llm.tokenize(PROMPT.encode(), add_bos=True, special=True)
        out = []
        for token in llm.generate(prompt, temp=0.0, top_k=1):
            out.append(token)
            if len(out) == TOKENS:
                return out
        return out
    finally:
        llm.close()


def test_an_adapter_decodes_as_llama_cpp_python_applies_it(base: LlamaModel, adapters: dict[str, Path]) -> None:
    one = LoraAdapter(base, adapters["one"])
    try:
        assert one.alpha == ALPHA
        adapted = greedy(base, AdapterSet(((one, 1.0),)))
        assert adapted == oracle(adapters["one"])
        bare = greedy(base, BARE)
        assert bare == oracle(None)
        assert adapted != bare  # the adapter changes the answer: the comparison above can fail
        assert greedy(base, AdapterSet(((one, 0.0),))) == bare  # scale 0 is the base
    finally:
        one.close()


def test_two_adapters_share_one_base_and_differ(base: LlamaModel, adapters: dict[str, Path]) -> None:
    one, two = LoraAdapter(base, adapters["one"]), LoraAdapter(base, adapters["two"])
    try:
        assert greedy(base, AdapterSet(((one, 1.0),))) != greedy(base, AdapterSet(((two, 1.0),)))
        assert AdapterSet(((one, 1.0),)).key != AdapterSet(((one, 0.5),)).key  # KV differs with the scale
        two.close()
        assert greedy(base, AdapterSet(((one, 1.0),))) == oracle(adapters["one"])  # one unloads alone
        with pytest.raises(AdapterError, match="was unloaded"):
            apply(None, AdapterSet(((two, 1.0),)))  # refused before llama.cpp is called
    finally:
        one.close()
        two.close()


@pytest.mark.parametrize(("broken", "message"), [
    ("shape", r"tensor 'blk\.\d+\.attn_\w+\.weight' has incorrect shape: its shapes do not match the base model's"),
    ("arch", "made for another architecture than the base model's"),
    ("not_adapter", "not a LoRA adapter GGUF .general.type is 'model', not 'adapter'"),
    ("half", r"LoRA tensor pair for 'blk\.3\.attn_v\.weight' is missing one component"),
    ("unknown_tensor", r"LoRA tensor 'blk\.99\.attn_q\.weight' does not exist in base model \(made for another"),
])
def test_a_bad_adapter_is_refused_naming_the_file_and_the_tensor(base: LlamaModel, tmp_path: Path, broken: str,
                                                                  message: str) -> None:
    path = write_adapter(tmp_path / f"{broken}.gguf", broken=broken)
    with pytest.raises(AdapterError, match=message) as refused:
        LoraAdapter(base, path)
    assert str(refused.value).startswith(f"LoRA adapter {path}: ")


def test_a_missing_adapter_file_is_named(base: LlamaModel, tmp_path: Path) -> None:
    with pytest.raises(AdapterError, match=f"LoRA adapter {tmp_path / 'nope.gguf'}: file not found"):
        LoraAdapter(base, tmp_path / "nope.gguf")


def test_the_engine_batches_by_adapter_set_and_never_mixes_them(base: LlamaModel, adapters: dict[str, Path]) -> None:
    """Real engine, no HTTP: the base and two adapters, six streams at once on four slots, each
    equal to its answer alone and to llama-cpp-python's (so no step decoded one set's rows under
    another's); the same prompt under another adapter or scale reuses no KV."""
    from backends.engine import Engine, EngineOptions
    from backends.jobs import (
        CacheKeys,
        ChoiceFinished,
        GenerationJob,
        PromptSpec,
        SamplingParams,
        TextDelta,
    )

    one, two = LoraAdapter(base, adapters["one"]), LoraAdapter(base, adapters["two"])
    sets = {"base": None, "one": AdapterSet(((one, 1.0),)), "two": AdapterSet(((two, 1.0),))}
    engine = Engine(base, EngineOptions(ctx_size=1024, parallel=4, threads=engine_threads()))
    prompt = tuple(base.tokenize(PROMPT, add_special=True, parse_special=True))
    greedy_params = SamplingParams(temperature=0, ignore_eos=True)
    fresh = itertools.count()

    async def run(name: str, adapter_set: AdapterSet | None = None, cold: bool = True) -> tuple[list[int], int]:
        # cold: prefilled anew (a prompt reused from a slot is decoded in other chunks, and these
        # adapters are strong enough that the rounding shows in greedy tokens)
        job = GenerationJob((PromptSpec(prompt, TOKENS),), 1, greedy_params,
                            adapters=sets[name] if adapter_set is None else adapter_set,
                            cache=CacheKeys(isolation=str(next(fresh))) if cold else CacheKeys())
        tokens, cached = [], -1
        async for event in engine.submit(job).events():
            if isinstance(event, TextDelta):
                tokens.append(event.token)
            elif isinstance(event, ChoiceFinished):
                cached = event.cached_tokens
        return tokens, cached

    async def scenario() -> tuple[dict, list, list]:
        solo = {name: (await run(name))[0] for name in sets}
        mixed = await asyncio.gather(*(run(name) for name in ["one", "base", "two", "one", "base", "two"]))
        # once one's prompt is cached, it is reused under one; under another scale it is another
        # adapter set, and nothing is reused
        again = [await run("one", cold=False), await run("one", cold=False),
                 await run("one", AdapterSet(((one, 0.5),)), cold=False)]
        return solo, list(mixed), again

    try:
        solo, mixed, again = asyncio.run(scenario())
    finally:
        engine.close()
        one.close()
        two.close()
    assert solo["one"] == oracle(adapters["one"]) and solo["two"] == oracle(adapters["two"])
    assert solo["base"] == oracle(None)
    assert len({tuple(tokens) for tokens in solo.values()}) == 3
    assert [tokens for tokens, _ in mixed] == [solo[name] for name in ["one", "base", "two", "one", "base", "two"]]
    assert again[1][1] > 0 and again[2][1] == 0
