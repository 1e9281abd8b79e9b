"""Several clients at once, and clients that leave: over real HTTP on the real model."""

from __future__ import annotations

import asyncio
import json
import time

import httpx

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


def _wait_idle(server, seconds: float = 10.0) -> float:
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        model = server.health()["models"][0]
        if model["busy_slots"] == 0 and model["queued_choices"] == 0:
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"slots still busy after {seconds}s: {server.health()}")


def test_client_that_disconnects_mid_stream_stops_its_generation(server):
    body = {"model": server.model, "prompt": "Tell me a long story.", "max_tokens": 1000,
            "ignore_eos": True, "stream": True}
    with httpx.Client(base_url=server.base_url, timeout=60) as client:
        with client.stream("POST", "/v1/completions", json=body) as response:
            lines = response.iter_lines()
            received = 0
            for line in lines:
                if line.startswith("data: {"):
                    received += 1
                if received >= 3:
                    break
            assert server.health()["models"][0]["busy_slots"] == 1
    # 1000 tokens would take many seconds; the slot frees as soon as the server sees the close
    assert _wait_idle(server) < 5


def test_client_that_gives_up_on_a_whole_answer_stops_its_generation(server):
    body = {"model": server.model, "prompt": "Tell me a long story.", "max_tokens": 1000, "ignore_eos": True}
    with httpx.Client(base_url=server.base_url, timeout=0.5) as client:
        try:
            client.post("/v1/completions", json=body)
            raise AssertionError("1000 tokens came back within half a second")
        except httpx.ReadTimeout:
            pass  # the client closes its connection
    assert _wait_idle(server) < 5


def test_disconnect_while_queued_drops_the_waiting_choices(server):
    """A client that leaves while its choices wait for slots never gets them prefilled."""
    busy = {"model": server.model, "prompt": "Count to a thousand:", "max_tokens": 1000, "ignore_eos": True,
            "n": 4, "stream": True}

    async def read_stream(client: httpx.AsyncClient, body: dict) -> None:
        async with client.stream("POST", "/v1/completions", json=body) as response:
            async for _ in response.aiter_lines():
                pass

    async def wait_for(predicate, seconds: float = 10.0) -> dict:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            model = (await client.get("/health")).json()["models"][0]
            if predicate(model):
                return model
            await asyncio.sleep(0.05)
        raise AssertionError(f"not reached in {seconds}s: {model}")

    async def run() -> None:
        holder = asyncio.create_task(read_stream(client, busy))  # takes all 4 slots
        await wait_for(lambda m: m["busy_slots"] == 4)
        queued = asyncio.create_task(read_stream(client, {**busy, "n": 3}))
        await wait_for(lambda m: m["queued_choices"] == 3)
        queued.cancel()  # the client goes away while its choices wait
        model = await wait_for(lambda m: m["queued_choices"] == 0, 5)
        assert model["busy_slots"] == 4  # the other client's stream goes on
        holder.cancel()
        await wait_for(lambda m: m["busy_slots"] == 0, 5)
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
