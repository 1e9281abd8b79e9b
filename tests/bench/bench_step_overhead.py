"""The engine's own cost per step, without HTTP: wall time per step against time inside llama_decode.

    .venv/bin/python tests/bench/bench_step_overhead.py [--streams 1 8] [--tokens 256]

What is left after decode is the scheduler's Python (batch building, sampling calls, text,
events) plus any wait for the GIL; on the default model a decode step is 5-30 ms.
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

from backends.engine import Engine, EngineOptions  # noqa: E402
from backends.jobs import GenerationJob, PromptSpec, SamplingParams  # noqa: E402
from backends.llama_model import LlamaModel, ModelOptions  # noqa: E402
from backends.registry import default_model_path  # noqa: E402
from backends.threads import physical_cores  # noqa: E402

decode_time = {"seconds": 0.0, "steps": 0}
_decode = llama_cpp.llama_decode


def _timed_decode(ctx, batch):  # noqa: ANN001, ANN202
    start = time.perf_counter()
    try:
        return _decode(ctx, batch)
    finally:
        decode_time["seconds"] += time.perf_counter() - start
        decode_time["steps"] += 1


llama_cpp.llama_decode = _timed_decode


async def measure(engine: Engine, model: LlamaModel, streams: int, tokens: int) -> tuple[float, float]:
    async def one(i: int) -> None:
        prompt = model.tokenize(f"Story {i}. The lighthouse keeper climbed the stairs.", add_special=True,
                                parse_special=True)
        job = GenerationJob((PromptSpec(tuple(prompt), tokens),), 1,
                            SamplingParams(temperature=0, ignore_eos=True), stream=True)
        async for _ in engine.submit(job).events():
            pass

    await asyncio.gather(*(one(i) for i in range(streams)))  # warm: caches and graphs
    decode_time.update(seconds=0.0, steps=0)
    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(streams)))
    wall = time.perf_counter() - start
    steps = decode_time["steps"]
    return 1000 * wall / steps, 1000 * decode_time["seconds"] / steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=physical_cores())
    args = parser.parse_args()
    model = LlamaModel(default_model_path(), ModelOptions())
    engine = Engine(model, EngineOptions(ctx_size=1024, parallel=max(args.streams), threads=args.threads))
    try:
        for streams in args.streams:
            wall, decode = asyncio.run(measure(engine, model, streams, args.tokens))
            print(f"{streams} streams: {wall:.3f} ms per step, {decode:.3f} in llama_decode, "
                  f"{wall - decode:.3f} around it ({(wall - decode) / wall:.1%})")
    finally:
        engine.close()
        model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
