"""Vocabulary-size benchmark: what logprobs, sampling masks, a grammar and stop sequences cost per
token on Gemma 3 270M (262,144 tokens) and on SmolLM2-135M (49,152 tokens).

    .venv/bin/python tests/bench/bench_vocab.py [--reps 5] [--tokens 64] [--threads auto]

Both models in one Fireside server (one slot each), one SSE stream at a time. For each model and
each request kind, the decode time per token after the first (first to last token chunk over the
tokens in `usage`), repetition by repetition with the kinds interleaved; medians per kind. Every
figure is a ratio to the same model's plain greedy decoding in the same run:

  - logprobs: greedy with `logprobs: true, top_logprobs: 5` (a log-softmax and a top-5 over the
    vocabulary per token);
  - sampled: temperature 1, top_k 40 (the sampler chain: the reference of the mask rows);
  - mask ids: the same with `sampling_mask: non_zero_list` (the sampling log-probability and the
    ids the sampler could draw);
  - mask all: temperature 1 with no filter and `sampling_mask: count` (the whole vocabulary drawable);
  - json_schema: greedy under a JSON Schema whose answers are long (a list of 40 records or more);
  - stops: greedy with four stop strings that never match.

Then prompt scoring: the extra time per prompt position of `echo` with `logprobs: 1` over the same
prompt's plain prefill (each request in its own cache partition), where every position needs a
logits row over the whole vocabulary. First, without a server, the engine's own work per token
over a logits row of each vocabulary size (medians of 50, synthetic rows): what a step adds on the
host beside llama.cpp's decode, and what the noise of a shared machine hides in the ratios. Never
timed assertions: the ratios are what to compare.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
import timeit
import uuid
from pathlib import Path

import httpx
import llama_cpp
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from backends.logprobs import LogprobComputer
from backends.registry import default_model_path
from backends.sampling import Candidates
from tests.bench.bench_engine import Server, running
from tests.conftest import FIRESIDE, free_port, gemma_model_path

MODELS = {"smollm2": 49_152, "gemma3": 262_144}
PROMPT = "The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a lantern and a notebook."
JSON_PROMPT = "Forty people with their name, age and city, as a JSON list:\n"
PEOPLE = {
    "type": "array", "minItems": 40, "items": {
        "type": "object", "additionalProperties": False, "required": ["name", "age", "city"],
        "properties": {"name": {"type": "string", "maxLength": 40},
                       "age": {"type": "integer", "minimum": 0, "maximum": 120},
                       "city": {"type": "string", "maxLength": 40}}}}
STOPS = ["\x00END", "<<STOP>>", "@@@@", "ZZZZ"]
SAMPLED = {"temperature": 1, "top_k": 40, "seed": 7}

KINDS: dict[str, dict] = {
    "greedy": {"temperature": 0, "ignore_eos": True},
    "logprobs": {"temperature": 0, "ignore_eos": True, "logprobs": True, "top_logprobs": 5},
    "sampled": {**SAMPLED, "ignore_eos": True},
    "mask ids": {**SAMPLED, "ignore_eos": True, "logprobs": True, "sampling_mask": "non_zero_list"},
    "mask all": {"temperature": 1, "seed": 7, "ignore_eos": True, "logprobs": True, "sampling_mask": "count"},
    "json_schema": {"temperature": 0, "prompt": JSON_PROMPT,
                    "response_format": {"type": "json_schema", "json_schema": PEOPLE}},
    "stops": {"temperature": 0, "ignore_eos": True, "stop": STOPS},
}


def seconds_per_token(client: httpx.Client, model: str, tokens: int, body: dict) -> float:
    """Decode seconds per token of one stream after its first token."""
    request = {"model": model, "prompt": PROMPT, "max_tokens": tokens, "stream": True,
               "stream_options": {"include_usage": True}, **body}
    first = last = None
    usage = None
    with client.stream("POST", "/v1/completions", json=request) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            now = time.perf_counter()
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            elif chunk["choices"] and (chunk["choices"][0]["text"] or chunk["choices"][0].get("logprobs")):
                first = first or now
                last = now
    assert usage and first and last and last > first and usage["completion_tokens"] > 1, usage
    return (last - first) / (usage["completion_tokens"] - 1)


def _chain(*samplers: llama_cpp.llama_sampler_p) -> llama_cpp.llama_sampler_p:
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    for sampler in samplers:
        llama_cpp.llama_sampler_chain_add(chain, sampler)
    return chain


def host_costs(n_vocab: int) -> dict[str, float]:
    """Seconds per token of the engine's host-side work over one logits row of `n_vocab` tokens:
    the greedy argmax; logprobs (log-softmax, top 5); an observed draw as sampling masks make it
    (candidates filled, llama.cpp's chain applied, the drawable tokens and their log-sum-exp),
    under top_k 40 and with the whole vocabulary drawable."""
    logits = (np.random.default_rng(0).standard_normal(n_vocab) * 3).astype(np.float32)
    computer, candidates = LogprobComputer(n_vocab), Candidates(n_vocab)
    top_k = _chain(llama_cpp.llama_sampler_init_top_k(40), llama_cpp.llama_sampler_init_temp(1.0),
                   llama_cpp.llama_sampler_init_dist(7))
    everything = _chain(llama_cpp.llama_sampler_init_temp(1.0), llama_cpp.llama_sampler_init_dist(7))

    def logprobs() -> None:
        computer.load(logits)
        computer.record(0, 5)

    def observed(chain: llama_cpp.llama_sampler_p) -> None:
        llama_cpp.llama_sampler_apply(chain, ctypes.byref(candidates.fill(logits)))
        _, kept = candidates.active()
        top = kept.max()
        np.log(np.exp(kept - top).sum(dtype=np.float64))

    work = {"greedy argmax": logits.argmax, "logprobs top 5": logprobs,
            "mask, top_k 40": lambda: observed(top_k), "mask, whole vocabulary": lambda: observed(everything)}
    costs = {name: statistics.median(timeit.repeat(step, number=1, repeat=50)) for name, step in work.items()}
    for chain in (top_k, everything):
        llama_cpp.llama_sampler_free(chain)
    return costs


def scoring_cost(client: httpx.Client, model: str) -> tuple[float, int]:
    """Extra seconds per prompt position of echo with logprobs over a plain prefill of the prompt."""
    prompt = " ".join([PROMPT] * 8)

    def timed(**body) -> tuple[float, int]:
        start = time.perf_counter()
        response = client.post("/v1/completions", json={"model": model, "prompt": prompt, "temperature": 0,
                                                        "prompt_cache_isolation_key": uuid.uuid4().hex, **body})
        response.raise_for_status()
        return time.perf_counter() - start, response.json()["usage"]["prompt_tokens"]

    plain, count = timed(max_tokens=1)
    scored, _ = timed(max_tokens=0, echo=True, logprobs=1)
    return (scored - plain) / count, count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", default="auto")
    args = parser.parse_args()
    host = {model: host_costs(vocab) for model, vocab in MODELS.items()}
    print("engine work per token on the host (no decode): " + "; ".join(
        f"{model}: " + ", ".join(f"{name} {1000 * seconds:.2f} ms" for name, seconds in costs.items())
        for model, costs in host.items()), flush=True)
    port = free_port()
    command = [str(FIRESIDE), "serve", "--port", str(port), "--ctx-size", "2048", "--parallel", "1",
               "--threads", args.threads,
               "--model", str(default_model_path()), "--alias", "smollm2",
               "--model", str(gemma_model_path()), "--alias", "gemma3"]
    times: dict[str, dict[str, list[float]]] = {model: {kind: [] for kind in KINDS} for model in MODELS}
    scoring: dict[str, list[float]] = {model: [] for model in MODELS}
    positions: dict[str, int] = {}
    with running(lambda: Server("fireside", command, port)), \
            httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600, trust_env=False) as client:
        for model in MODELS:  # warm: graphs, token texts, compiled grammars
            for body in KINDS.values():
                seconds_per_token(client, model, 8, body)
            scoring_cost(client, model)
        for rep in range(args.reps):
            for model in MODELS:
                for kind, body in KINDS.items():
                    times[model][kind].append(seconds_per_token(client, model, args.tokens, body))
                cost, positions[model] = scoring_cost(client, model)
                scoring[model].append(cost)
            print(f"  rep {rep + 1}: " + "; ".join(
                f"{model} " + ", ".join(f"{kind} {1000 * values[-1]:.1f}" for kind, values in kinds.items())
                for model, kinds in times.items()) + " (ms/token)", flush=True)
    medians = {model: {kind: statistics.median(values) for kind, values in kinds.items()}
               for model, kinds in times.items()}
    header = "".join(f" | {model} ({vocab // 1000}k) ms/token | x greedy" for model, vocab in MODELS.items())
    print(f"\nmedians of {args.reps} reps, {args.tokens} tokens per stream, threads {args.threads}\n")
    print(f"| kind{header} |")
    print("| --- " + "| ---: | ---: " * len(MODELS) + "|")
    for kind in KINDS:
        cells = "".join(f" | {1000 * medians[model][kind]:.2f} | {medians[model][kind] / medians[model]['greedy']:.2f}"
                        for model in MODELS)
        print(f"| {kind}{cells} |")
    for model in MODELS:
        print(f"prompt scoring ({model}, {positions[model]} positions): echo with logprobs adds "
              f"{1000 * statistics.median(scoring[model]):.2f} ms per position over the plain prefill")
    return 0


if __name__ == "__main__":
    sys.exit(main())
