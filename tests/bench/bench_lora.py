"""LoRA adapters in the engine, without HTTP: what a stream under an adapter costs against the bare base.

    .venv/bin/python tests/bench/bench_lora.py [--tokens N] [--rounds R]

On the default model, greedy, `ignore_eos`, a seeded adapter from tests/fixtures/make_tiny_lora.py
(rank 8 on attn_q, attn_v, attn_output of every block). Two comparisons, their variants run in
turns round by round (each round starts with another one: the shared machine's drifting speed hits
all alike); the figures are medians over the rounds, a ratio the median of each round's own ratio:

1. one stream: the bare base, under the adapter at scale 1.0 (target: >= 0.9x the base), and at
   scale 0 (llama.cpp drops zero-scale adapters: ~1.0x). Decode tokens/s, first token to last.
2. four streams: four on the base against two on the base and two under the adapter. Total
   tokens/s, submission to last token. llama.cpp applies adapters to a whole context, so a decode
   step serves one adapter set (`AdapterTurns` gives the sets turns of a few steps): the 2+2 split
   needs about twice the steps of four base streams, each step half as wide.

Steps per run and ms per step inside llama_decode come from wrapping llama_cpp.llama_decode.
Drafting by prompt lookup is off unless `--auto-draft` (it would make the step count depend on
how repetitive each variant's greedy text happens to be).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from backends.adapters import AdapterSet, LoraAdapter
from backends.engine import Engine, EngineOptions
from backends.jobs import GenerationJob, PromptSpec, SamplingParams, TextDelta
from backends.llama_model import LlamaModel, ModelOptions
from backends.registry import default_model_path
from backends.threads import physical_cores
from tests.bench.bench_step_overhead import (
    decode_time,  # times llama_decode from its import on
)
from tests.fixtures.make_tiny_lora import write_adapter

Sets = list[AdapterSet | None]  # one entry a stream: its adapter set (None: the bare base)


class Run:
    """One variant's streams, measured once."""

    prompts = 0  # every stream of the whole run gets a prompt of its own: no prefix cache hits

    def __init__(self, engine: Engine, model: LlamaModel, tokens: int):
        self.engine, self.model, self.tokens = engine, model, tokens

    async def stream(self, adapters: AdapterSet | None) -> tuple[float, float, int]:
        """(first token's time, last token's time, tokens) of one stream."""
        Run.prompts += 1
        prompt = self.model.tokenize(f"{Run.prompts}. Story {Run.prompts}: the lighthouse keeper climbed the stairs.",
                                     add_special=True, parse_special=True)
        job = GenerationJob((PromptSpec(tuple(prompt), self.tokens),), 1,
                            SamplingParams(temperature=0, ignore_eos=True), stream=True, adapters=adapters)
        first = last = 0.0
        count = 0
        async for event in self.engine.submit(job).events():
            if isinstance(event, TextDelta):
                last = time.perf_counter()
                first = first or last
                count += 1
        return first, last, count

    async def measure(self, sets: Sets) -> dict[str, float]:
        """tok/s (one stream: decode, first token to last; more: all tokens over the wall time),
        decode steps, ms per step inside llama_decode."""
        decode_time.update(seconds=0.0, steps=0)
        start = time.perf_counter()
        streams = await asyncio.gather(*(self.stream(adapters) for adapters in sets))
        wall = time.perf_counter() - start
        steps, seconds = decode_time["steps"], decode_time["seconds"]
        if any(count != self.tokens for _, _, count in streams):
            raise RuntimeError(f"a stream ended early: {[count for _, _, count in streams]} of {self.tokens}")
        if len(streams) == 1:
            first, last, count = streams[0]
            rate = (count - 1) / (last - first)
        else:
            rate = sum(count for _, _, count in streams) / wall
        return {"tok/s": rate, "steps": steps, "ms/step": 1000 * seconds / max(steps, 1)}


async def bench(run: Run, groups: dict[str, dict[str, Sets]], rounds: int) -> dict[str, dict[str, list[dict]]]:
    samples: dict[str, dict[str, list[dict]]] = {group: {name: [] for name in variants}
                                                 for group, variants in groups.items()}
    for variants in groups.values():  # warm: graphs, caches, the adapters' first use
        for sets in variants.values():
            await run.measure(sets)
    for round_ in range(rounds):
        for group, variants in groups.items():
            names = list(variants)
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:  # each variant goes first in turn
                samples[group][name].append(await run.measure(variants[name]))
        print(f"round {round_ + 1}/{rounds}: " + ", ".join(
            f"{name} {samples[group][name][-1]['tok/s']:.1f}" for group in groups for name in groups[group]),
            flush=True)
    return samples


def median(results: list[dict], key: str) -> float:
    return statistics.median(result[key] for result in results)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=128, help="tokens per stream")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=physical_cores())
    parser.add_argument("--auto-draft", action="store_true", help="draft by prompt lookup, as the server may")
    args = parser.parse_args()
    model = LlamaModel(default_model_path(), ModelOptions())
    engine = Engine(model, EngineOptions(ctx_size=max(1024, 2 * args.tokens + 128), parallel=4,
                                         threads=args.threads, auto_draft=args.auto_draft))
    folder = tempfile.TemporaryDirectory()
    adapter = LoraAdapter(model, write_adapter(Path(folder.name) / "lora-1.gguf", 1))
    lora, zero = AdapterSet(((adapter, 1.0),)), AdapterSet(((adapter, 0.0),))
    groups: dict[str, dict[str, Sets]] = {
        "one stream": {"base": [None], "adapter 1.0": [lora], "adapter 0.0": [zero]},
        "four streams": {"4 base": [None] * 4, "2 base + 2 adapter": [None, lora, None, lora]},
    }
    try:
        samples = asyncio.run(bench(Run(engine, model, args.tokens), groups, args.rounds))
    finally:
        engine.close()
        adapter.close()
        model.close()
        folder.cleanup()
    print(f"\n{model.path.name}, {args.threads} threads, {args.tokens} tokens per stream, greedy, "
          f"auto-draft {'on' if args.auto_draft else 'off'}, medians of {args.rounds} rounds")
    print("\n| variant | tok/s | ratio to base | steps per run | ms per step in llama_decode |")
    print("| --- | --- | --- | --- | --- |")
    for variants in samples.values():
        base = next(iter(variants.values()))
        for name, results in variants.items():
            ratio = statistics.median(r["tok/s"] / b["tok/s"] for r, b in zip(results, base, strict=True))
            print(f"| {name} | {median(results, 'tok/s'):.1f} | {ratio:.3f} | {median(results, 'steps'):.0f} | "
                  f"{median(results, 'ms/step'):.2f} |")
    print("\none stream: decode tokens/s, first token to last; four streams: all tokens over the wall time. "
          "A decode step serves one adapter set, so 2 base + 2 adapter takes about twice the steps of 4 base.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
