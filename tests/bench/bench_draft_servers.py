"""Draft models through HTTP: Fireside and llama-server on the same model with the same drafts, in one run.

    .venv/bin/python tests/bench/bench_draft_servers.py --model T.gguf --draft NAME=D.gguf [--draft ...]
        [--gpu-layers 999] [--streams 1 4] [--tokens 256] [--reps 3] [--llama-server PATH]

Each server is started once per draft (and once without one), warmed up, then measured: for each
stream count, that many greedy `/v1/completions` at once (`ignore_eos`, different prompts), tokens
per second over all of them, the median of `--reps`. Reported: each configuration's tokens/s, its
ratio to the same server without a draft, Fireside / llama-server, and the share of drafted tokens
kept where the server says (Fireside's `perf_metrics`, llama-server's `timings`). Fireside runs with
`--draft off` (no prompt-lookup drafts: llama-server drafts with the model alone), each server with
its own default draft lengths. `--ctx-size` is per stream (llama-server gets it times the streams).

On a GPU, tests/fixtures/make_synthetic_pair.py makes a model of any size with an exact draft
(every drafted token kept: the best case) and a useless one (the worst case). Without a GPU, the
default model and its 2-block cut (tests/fixtures/make_cut_draft.py) show the logic, not the speed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.bench.bench_engine import Server, llama_server_binary
from tests.servers import free_port

PROMPTS = ["The history of the lighthouse begins", "In the kitchen of the old house",
           "A guide to repairing a bicycle:", "The committee met on a Tuesday to discuss",
           "Chapter one. The train left the station", "Notes on the migration of birds:",
           "The recipe calls for flour, water and", "Once upon a time in a city by the sea"]


async def _one(client: httpx.AsyncClient, server: Server, prompt: str, tokens: int, fireside: bool) -> tuple[int, int, int]:
    body: dict[str, object] = {"model": server.model, "prompt": prompt, "max_tokens": tokens, "temperature": 0,
                               "ignore_eos": True}
    if fireside:
        body["perf_metrics_in_response"] = True
    response = await client.post(f"{server.base_url}/v1/completions", json=body, timeout=600)
    response.raise_for_status()
    answer = response.json()
    drafted = kept = 0
    if timings := answer.get("timings"):  # llama-server
        drafted, kept = timings.get("draft_n", 0), timings.get("draft_n_accepted", 0)
    if metrics := answer.get("perf_metrics"):  # Fireside
        drafted = int(metrics.get("speculation-generated-tokens", 0))
        kept = round(drafted * float(metrics.get("speculation-acceptance", 0.0) or 0.0))
    return answer["usage"]["completion_tokens"], drafted, kept


async def measure(server: Server, streams: int, tokens: int, fireside: bool) -> tuple[float, int, int]:
    async with httpx.AsyncClient() as client:
        start = time.perf_counter()
        results = await asyncio.gather(*(_one(client, server, PROMPTS[i % len(PROMPTS)], tokens, fireside)
                                         for i in range(streams)))
        elapsed = time.perf_counter() - start
    return sum(r[0] for r in results) / elapsed, sum(r[1] for r in results), sum(r[2] for r in results)


def fireside_server(args: argparse.Namespace, draft: Path | None, port: int) -> Server:
    command = [sys.executable, "-m", "app.cli", "serve", "--model", str(args.model), "--port", str(port),
               "--ctx-size", str(args.ctx_size), "--parallel", str(max(args.streams)), "--draft", "off",
               "--gpu-layers", str(args.gpu_layers), "--prompt-cache-disk", "0"]
    if args.threads:
        command += ["--threads", str(args.threads)]
    if draft is not None:
        command += ["--draft-model", str(draft)]
    return Server("fireside", command, port, env={"PYTHONPATH": os.pathsep.join(filter(None, (
        str(ROOT), os.environ.get("PYTHONPATH"))))})


def llama_server(args: argparse.Namespace, draft: Path | None, port: int) -> Server:
    parallel = max(args.streams)
    command = [args.llama_server, "-m", str(args.model), "--port", str(port), "-c", str(args.ctx_size * parallel),
               "-np", str(parallel), "-ngl", str(args.gpu_layers), "--no-webui"]
    if args.threads:
        command += ["-t", str(args.threads), "-tb", str(args.threads)]
    if draft is not None:
        # this llama-server loads a -md draft but drafts with it only when asked by --spec-type
        command += ["-md", str(draft), "-ngld", str(args.gpu_layers), "--spec-type", "draft-simple"]
    return Server("llama-server", command, port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--draft", action="append", default=[], metavar="NAME=FILE")
    parser.add_argument("--gpu-layers", type=int, default=0)
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--ctx-size", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=0, help="default: each server's own")
    parser.add_argument("--llama-server", default=llama_server_binary())
    parser.add_argument("--only", choices=("fireside", "llama-server"), default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    drafts: dict[str, Path | None] = {"no draft": None}
    for entry in args.draft:
        name, _, path = entry.partition("=")
        drafts[name] = Path(path)
    kinds = {"fireside": fireside_server}
    if args.llama_server and args.only != "fireside":
        kinds["llama-server"] = llama_server
    if args.only == "llama-server":
        del kinds["fireside"]
    results: dict[tuple[str, str, int], tuple[float, int, int]] = {}
    for kind, start in kinds.items():
        for name, draft in drafts.items():
            server = start(args, draft, free_port())
            try:
                for streams in args.streams:
                    asyncio.run(measure(server, streams, 16, kind == "fireside"))  # warm: graphs, caches
                for streams in args.streams:
                    runs = [asyncio.run(measure(server, streams, args.tokens, kind == "fireside"))
                            for _ in range(args.reps)]
                    results[kind, name, streams] = (statistics.median(r[0] for r in runs),
                                                    sum(r[1] for r in runs), sum(r[2] for r in runs))
                    speed, drafted, kept = results[kind, name, streams]
                    base = results.get((kind, "no draft", streams), (speed,))[0]
                    share = f", drafted {drafted}, kept {kept / drafted:.0%}" if drafted else ""
                    print(f"{kind:12} {name:10} {streams} stream(s): {speed:7.1f} tokens/s, "
                          f"{speed / base:.2f}x of no draft{share}", flush=True)
            finally:
                server.stop()
    if len(kinds) == 2:
        print(f"\n{args.model.name}, {args.tokens} tokens, greedy, median of {args.reps}: Fireside / llama-server")
        for name in drafts:
            print(f"{name:10}" + "".join(
                f"  {streams} stream(s) {results['fireside', name, streams][0] / results['llama-server', name, streams][0]:.2f}x"
                for streams in args.streams))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
