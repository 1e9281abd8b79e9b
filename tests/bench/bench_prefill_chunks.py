"""What a prompt token costs deep in a long prompt, by chunk size: the bound under fair prefill.

    .venv/bin/python tests/bench/bench_prefill_chunks.py [--prompt-tokens 3400] [--threads 2]

On llama.cpp's own API (no server): one sequence prefills a `--prompt-tokens` prompt in chunks of
512, 128, 64, 32, 16 and 4 tokens (a 4096-token context, the engine's settings). For each: the
whole prefill's time, and the time per token and per step of the chunks past 80% of the prompt.
A stream decoding beside a long prefill waits at least one such step per token, so this gives,
for a target gap, the largest chunk the step allows and what the prompt then costs against the
512-token chunks it would prefill in alone.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import llama_cpp

from backends.llama_model import LlamaModel, ModelOptions
from backends.registry import default_model_path

CHUNKS = (512, 128, 64, 32, 16, 4)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--prompt-tokens", type=int, default=3400)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    model = LlamaModel(args.model or default_model_path(), ModelOptions())
    params = llama_cpp.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch, params.n_seq_max = 4096, 512, 512, 1
    params.n_threads = params.n_threads_batch = args.threads
    params.no_perf = True
    ctx = llama_cpp.llama_init_from_model(model.handle, params)
    memory = llama_cpp.llama_get_memory(ctx)
    batch = llama_cpp.llama_batch_init(512, 0, 1)
    tokens = [(i * 7919) % (model.n_vocab - 200) + 100 for i in range(args.prompt_tokens)]

    def decode(start: int, count: int) -> float:
        for i in range(count):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = tokens[start + i], start + i, 1
            batch.seq_id[i][0], batch.logits[i] = 0, i == count - 1
        batch.n_tokens = count
        started = time.perf_counter()
        if llama_cpp.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        return time.perf_counter() - started

    deep_from = int(args.prompt_tokens * 0.8)
    whole = {}
    print(f"{model.path.name}, {args.threads} threads, a {args.prompt_tokens}-token prompt")
    for chunk in CHUNKS:
        llama_cpp.llama_memory_clear(memory, True)
        total, deep, deep_tokens, position = 0.0, 0.0, 0, 0
        while position < args.prompt_tokens:
            count = min(chunk, args.prompt_tokens - position)
            seconds = decode(position, count)
            total += seconds
            if position >= deep_from:
                deep, deep_tokens = deep + seconds, deep_tokens + count
            position += count
        whole[chunk] = total
        per_token = deep / deep_tokens
        print(f"chunk {chunk:4d}: whole prompt {total:6.2f} s ({total / whole[CHUNKS[0]]:.2f}x the 512-token chunks), "
              f"past {deep_from} tokens {per_token * 1000:6.2f} ms a token, {per_token * chunk * 1000:6.0f} ms a step")
    llama_cpp.llama_batch_free(batch)
    llama_cpp.llama_free(ctx)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
