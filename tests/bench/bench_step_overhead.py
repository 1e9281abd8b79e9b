"""The engine's own cost per step, without HTTP: wall time per step against time inside llama_decode.

    .venv/bin/python tests/bench/bench_step_overhead.py [--streams 1 4 8] [--extras none grammar ...] [--tokens 256]
        [--model FILE --draft-model FILE] [--gpu-layers N]

What is left after decode is the scheduler's Python (batch building, sampling calls, text,
events) plus any wait for the GIL; on the default model a decode step is 5-30 ms. On a GPU a
7B-30B model decodes a step in 5-15 ms, and this host time is what the GPU waits on.

Each extra is measured on its own: `none` (greedy), `grammar` (a GBNF grammar constrains every
token), `logprobs` (the top 5 alternatives of every token), `draft` (a draft model, the default
model cut to 2 blocks by tests/fixtures/make_cut_draft.py: its own decodes count as decode time,
not host time, and a step is one of the model's), `lora` (every stream under a seeded LoRA
adapter from tests/fixtures/make_tiny_lora.py, made for the default model only).

On a GPU, llama_decode may return before the device has finished the step (the wait then falls in
whatever reads the logits first): the timed decode waits for the device with llama_synchronize,
so the device's work counts as decode time and only the host's as host time.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import llama_cpp

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from backends.engine import Engine, EngineOptions
from backends.jobs import GenerationJob, PromptSpec, SamplingParams
from backends.llama_model import LlamaModel, ModelOptions
from backends.registry import default_model_path
from backends.threads import physical_cores

decode_time = {"seconds": 0.0, "steps": 0}
counted: dict[str, object] = {"ctx": None}  # a step counts when it decodes this context (None: any)
_decode = llama_cpp.llama_decode


def _timed_decode(ctx, batch):
    start = time.perf_counter()
    try:
        return _decode(ctx, batch)
    finally:
        llama_cpp.llama_synchronize(ctx)
        decode_time["seconds"] += time.perf_counter() - start
        if counted["ctx"] is None or ctx is counted["ctx"]:
            decode_time["steps"] += 1


llama_cpp.llama_decode = _timed_decode


EXTRAS = ("none", "grammar", "logprobs", "draft", "lora")
GRAMMAR = 'root ::= [a-zA-Z ,.;:!?\'\\n-]*'  # prose: almost every step keeps going


async def measure(engine: Engine, model: LlamaModel, streams: int, tokens: int, **job: object) -> tuple[float, float]:
    async def one(i: int) -> None:
        prompt = model.tokenize(f"Story {i}. The lighthouse keeper climbed the stairs.", add_special=True,
                                parse_special=True)
        generation = GenerationJob((PromptSpec(tuple(prompt), tokens),), 1,
                                   SamplingParams(temperature=0, ignore_eos=True), stream=True, **job)
        async for _ in engine.submit(generation).events():
            pass

    await asyncio.gather(*(one(i) for i in range(streams)))  # warm: caches and graphs
    decode_time.update(seconds=0.0, steps=0)
    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(streams)))
    wall = time.perf_counter() - start
    steps = decode_time["steps"]
    return 1000 * wall / steps, 1000 * decode_time["seconds"] / steps


def _engine(model: LlamaModel, extra: str, parallel: int, threads: int, folder: Path,
            draft_path: Path | None, gpu_layers: int) -> tuple[Engine, dict]:
    """An engine for the extra, and the job fields that ask for it."""
    from backends.adapters import AdapterSet, LoraAdapter
    from backends.grammar import GrammarCache
    from backends.jobs import LogprobOptions
    from tests.fixtures.make_cut_draft import write_cut_draft
    from tests.fixtures.make_tiny_lora import write_adapter

    draft = None
    if extra == "draft":
        draft_path = draft_path or write_cut_draft(default_model_path(), folder / "cut.gguf")
        draft = LlamaModel(draft_path, ModelOptions(gpu_layers=gpu_layers))
    engine = Engine(model, EngineOptions(ctx_size=1024, parallel=parallel, threads=threads, auto_draft=False), draft)
    counted["ctx"] = engine._ctx
    if extra == "grammar":
        return engine, {"grammar": GrammarCache(model.vocab).get(GRAMMAR)}
    if extra == "logprobs":
        return engine, {"logprobs": LogprobOptions(top=5)}
    if extra == "lora":
        adapter = LoraAdapter(model, write_adapter(folder / "lora-1.gguf", 1))
        return engine, {"adapters": AdapterSet(((adapter, 1.0),))}
    return engine, {}


def main() -> int:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--extras", nargs="+", choices=EXTRAS, default=list(EXTRAS))
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=physical_cores())
    parser.add_argument("--model", type=Path, default=None, help="default: the embedded default model")
    parser.add_argument("--draft-model", type=Path, default=None,
                        help="the draft of the `draft` extra (default: the default model cut to 2 blocks)")
    parser.add_argument("--gpu-layers", type=int, default=0, help="layers of the model (and draft) on the GPU")
    args = parser.parse_args()
    if "lora" in args.extras and args.model is not None:
        parser.error("the lora extra's adapter is made for the default model: leave it out with --model")
    model = LlamaModel(args.model or default_model_path(), ModelOptions(gpu_layers=args.gpu_layers))
    folder = tempfile.TemporaryDirectory()
    try:
        for extra in args.extras:
            engine, job = _engine(model, extra, max(args.streams), args.threads, Path(folder.name),
                                  args.draft_model, args.gpu_layers)
            try:
                for streams in args.streams:
                    wall, decode = asyncio.run(measure(engine, model, streams, args.tokens, **job))
                    print(f"{extra:8} {streams} streams: {wall:.3f} ms per step, {decode:.3f} in llama_decode, "
                          f"{wall - decode:.3f} around it ({(wall - decode) / wall:.1%})", flush=True)
            finally:
                engine.close()
                counted["ctx"] = None
                for adapter, _ in job["adapters"].adapters if "adapters" in job else ():
                    adapter.close()
    finally:
        model.close()
        folder.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
