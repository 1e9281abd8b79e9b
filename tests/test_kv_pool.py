"""One KV pool for the slots: `--parallel 4 --ctx-size 256` serves a request of up to 1,024
tokens (the whole pool) when the other slots make room, with the same greedy output as a server
whose slots are that large, and goes back to four 256-token slots afterwards."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.conftest import POOL

# About 340 tokens: more than a slot (256), less than two slots beside a short answer
LONG = " ".join(f"Line {i}: the keeper wrote the weather, the ships and the lamp's oil." for i in range(20))
SMALL = {"prompt": "The lighthouse stood", "max_tokens": 12, "temperature": 0}


@pytest.fixture(scope="module")
def pooled():
    return POOL.get("--ctx-size", "256", "--parallel", "4")


def _complete(server, body: dict) -> httpx.Response:
    return httpx.post(f"{server.v1}/completions", json={"model": server.model, **body}, timeout=300)


def test_a_request_larger_than_a_slot_gets_the_pool(pooled, server):
    body = {"prompt": LONG, "max_tokens": 40, "temperature": 0, "ignore_eos": True}  # 40 tokens on any machine
    answer = _complete(pooled, body)
    assert answer.status_code == 200, answer.text
    usage = answer.json()["usage"]
    assert 256 < usage["prompt_tokens"] + usage["completion_tokens"] <= 1024
    assert usage["completion_tokens"] == 40
    reference = _complete(server, body)  # the session's server: slots of 1024 tokens, large enough
    assert answer.json()["choices"][0]["text"] == reference.json()["choices"][0]["text"]
    cards = httpx.get(f"{pooled.v1}/models", timeout=30).json()["data"]
    assert [card["context_length"] for card in cards] == [1024]


def test_more_than_the_pool_is_refused_with_the_numbers(pooled):
    answer = _complete(pooled, {"prompt": LONG * 4, "max_tokens": 4})
    assert answer.status_code == 400
    assert "maximum context length is 1024 tokens" in answer.json()["error"]["message"]


def test_small_requests_run_beside_a_long_one_and_alone_afterwards(pooled, server):
    small_alone = _complete(server, SMALL).json()["choices"][0]["text"]
    results: list[str] = []

    def small() -> None:
        results.append(_complete(pooled, SMALL).json()["choices"][0]["text"])

    with httpx.stream("POST", f"{pooled.v1}/completions", timeout=300, json={
            "model": pooled.model, "prompt": LONG, "max_tokens": 80, "temperature": 0, "ignore_eos": True,
            "stream": True}) as long:
        lines = long.iter_lines()
        next(line for line in lines if line.startswith("data: {"))  # the long one decodes
        beside = [threading.Thread(target=small) for _ in range(2)]
        for thread in beside:
            thread.start()
        for thread in beside:
            thread.join(300)
        finished_beside = len(results)
        tail = [line for line in lines if line.startswith("data: ")]
    assert tail[-1] == "data: [DONE]"
    assert finished_beside == 2 and results == [small_alone] * 2
    # every slot idle again: four small streams at once, each as alone
    results.clear()
    group = [threading.Thread(target=small) for _ in range(4)]
    for thread in group:
        thread.start()
    for thread in group:
        thread.join(300)
    assert results == [small_alone] * 4


def test_a_long_request_waits_for_the_slots_it_needs(pooled):
    _complete(pooled, SMALL)  # a small request on an idle engine: slots of 256 tokens each again
    ended: dict[str, float] = {}

    def small(i: int) -> None:
        _complete(pooled, {"prompt": f"Story {i}:", "max_tokens": 60, "ignore_eos": True})
        ended[f"small {i}"] = time.monotonic()

    group = [threading.Thread(target=small, args=(i,)) for i in range(3)]
    for thread in group:
        thread.start()
    deadline = time.monotonic() + 120  # a hang guard, not a timing
    while httpx.get(f"{pooled.base_url}/health", timeout=30).json()["models"][0]["busy_slots"] < 3:
        assert time.monotonic() < deadline, "the three small requests never all started"
        time.sleep(0.05)
    with httpx.stream("POST", f"{pooled.v1}/completions", timeout=300, json={
            "model": pooled.model, "prompt": LONG, "max_tokens": 8, "stream": True}) as long:
        first = next(line for line in long.iter_lines() if line.startswith("data: {"))
        first_at = time.monotonic()
    for thread in group:
        thread.join(300)
    assert first and all(at <= first_at for at in ended.values()) and len(ended) == 3


# The advertised context (/v1/models' context_length, the pool here) is what a request gets.

def _context(server) -> int:
    return httpx.get(f"{server.v1}/models", timeout=30).json()["data"][0]["context_length"]


def test_context_truncate_lowers_max_tokens(pooled):
    ctx = _context(pooled)
    body = _complete(pooled, {"prompt": [504] * (ctx - 5), "max_tokens": 100, "ignore_eos": True}).json()
    assert body["usage"]["completion_tokens"] == 5
    assert body["choices"][0]["finish_reason"] == "length"


def test_context_error_gives_400_with_both_numbers(pooled):
    ctx = _context(pooled)
    response = _complete(pooled, {"prompt": [504] * (ctx - 5), "max_tokens": 100,
                                  "context_length_exceeded_behavior": "error"})
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert str(ctx) in message and str(ctx - 5 + 100) in message


def test_prompt_longer_than_the_context_is_400(pooled):
    ctx = _context(pooled)
    response = _complete(pooled, {"prompt": [504] * (ctx + 1)})
    assert response.status_code == 400
    assert str(ctx + 1) in response.json()["error"]["message"]
