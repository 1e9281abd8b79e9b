"""`--cache-type`: the memory a quantized KV cache saves and what it costs in quality, in one run.

    .venv/bin/python tests/bench/bench_kv_cache.py [--model PATH.gguf] [--tokens 900]

For each cache type the server scores the same fixed text (the opening of this project's README,
cut to `--tokens` tokens) in one prompt (`echo`, `max_tokens: 0`, `logprobs: 1`): the report gives
the cache's size from `/metrics`, the text's perplexity, and how often the most likely next token
agrees with the f16 cache's (top-1 agreement).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from backends.registry import default_model_path
from tests.bench.bench_engine import Server, running
from tests.conftest import FIRESIDE, free_port

TYPES = ("f16", "q8_0", "q4_0")


def score(server: Server, text: str) -> tuple[list[float], list[str]]:
    body = {"model": server.model, "prompt": text, "max_tokens": 0, "echo": True, "logprobs": 1}
    response = httpx.post(f"{server.base_url}/v1/completions", json=body, timeout=600)
    response.raise_for_status()
    logprobs = response.json()["choices"][0]["logprobs"]
    tops = [max(top, key=top.get) if top else "" for top in logprobs["top_logprobs"][1:]]
    return [value for value in logprobs["token_logprobs"][1:] if value is not None], tops


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--tokens", type=int, default=900)
    args = parser.parse_args(argv)
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    model = args.model or default_model_path()
    text = (ROOT / "README.md").read_text()[: args.tokens * 4]
    results = {}
    for kind in TYPES:
        port = free_port()
        command = [str(FIRESIDE), "serve", "--model", str(model), "--port", str(port), "--cache-type", kind,
                   "--ctx-size", "2048", "--parallel", "1", "--prompt-cache-disk", "0"]
        with running(lambda command=command, port=port: Server(f"fireside {kind}", command, port)) as server:
            metrics = httpx.get(f"{server.base_url}/metrics", timeout=10).text
            size = next(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                        if line.startswith("fireside_kv_cache_bytes{"))
            results[kind] = (size, *score(server, text))
    base_size, base_logprobs, base_tops = results["f16"]
    print(f"\n{model.name}, {len(base_logprobs)} scored tokens, 2048-token cache")
    print(f"{'cache':>6} {'MiB':>8} {'of f16':>7} {'perplexity':>11} {'top-1 agreement':>16}")
    for kind, (size, logprobs, tops) in results.items():
        perplexity = math.exp(-sum(logprobs) / len(logprobs))
        agreement = sum(a == b for a, b in zip(tops, base_tops)) / len(base_tops)
        print(f"{kind:>6} {size / (1 << 20):8.1f} {size / base_size:7.2f} {perplexity:11.3f} {agreement:16.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
