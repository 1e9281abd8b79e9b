"""Draft models in the engine, without HTTP: decode speed with a draft against without, in one run.

    .venv/bin/python tests/bench/bench_draft_model.py [--tokens N] [--rounds R] [--streams 1 4] [--always]

The default model, greedy, `ignore_eos`, prompt-lookup drafts off. Three engines take turns,
round after round (this machine is shared and noisy: each ratio compares runs side by side):
- no draft: the baseline;
- the cut draft: the default model cut to its first 2 of 30 blocks (tests/fixtures/
  make_cut_draft.py), whose guesses are seldom right: the target is >= 0.95x the baseline, the
  drafter backing off once its drafts keep nothing;
- the exact copy: the model's own file as its draft, every guess right. On a CPU it cannot pay: the
  draft costs what the model costs, and checking k drafted tokens costs a (k + 1)-row step, which
  on a CPU is nearly k + 1 single steps. On a GPU a (k + 1)-row step costs about one, and a draft
  10-50x smaller than its model costs a few percent of a step: that is where drafts pay.
A draft that does not pay rests (`backends.draft_payoff`); `--always` adds each draft drafting at
every step (`--draft-model-always`), what it costs when it runs.
Reported: tokens/s from submission to the last token, summed over the streams, each as a ratio to
the baseline's median, and the drafted tokens and the share the output kept.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from backends.engine import Engine, EngineOptions
from backends.jobs import ChoiceFinished, GenerationJob, PromptSpec, SamplingParams
from backends.llama_model import LlamaModel, ModelOptions
from backends.registry import default_model_path
from backends.threads import physical_cores
from tests.fixtures.make_cut_draft import write_cut_draft

PROMPTS = ["Write a short story about a lighthouse keeper.", "Explain how a bicycle gear works.",
           "Describe a walk through a forest in autumn.", "List ten facts about the moon."]


async def run(engine: Engine, model: LlamaModel, streams: int, tokens: int) -> tuple[float, int, int]:
    """Tokens/s over `streams` concurrent requests, and their drafted and kept tokens."""
    drafted = kept = 0

    async def one(i: int) -> None:
        nonlocal drafted, kept
        text = f"<|im_start|>user\n{PROMPTS[i % len(PROMPTS)]}<|im_end|>\n<|im_start|>assistant\n"
        prompt = model.tokenize(text, add_special=False, parse_special=True)
        job = GenerationJob((PromptSpec(tuple(prompt), tokens),), 1, SamplingParams(temperature=0, ignore_eos=True),
                            stream=False)
        async for event in engine.submit(job).events():
            if isinstance(event, ChoiceFinished):
                drafted += event.draft_tokens
                kept += event.draft_kept

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(streams)))
    return streams * tokens / (time.perf_counter() - start), drafted, kept


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--threads", type=int, default=physical_cores())
    parser.add_argument("--model", type=Path, default=None, help="default: the embedded default model")
    parser.add_argument("--draft", action="append", default=[], metavar="NAME=FILE",
                        help="drafts to measure (default, for the default model: cut=its 2-block cut, exact=itself)")
    parser.add_argument("--gpu-layers", type=int, default=0)
    parser.add_argument("--always", action="store_true",
                        help="also each draft drafting at every step (`--draft-model-always`), beside the default "
                             "that rests where the draft does not pay")
    args = parser.parse_args()
    folder = tempfile.TemporaryDirectory()
    path = args.model or default_model_path()
    if args.draft:
        files = {name: Path(file) for name, _, file in (entry.partition("=") for entry in args.draft)}
    else:
        files = {"cut": write_cut_draft(path, Path(folder.name) / "cut.gguf"), "exact": path}
    options = ModelOptions(gpu_layers=args.gpu_layers)
    if args.always:
        files.update({f"{name}-always": file for name, file in list(files.items())})
    models = {name: LlamaModel(path, options) for name in ("none", *files)}
    drafts = {"none": None, **{name: LlamaModel(file, options) for name, file in files.items()}}
    engine_options = EngineOptions(ctx_size=1024, parallel=max(args.streams), threads=args.threads, auto_draft=False)
    always = replace(engine_options, draft_model_always=True)
    engines = {name: Engine(models[name], always if name.endswith("-always") else engine_options, drafts[name])
               for name in models}
    try:
        for streams in args.streams:
            speeds: dict[str, list[float]] = {name: [] for name in engines}
            counts = {name: [0, 0] for name in engines}
            for name, engine in engines.items():  # warm: graphs, caches
                asyncio.run(run(engine, models[name], streams, 16))
            for _ in range(args.rounds):
                for name, engine in engines.items():
                    speed, drafted, kept = asyncio.run(run(engine, models[name], streams, args.tokens))
                    speeds[name].append(speed)
                    counts[name][0] += drafted
                    counts[name][1] += kept
            base = statistics.median(speeds["none"])
            for name in engines:
                drafted, kept = counts[name]
                accepted = f", drafted {drafted}, kept {kept / drafted:.0%}" if drafted else ""
                print(f"{streams} stream(s), {name:12}: {statistics.median(speeds[name]):6.1f} tokens/s, "
                      f"{statistics.median(speeds[name]) / base:.2f}x{accepted}", flush=True)
    finally:
        for engine in engines.values():
            engine.close()  # with its draft model
        for model in models.values():
            model.close()
        folder.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
