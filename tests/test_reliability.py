"""Mixed load on every front door with clients that leave at every stage, on an idle machine and
beside CPU-hungry neighbours: every client that stays gets its whole answer, nothing is left
running or queued, the greedy answer is the same as before, memory stays bounded, and 429 comes
only when the live requests really exceed `--max-queue`.

Bounded in count for CI; the long runs with their figures: tests/bench/bench_reliability.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json

import httpx
import pytest

from tests.conftest import POOL, TWO_SLOTS, start_server, stop_server
from tests.load import (
    HOSTILE_PATHS,
    cpu_neighbours,
    extra_hostile,
    greedy_answer,
    rss_bytes,
    run_load,
    scenarios,
    wait_settled,
)
from tests.test_hostile_front_doors import HOSTILE

ANSWERED = ("template injection", "pathological schema")  # may be answered where they make sense
MEMORY_BOUND = 200 << 20  # growth over a run; the model and its KV cache are in the baseline


@pytest.fixture(scope="module")
def loaded():
    return POOL.get(*TWO_SLOTS)  # --max-queue 64, the default


def _check_settled(server, before: str) -> None:
    health = wait_settled(server.base_url)
    (model,) = health["models"]
    assert (model["busy_slots"], model["queued_choices"], model["queued_requests"]) == (0, 0, 0), health
    assert greedy_answer(server.base_url, server.model) == before


def test_mixed_load_with_clients_leaving_at_every_stage(loaded):
    before = greedy_answer(loaded.base_url, loaded.model)
    kinds = len(scenarios(loaded.model))
    asyncio.run(run_load(loaded.base_url, loaded.model, requests=kinds, clients=4, seed=1, cover=True))  # warm each path
    _check_settled(loaded, before)
    memory = rss_bytes(loaded.process.pid)
    # every scenario twice, every way of leaving four times or more
    report = asyncio.run(run_load(loaded.base_url, loaded.model, requests=2 * kinds, clients=8, seed=2, cover=True))
    assert report.abandoned >= 6, report.describe()
    assert report.client_failures == [], report.describe()
    assert set(report.statuses) == {200}, report.describe()
    _check_settled(loaded, before)
    assert rss_bytes(loaded.process.pid) - memory < MEMORY_BOUND


def test_beside_cpu_hungry_neighbours_leavers_hold_no_queue_place():
    # 8 clients, one request each at a time: the live requests never exceed --max-queue 8, so a
    # 429 could only come from a request whose client had gone. Its own server: it is starved.
    server = start_server("--parallel", "2", "--ctx-size", "1024", "--max-queue", "8")
    try:
        before = greedy_answer(server.base_url, server.model)
        with cpu_neighbours(1):  # one busy core; tests/bench/bench_reliability.py runs two
            report = asyncio.run(run_load(server.base_url, server.model, requests=15, clients=8, seed=3, cover=True,
                                          only=("chat", "chat stream", "anthropic stream", "completion n=2")))
        assert report.abandoned >= 4, report.describe()
        assert report.client_failures == [], report.describe()
        assert set(report.statuses) == {200}, report.describe()
        _check_settled(server, before)
    finally:
        stop_server(server)


def _message(body: bytes) -> str:
    """The error message in any front door's shape (OpenAI, Anthropic, Ollama, TGI, 422 detail)."""
    data = json.loads(body)
    error = data.get("error")
    if isinstance(error, dict):
        return error.get("message", "")
    if isinstance(error, str):
        return error
    return data["detail"][0]["msg"] if "detail" in data else ""


def test_hostile_bodies_on_every_front_door_beside_a_running_stream(server):
    def greedy() -> str:
        return greedy_answer(server.base_url, server.model)

    alone = greedy()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        beside = pool.submit(greedy)
        with httpx.Client(base_url=server.base_url, timeout=120) as client:
            for kind, body in {**HOSTILE, **extra_hostile(server.model)}.items():
                for path in HOSTILE_PATHS:
                    response = client.post(path, content=body, headers={"content-type": "application/json"})
                    if response.status_code == 200:  # text, not a template; a grammar bounded by max_tokens
                        assert kind in ANSWERED and "uid=" not in response.text, (kind, path, response.text[:300])
                        continue
                    assert 400 <= response.status_code < 500, (kind, path, response.status_code, response.text[:300])
                    assert _message(response.content), (kind, path, response.text[:300])
        assert beside.result() == alone
