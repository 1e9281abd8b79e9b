"""Reliability under load, abuse and a busy desktop: the long runs of tests/test_reliability.py,
with their figures.

    .venv/bin/python tests/bench/bench_reliability.py [--fireside PATH] [--requests 300] [--clients 48]

Against one `fireside serve --parallel 4 --max-queue CLIENTS` on the default model (`--fireside` points at another
install's command, to measure a baseline the same way), in turn:

  idle        mixed requests on every front door (tests/load.py): streams and whole answers, n > 1,
              a JSON schema, logprobs, embeddings; about a third of the clients leave, queued,
              prefilling or decoding, some read slowly;
  neighbours  the same beside two CPU-hungry processes (a compiler on the desktop);
  stalled     six streams whose clients stop reading, beside a smaller mixed load;
  hostile     every hostile body on every front door, beside a greedy stream that must not change.

For each: the statuses, the failures the clients that stayed saw, the time, whether the server
settled afterwards (no busy slot, nothing queued) with the same greedy answer, and its memory
growth (RSS). The hostile run gives each body's slowest answer.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.bench.bench_engine import Server
from tests.conftest import FIRESIDE, free_port
from tests.load import (
    HOSTILE_PATHS,
    cpu_neighbours,
    extra_hostile,
    greedy_answer,
    rss_bytes,
    run_load,
    wait_settled,
)
from tests.test_hostile_front_doors import HOSTILE
from tests.test_reliability import ANSWERED


def fireside(command: Path, *args: str) -> Server:
    port = free_port()
    return Server(str(command), [str(command), "serve", "--port", str(port), "--prompt-cache-disk", "0", *args], port)


def settled(server: Server, before: str, memory: int) -> str:
    health = wait_settled(server.base_url)
    left = sum(m["busy_slots"] + m["queued_choices"] + m["queued_requests"] for m in health["models"])
    same = greedy_answer(server.base_url, server.model) == before
    growth = (rss_bytes(server.process.pid) - memory) / (1 << 20)
    return f"left busy/queued: {left}; same greedy answer: {same}; memory growth {growth:+.0f} MiB"


async def stalled_streams(server: Server, count: int) -> list[httpx.Response]:
    """Streams whose clients read their first bytes, then stop reading (the sockets stay open)."""
    clients, responses = [], []
    for _ in range(count):
        client = httpx.AsyncClient(base_url=server.base_url, timeout=300)
        request = client.build_request("POST", "/v1/chat/completions", json={
            "model": server.model, "messages": [{"role": "user", "content": "Tell a long story."}],
            "max_tokens": 1500, "ignore_eos": True, "stream": True})
        response = await client.send(request, stream=True)
        clients.append(client)
        responses.append(response)
    return [*responses, *clients]


async def stalled_run(server: Server, args: argparse.Namespace) -> str:
    held = await stalled_streams(server, 6)
    report = await run_load(server.base_url, server.model, requests=args.requests // 3, clients=8, seed=5)
    for item in held:
        await item.aclose()
    return report.describe()


def hostile_run(server: Server) -> str:
    before = greedy_answer(server.base_url, server.model)
    statuses: dict[int, int] = {}
    slowest: dict[str, float] = {}
    bad: list[str] = []
    with httpx.Client(base_url=server.base_url, timeout=120) as client:
        for kind, body in {**HOSTILE, **extra_hostile(server.model)}.items():
            for path in HOSTILE_PATHS:
                started = time.perf_counter()
                try:
                    response = client.post(path, content=body, headers={"content-type": "application/json"})
                    status = response.status_code
                except httpx.HTTPError as error:
                    status = 0
                    bad.append(f"{kind} {path}: {type(error).__name__}")
                slowest[kind] = max(slowest.get(kind, 0.0), time.perf_counter() - started)
                statuses[status] = statuses.get(status, 0) + 1
                if not 400 <= status < 500 and not (status == 200 and kind in ANSWERED and "uid=" not in response.text):
                    bad.append(f"{kind} {path}: {status}")
    same = greedy_answer(server.base_url, server.model) == before
    times = ", ".join(f"{kind} {seconds * 1000:.0f} ms" for kind, seconds in slowest.items())
    return f"statuses {dict(sorted(statuses.items()))}; neither 4xx nor a fair answer: {bad[:5]}; same greedy answer: {same}; slowest: {times}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fireside", type=Path, default=FIRESIDE, help="the `fireside` command to measure")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--clients", type=int, default=48)
    args = parser.parse_args(argv)
    # --max-queue as many as the clients: no live request can find the queue full, so every 429
    # counts a place still held by a request whose client had gone
    server = fireside(args.fireside, "--parallel", "4", "--ctx-size", "2048", "--max-queue", str(args.clients))
    try:
        before = greedy_answer(server.base_url, server.model)
        asyncio.run(run_load(server.base_url, server.model, requests=16, clients=4, seed=1))  # warm every path
        wait_settled(server.base_url)
        memory = rss_bytes(server.process.pid)
        print(f"{args.fireside}: {args.requests} requests from {args.clients} clients per load run\n")
        report = asyncio.run(run_load(server.base_url, server.model, requests=args.requests, clients=args.clients,
                                      seed=2))
        print(f"idle: {report.describe()}\n  {settled(server, before, memory)}")
        with cpu_neighbours(2):
            report = asyncio.run(run_load(server.base_url, server.model, requests=args.requests,
                                          clients=args.clients, seed=3))
        print(f"neighbours: {report.describe()}\n  {settled(server, before, memory)}")
        print(f"stalled: {asyncio.run(stalled_run(server, args))}\n  {settled(server, before, memory)}")
        print(f"hostile: {hostile_run(server)}\n  {settled(server, before, memory)}")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
