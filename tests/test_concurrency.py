"""Several clients at once, and clients that leave: over real HTTP on the real model."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from tests.conftest import POOL, RunningServer

PROMPTS = ["The capital of France is", "Two plus two is", "My favourite animal is", "The sky is",
           "Water boils at", "The first president was", "Python is a", "Once upon a time"]


async def _greedy(client: httpx.AsyncClient, model: str, prompt: str, stream: bool) -> tuple[str, int]:
    body = {"model": model, "prompt": prompt, "max_tokens": 24, "temperature": 0, "ignore_eos": True}
    if not stream:
        answer = (await client.post("/v1/completions", json=body)).json()
        return answer["choices"][0]["text"], answer["usage"]["completion_tokens"]
    text, tokens = "", 0
    async with client.stream("POST", "/v1/completions", json={**body, "stream": True}) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                if chunk["choices"]:
                    text += chunk["choices"][0]["text"]
                else:
                    tokens = chunk["usage"]["completion_tokens"]
    return text, tokens


def test_concurrent_requests_all_complete_correctly(server, http):
    """More requests than slots, streamed and not: each gets its own prompt's full answer."""
    alone = [http.post("/v1/completions", json={"model": server.model, "prompt": p, "max_tokens": 24,
                                                 "temperature": 0, "ignore_eos": True}).json()
             for p in PROMPTS]

    async def run_all():
        async with httpx.AsyncClient(base_url=server.base_url, timeout=120) as client:
            return await asyncio.gather(*(
                _greedy(client, server.model, prompt, stream=i % 2 == 0) for i, prompt in enumerate(PROMPTS)
            ))

    together = asyncio.run(run_all())
    for (text, tokens), single in zip(together, alone, strict=True):
        assert tokens == 24
        assert text == single["choices"][0]["text"]  # at temperature 0: the same text alone and under load
    assert server.health()["models"][0]["busy_slots"] == 0


LONG = 2000  # tokens asked of a generation that the client leaves: far more than it gets to
HANG_GUARD = 60.0  # seconds: only ever reached by a server that hangs


@pytest.fixture(scope="module")
def lone_server() -> RunningServer:
    """One slot, so that /health's `kv_used` is the cache of the one request that used it."""
    return POOL.get("--ctx-size", "2048", "--parallel", "1")


def _wait_idle(server: RunningServer) -> dict:
    deadline = time.monotonic() + HANG_GUARD
    while time.monotonic() < deadline:
        model = server.health()["models"][0]
        if model["busy_slots"] == 0 and model["queued_choices"] == 0:
            return model
        time.sleep(0.05)
    raise AssertionError(f"slots still busy after {HANG_GUARD}s: {server.health()}")


def _prompt_tokens(server: RunningServer, prompt: str) -> int:
    body = {"model": server.model, "prompt": prompt, "max_tokens": 1}
    return httpx.post(f"{server.v1}/completions", json=body, timeout=HANG_GUARD).json()["usage"]["prompt_tokens"]


def _assert_stopped_early(model: dict, prompt_tokens: int) -> None:
    """The one slot keeps the tokens it decoded: at most the prompt and what was generated before
    the server saw the client leave (a handful), not the LONG tokens that were asked for (a
    generation that ran on would hold all but the last of them, as a finished one does)."""
    assert model["kv_used"] < prompt_tokens + LONG // 2, model


def test_a_finished_generation_keeps_its_tokens_in_its_slot(lone_server):
    """What the two tests below rely on: a generation that runs to its end leaves its prompt and its
    tokens in the slot's cache (all but the last, which need not be decoded)."""
    body = {"model": lone_server.model, "prompt": "Count with me:", "max_tokens": 40, "ignore_eos": True}
    answer = httpx.post(f"{lone_server.v1}/completions", json=body, timeout=HANG_GUARD).json()
    assert answer["usage"]["completion_tokens"] == 40
    prompt_tokens = answer["usage"]["prompt_tokens"]
    assert prompt_tokens + 39 <= _wait_idle(lone_server)["kv_used"] <= prompt_tokens + 40


