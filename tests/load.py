"""Mixed load with clients that leave: the harness of tests/test_reliability.py and
tests/bench/bench_reliability.py.

Each request is one of `SCENARIOS` (every front door; streams and whole answers, n > 1, a JSON
schema, logprobs, embeddings) and leaves in one of `LEAVES`: it reads to the end, reads slowly,
or its client goes away while the request is queued, while its prompt prefills, or in the middle
of its answer. Choices come from a seeded generator, so a run is repeatable; a covering run (the
tests') takes every scenario and every way of leaving in turn, so a short run misses none.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

LONG_PROMPT = " ".join(f"Item {i}: a lantern, a notebook and a flask of tea." for i in range(50))  # ~700 tokens


def scenarios(model: str) -> dict[str, tuple[str, dict, bool]]:
    """name -> (path, body, streamed)."""
    chat = [{"role": "user", "content": "Name three rivers of Europe."}]
    return {
        "chat": ("/v1/chat/completions", {"model": model, "messages": chat, "max_tokens": 24}, False),
        "chat stream": ("/v1/chat/completions", {"model": model, "messages": chat, "max_tokens": 24, "stream": True},
                        True),
        "completion n=2": ("/v1/completions", {"model": model, "prompt": "Once upon a time", "max_tokens": 16, "n": 2,
                                               "temperature": 0.8, "seed": 7}, False),
        "json schema": ("/v1/chat/completions", {
            "model": model, "messages": chat, "max_tokens": 40,
            "response_format": {"type": "json_schema", "json_schema": {"name": "rivers", "schema": {
                "type": "object", "properties": {"rivers": {"type": "array", "items": {"type": "string"}}},
                "required": ["rivers"]}}}}, False),
        "logprobs stream": ("/v1/chat/completions", {"model": model, "messages": chat, "max_tokens": 16,
                                                     "logprobs": True, "top_logprobs": 3, "stream": True}, True),
        "long prompt": ("/v1/completions", {"model": model, "prompt": LONG_PROMPT, "max_tokens": 8, "stream": True},
                        True),
        "anthropic stream": ("/v1/messages", {"model": model, "messages": chat, "max_tokens": 24, "stream": True},
                             True),
        "ollama chat": ("/api/chat", {"model": model, "messages": chat, "options": {"num_predict": 24}}, True),
        "tgi stream": ("/generate_stream", {"inputs": "The river", "parameters": {"max_new_tokens": 16}}, True),
        "responses": ("/v1/responses", {"model": model, "input": "Name a river.", "max_output_tokens": 16,
                                        "store": False}, False),
        "embeddings": ("/v1/embeddings", {"model": model, "input": ["a river", "a lake", "the sea"]}, False),
    }


LEAVES = ("reads all", "reads slowly", "leaves queued", "leaves prefilling", "leaves decoding")
WEIGHTS = (5, 1, 1, 1, 1)  # a third or so of the requests are abandoned at some stage
# a slow reader's pause after each line it reads: several times a decode step, so the answer is
# ready long before it is read (an Anthropic stream of 24 tokens is about 75 lines)
SLOW_READ_PAUSE = 0.05


@dataclass
class LoadReport:
    statuses: Counter = field(default_factory=Counter)
    client_failures: list[str] = field(default_factory=list)  # what a client that stayed did not get
    abandoned: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)  # the bodies of answers other than 200 and 429

    def describe(self) -> str:
        statuses = ", ".join(f"{status}: {count}" for status, count in sorted(self.statuses.items()))
        total = sum(self.statuses.values()) + len(self.client_failures) + self.abandoned
        return (f"{total} requests ({self.abandoned} abandoned) in {self.seconds:.1f} s; statuses {statuses}; "
                f"client failures {len(self.client_failures)} {self.client_failures[:3]}; errors {self.errors[:3]}")


async def _one(client: httpx.AsyncClient, path: str, body: dict, leave: str,
               rng: random.Random, report: LoadReport) -> None:
    if leave in ("leaves queued", "leaves prefilling"):
        # the client goes before any byte of the answer: soon after sending, or a little later
        delay = rng.uniform(0.0, 0.05) if leave == "leaves queued" else rng.uniform(0.2, 1.0)
        task = asyncio.ensure_future(client.post(path, json=body))
        done, _ = await asyncio.wait({task}, timeout=delay)
        if done:
            response = task.result()
            report.statuses[response.status_code] += 1
            return
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        report.abandoned += 1
        return
    async with client.stream("POST", path, json=body) as response:
        if leave == "leaves decoding" and response.status_code == 200:
            lines = 0
            async for _ in response.aiter_lines():
                lines += 1
                if lines >= rng.randint(1, 3):
                    break
            report.abandoned += 1
            return
        lines = []
        async for line in response.aiter_lines():
            lines.append(line)
            if leave == "reads slowly":
                await asyncio.sleep(SLOW_READ_PAUSE)
        report.statuses[response.status_code] += 1
        if response.status_code not in (200, 429):
            report.errors.append(f"{path} {response.status_code}: {' '.join(lines)[:300]}")  # a body cut short raised instead (a client failure)


def _jobs(names: list[str], requests: int, rng: random.Random, cover: bool) -> list[tuple[str, str]]:
    """(scenario, leave) for each request: drawn with the weights, or, covering, every scenario and
    every way of leaving in turn (in a seeded order)."""
    if not cover:
        return [(rng.choice(names), rng.choices(LEAVES, WEIGHTS)[0]) for _ in range(requests)]
    jobs = [(names[k % len(names)], LEAVES[k % len(LEAVES)]) for k in range(requests)]
    rng.shuffle(jobs)
    return jobs


async def run_load(base_url: str, model: str, *, requests: int, clients: int, seed: int = 0,
                   only: tuple[str, ...] | None = None, cover: bool = False) -> LoadReport:
    """`requests` requests from `clients` concurrent clients; statuses, failures and abandons."""
    rng = random.Random(seed)
    table = scenarios(model)
    names = [name for name in table if only is None or name in only]
    jobs = _jobs(names, requests, rng, cover)
    report = LoadReport()
    queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)

    async def worker(index: int) -> None:
        own = random.Random(seed * 1000 + index)
        async with httpx.AsyncClient(base_url=base_url, timeout=httpx.Timeout(300, connect=60)) as client:
            while not queue.empty():
                name, leave = queue.get_nowait()
                path, body, _ = table[name]
                try:
                    await _one(client, path, body, leave, own, report)
                except httpx.HTTPError as error:
                    report.client_failures.append(f"{name} ({leave}): {type(error).__name__}: {error}")

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(clients)))
    report.seconds = time.perf_counter() - started
    return report


# Hostile bodies beside tests/test_hostile_front_doors.HOSTILE, for every front door's POST routes
HOSTILE_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/rerank", "/v1/messages",
                 "/v1/messages/count_tokens", "/v1/responses", "/api/chat", "/api/generate", "/api/embed",
                 "/api/show", "/generate", "/generate_stream")


def extra_hostile(model: str) -> dict[str, bytes]:
    """Bodies that are valid JSON for `model`, each hostile in what it asks for."""
    return {
        "template injection": json.dumps({"model": model, "messages": [
            {"role": "user", "content": "{{ cycler.__init__.__globals__.os.popen('id').read() }}{% for x in range(99999999) %}"}],
            "max_tokens": 1}).encode(),
        "pathological regex": json.dumps({"model": model, "messages": [{"role": "user", "content": "x"}], "max_tokens": 1,
                                          "response_format": {"type": "regex", "regex": "(a*)*" * 200 + "b{99999}"}}).encode(),
        "pathological schema": json.dumps({"model": model, "messages": [{"role": "user", "content": "x"}], "max_tokens": 1,
                                           "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {
                                               "type": "string", "minLength": 10**9, "pattern": "(x+x+)+y"}}}}).encode(),
        "a huge array": json.dumps({"model": model, "input": ["a"] * 400_000}).encode(),
        "an oversized body": json.dumps({"model": model, "prompt": "a" * (20 << 20)}).encode(),
    }


def wait_settled(base_url: str, timeout: float = 120.0) -> dict:
    """/health once no slot is busy and nothing waits (a hang guard, not a timing)."""
    deadline = time.monotonic() + timeout
    while True:
        health = httpx.get(f"{base_url}/health", timeout=30).json()
        busy = sum(m["busy_slots"] + m["queued_choices"] + m["queued_requests"] for m in health["models"])
        if busy == 0 or time.monotonic() > deadline:
            return health
        time.sleep(0.2)


def greedy_answer(base_url: str, model: str) -> str:
    response = httpx.post(f"{base_url}/v1/chat/completions", timeout=300, json={
        "model": model, "messages": [{"role": "user", "content": "Say something about lighthouses."}],
        "max_tokens": 32, "temperature": 0})
    response.raise_for_status()
    return response.json()["choices"][0]["message"]["content"]


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


@contextlib.contextmanager
def cpu_neighbours(count: int) -> Iterator[list[subprocess.Popen]]:
    """`count` processes that each keep a core busy (the desktop's compiler), stopped after."""
    processes = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield processes
    finally:
        for process in processes:
            process.kill()
            process.wait()