def test_client_that_disconnects_mid_stream_stops_its_generation(lone_server):
    server = lone_server
    prompt = "Tell me a long story."
    prompt_tokens = _prompt_tokens(server, prompt)
    body = {"model": server.model, "prompt": prompt, "max_tokens": LONG, "ignore_eos": True, "stream": True}
    with (httpx.Client(base_url=server.base_url, timeout=HANG_GUARD) as client,
          client.stream("POST", "/v1/completions", json=body) as response):
        lines = response.iter_lines()
        received = 0
        for line in lines:
            if line.startswith("data: {"):
                received += 1
            if received >= 3:
                break
        assert server.health()["models"][0]["busy_slots"] == 1
    _assert_stopped_early(_wait_idle(server), prompt_tokens)


def test_client_that_gives_up_on_a_whole_answer_stops_its_generation(lone_server):
    server = lone_server
    prompt = "Once upon a time, in a land far away,"
    prompt_tokens = _prompt_tokens(server, prompt)
    body = {"model": server.model, "prompt": prompt, "max_tokens": LONG, "ignore_eos": True}

    async def give_up() -> None:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=HANG_GUARD) as client:
            answer = asyncio.create_task(client.post("/v1/completions", json=body))
            deadline = time.monotonic() + HANG_GUARD
            while (await client.get("/health")).json()["models"][0]["busy_slots"] == 0:
                assert not answer.done(), answer.result().text
                assert time.monotonic() < deadline, "the generation never started"
                await asyncio.sleep(0.05)
            answer.cancel()  # the client closes its connection while the answer is being generated
            with pytest.raises(asyncio.CancelledError):
                await answer

    asyncio.run(give_up())
    _assert_stopped_early(_wait_idle(server), prompt_tokens)


def test_disconnect_while_queued_drops_the_waiting_choices(server):
    """A client that leaves while its choices wait for slots never gets them prefilled."""
    busy = {"model": server.model, "prompt": "Count to a thousand:", "max_tokens": 1000, "ignore_eos": True,
            "n": 4, "stream": True}

    async def read_stream(client: httpx.AsyncClient, body: dict) -> None:
        async with client.stream("POST", "/v1/completions", json=body) as response:
            async for _ in response.aiter_lines():
                pass

    async def wait_for(predicate) -> dict:
        deadline = time.monotonic() + HANG_GUARD
        while time.monotonic() < deadline:
            model = (await client.get("/health")).json()["models"][0]
            if predicate(model):
                return model
            await asyncio.sleep(0.05)
        raise AssertionError(f"not reached in {HANG_GUARD}s: {model}")

    async def run() -> None:
        holder = asyncio.create_task(read_stream(client, busy))  # takes all 4 slots
        await wait_for(lambda m: m["busy_slots"] == 4)
        queued = asyncio.create_task(read_stream(client, {**busy, "n": 3}))
        await wait_for(lambda m: m["queued_choices"] == 3)
        queued.cancel()  # the client goes away while its choices wait
        model = await wait_for(lambda m: m["queued_choices"] == 0)
        assert model["busy_slots"] == 4  # the other client's stream goes on
        holder.cancel()
        await wait_for(lambda m: m["busy_slots"] == 0)
        await asyncio.gather(holder, queued, return_exceptions=True)

    async def main() -> None:
        nonlocal client
        async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as opened:
            client = opened
            await run()

    client: httpx.AsyncClient
    asyncio.run(main())


def test_a_failing_request_does_not_disturb_others(server, http):
    async def run():
        async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as client:
            good = client.post("/v1/completions", json={"model": server.model, "prompt": "Hi", "max_tokens": 8})
            bad = client.post("/v1/completions", json={"model": server.model, "prompt": [1, 10**9]})
            return await asyncio.gather(good, bad)

    good, bad = asyncio.run(run())
    assert good.status_code == 200 and good.json()["usage"]["completion_tokens"] >= 1
    assert bad.status_code == 400
