"""The engine's scheduling over real HTTP: prefix reuse, cache keys, n > parallel, backpressure."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace

import httpx
import pytest

from tests.conftest import start_server, stop_server
from tests.servers import engine_threads
from tests.test_completions import sse_events

LONG_PROMPT = ("The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a lantern, "
               "a notebook and a flask of tea. From the gallery he could see the whole bay. ")


def complete(client: httpx.Client, model: str, **fields) -> dict:
    response = client.post("/v1/completions", json={"model": model, "max_tokens": 4, "temperature": 0, **fields})
    assert response.status_code == 200, response.text
    return response.json()


def cached(body: dict) -> int:
    return body["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_a_repeated_prefix_is_reused(http, server):
    key = uuid.uuid4().hex  # a fresh partition: nothing cached from other tests
    first = complete(http, server.model, prompt=LONG_PROMPT + "He", prompt_cache_isolation_key=key)
    assert cached(first) == 0
    again = complete(http, server.model, prompt=LONG_PROMPT + "She", prompt_cache_isolation_key=key)
    prompt_tokens = again["usage"]["prompt_tokens"]
    assert prompt_tokens - 3 <= cached(again) < prompt_tokens
    # a reused prefix gives the same text as a cold prefill
    cold = complete(http, server.model, prompt=LONG_PROMPT + "She", prompt_cache_isolation_key=uuid.uuid4().hex)
    assert cached(cold) == 0
    assert cold["choices"][0]["text"] == again["choices"][0]["text"]


def test_cached_tokens_in_the_stream_usage_chunk(http, server):
    key = uuid.uuid4().hex
    complete(http, server.model, prompt=LONG_PROMPT, prompt_cache_isolation_key=key)
    with http.stream("POST", "/v1/completions", json={
        "model": server.model, "prompt": LONG_PROMPT, "max_tokens": 3, "stream": True,
        "prompt_cache_isolation_key": key,
    }) as response:
        events = sse_events(response)
    usage = events[-2]["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == usage["prompt_tokens"] - 1


def test_isolation_keys_never_share_cached_tokens(http, server):
    a, b = uuid.uuid4().hex, uuid.uuid4().hex
    complete(http, server.model, prompt=LONG_PROMPT, prompt_cache_isolation_key=a)
    assert cached(complete(http, server.model, prompt=LONG_PROMPT, prompt_cache_isolation_key=b)) == 0
    assert cached(complete(http, server.model, prompt=LONG_PROMPT, prompt_cache_isolation_key=a)) > 0


def test_second_chat_turn_prefills_only_what_is_new(http, server):
    key = uuid.uuid4().hex
    turn1 = [{"role": "system", "content": "You answer in one short sentence."},
             {"role": "user", "content": "What colour is the sky on a clear day?"}]
    first = http.post("/v1/chat/completions", json={
        "model": server.model, "messages": turn1, "max_tokens": 20, "temperature": 0,
        "prompt_cache_isolation_key": key}).json()
    answer = first["choices"][0]["message"]["content"]
    turn2 = [*turn1, {"role": "assistant", "content": answer}, {"role": "user", "content": "And at night?"}]
    second = http.post("/v1/chat/completions", json={
        "model": server.model, "messages": turn2, "max_tokens": 5, "prompt_cache_isolation_key": key}).json()
    # Everything the first turn decoded is reused: its prompt and its answer (all but the answer's
    # last token, which was sampled but never decoded); only the new turn's markup and text are new.
    assert cached(second) == first["usage"]["prompt_tokens"] + first["usage"]["completion_tokens"] - 1


def test_n_larger_than_parallel_completes(http, server):
    parallel = server.health()["models"][0]["slots"]
    n = parallel + 3
    body = complete(http, server.model, prompt=LONG_PROMPT, n=n, max_tokens=6, ignore_eos=True,
                    prompt_cache_isolation_key=uuid.uuid4().hex)
    assert [c["index"] for c in body["choices"]] == list(range(n))
    single = complete(http, server.model, prompt=LONG_PROMPT, max_tokens=6, ignore_eos=True)["choices"][0]["text"]
    assert {c["text"] for c in body["choices"]} == {single}  # greedy: every choice is the same text
    assert body["usage"]["completion_tokens"] == 6 * n
    # the prompt was prefilled once; the other choices copied it (prompt counted once)
    assert body["usage"]["prompt_tokens"] == complete(http, server.model, prompt=LONG_PROMPT)["usage"]["prompt_tokens"]


def test_n_choices_with_a_seed_are_reproducible_and_differ(http, server):
    fields = dict(prompt=LONG_PROMPT, n=6, max_tokens=8, temperature=1.0, seed=11)
    first = [c["text"] for c in complete(http, server.model, **fields)["choices"]]
    second = [c["text"] for c in complete(http, server.model, **fields)["choices"]]
    assert first == second
    assert len(set(first)) > 1


@pytest.fixture
def small_server():
    """Two slots and a queue of one request: scheduling decisions become observable. Its own, for
    each test: slot steering needs slots no other request has filled, and the queue test fills it."""
    running = start_server("--ctx-size", "512", "--parallel", "2", "--max-queue", "1")
    yield running
    stop_server(running)


def test_prompt_cache_key_steers_to_the_slot_it_used(small_server):
    other = "Recipe: two eggs, flour, milk and a pinch of salt. Whisk everything together and " * 2
    with httpx.Client(base_url=small_server.base_url, timeout=60) as client:
        model = small_server.model
        complete(client, model, prompt=LONG_PROMPT, prompt_cache_key="k")
        # Same key, unrelated prompt: steered to the slot that holds LONG_PROMPT (overwriting it)
        complete(client, model, prompt=other, prompt_cache_key="k")
        assert cached(complete(client, model, prompt=LONG_PROMPT, prompt_cache_key="z")) == 0
        # Without the shared key the unrelated prompt takes the other slot and the cache survives
        complete(client, model, prompt=LONG_PROMPT, prompt_cache_key="k")
        complete(client, model, prompt=other + "!", prompt_cache_key="another")
        assert cached(complete(client, model, prompt=LONG_PROMPT, prompt_cache_key="z")) > 0


def test_queue_full_is_429_with_retry_after(small_server):
    hold = {"model": small_server.model, "prompt": "Count:", "max_tokens": 2000, "ignore_eos": True, "stream": True}

    async def scenario() -> httpx.Response:
        async with httpx.AsyncClient(base_url=small_server.base_url, timeout=60) as client:
            async def stream(body: dict) -> None:
                async with client.stream("POST", "/v1/completions", json=body) as response:
                    async for _ in response.aiter_lines():
                        pass

            deadline = time.monotonic() + 120  # a hang guard, not a timing
            running = [asyncio.create_task(stream({**hold, "n": 2}))]  # both slots busy
            while (await client.get("/health")).json()["models"][0]["busy_slots"] < 2:
                assert time.monotonic() < deadline, "the two choices never started"
                await asyncio.sleep(0.05)
            running.append(asyncio.create_task(stream(hold)))  # waits: the queue is now full
            while (await client.get("/health")).json()["models"][0]["queued_requests"] < 1:
                assert time.monotonic() < deadline, "the third request never queued"
                await asyncio.sleep(0.05)
            refused = await client.post("/v1/completions", json={**hold, "stream": False, "max_tokens": 1})
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            return refused

    refused = asyncio.run(scenario())
    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) >= 1
    error = refused.json()["error"]
    assert error["type"] == "rate_limit_error" and "busy" in error["message"]
    with httpx.Client(base_url=small_server.base_url, timeout=60) as client:  # and it recovers
        for _ in range(100):
            load = client.get("/health").json()["models"][0]
            if load["busy_slots"] == 0 and load["queued_requests"] == 0:
                break
            asyncio.run(asyncio.sleep(0.05))
        assert complete(client, small_server.model, prompt="Hi")["usage"]["completion_tokens"] >= 1


def test_a_gap_between_busy_slots_is_closed_and_the_moved_stream_goes_on_unchanged(model_path):
    """Real engine, no HTTP: a sequence moved into a gap keeps generating the same text."""
    from backends.engine import Engine, EngineOptions
    from backends.jobs import (
        CacheKeys,
        ChoiceFinished,
        GenerationJob,
        PromptSpec,
        SamplingParams,
        TextDelta,
    )
    from backends.llama_model import LlamaModel, ModelOptions

    model = LlamaModel(model_path, ModelOptions())
    engine = Engine(model, EngineOptions(ctx_size=512, parallel=4, threads=engine_threads()))
    greedy = SamplingParams(temperature=0, ignore_eos=True)

    def job(text: str, tokens: int) -> GenerationJob:
        prompt = tuple(model.tokenize(text, add_special=True, parse_special=True))
        return GenerationJob((PromptSpec(prompt, tokens),), 1, greedy)

    async def text_of(handle, stop_after: int | None = None) -> str:
        parts, count = [], 0
        async for event in handle.events():
            if isinstance(event, TextDelta):
                parts.append(event.text)
                count += 1
                if stop_after is not None and count >= stop_after:
                    handle.cancel()
                    return "".join(parts)
            elif isinstance(event, ChoiceFinished):
                break
        return "".join(parts)

    prompts = ["Once upon a time, in a quiet village,", "The recipe calls for flour and", "In the year 3000, robots"]

    async def scenario() -> tuple[str, str, list[int]]:
        handles = [engine.submit(job(p, 60)) for p in prompts]  # into slots 0, 1 and 2
        first, second, third = (asyncio.create_task(text_of(h, 5 if i == 1 else None)) for i, h in enumerate(handles))
        await second  # the middle stream leaves: a gap opens between the other two
        texts = await asyncio.gather(first, third)
        slot1 = list(engine._slots[1].tokens)
        # the third prompt alone, prefilled anew (its cached prompt is isolated away)
        alone = await text_of(engine.submit(replace(job(prompts[2], 60), cache=CacheKeys(isolation="alone"))))
        return alone, texts[1], slot1

    third = model.tokenize(prompts[2], add_special=True, parse_special=True)
    try:
        alone, moved, slot1 = asyncio.run(scenario())
    finally:
        engine.close()
        model.close()
    assert len(moved) > 20 and moved == alone
    assert slot1[: len(third)] == third  # it finished in slot 1, the gap it was moved into


def test_a_job_larger_than_the_pool_is_refused_at_once_and_never_blocks_the_queue(model_path):
    """Real engine, no HTTP: a job whose KV need (prompt and completion budget) is more than the
    pool can ever give raises at submit, with the numbers; one within the pool still runs."""
    from backends.engine import Engine, EngineOptions, JobTooLarge
    from backends.jobs import ChoiceFinished, GenerationJob, PromptSpec, SamplingParams
    from backends.llama_model import LlamaModel, ModelOptions

    model = LlamaModel(model_path, ModelOptions())
    engine = Engine(model, EngineOptions(ctx_size=64, parallel=2, threads=engine_threads()))
    prompt = tuple(model.tokenize("word " * 100, add_special=True, parse_special=False))
    greedy = SamplingParams(temperature=0, ignore_eos=True)

    async def scenario() -> list[str]:
        with pytest.raises(JobTooLarge) as refused:
            engine.submit(GenerationJob((PromptSpec(prompt, 40),), 1, greedy))
        assert (refused.value.need, refused.value.limit) == (len(prompt) + 40, engine.request_limit)
        assert str(engine.request_limit) in str(refused.value) and str(len(prompt) + 40) in str(refused.value)
        within = engine.submit(GenerationJob((PromptSpec(prompt[:100], engine.request_limit - 100),), 1, greedy))
        return [event.finish_reason async for event in within.events() if isinstance(event, ChoiceFinished)]

    try:
        assert engine.request_limit == 128  # two slots of 64: a request may take the whole pool
        assert asyncio.run(scenario()) == ["length"]
        assert engine.load().queued_choices == 0
    finally:
        engine.close()
        model.close()
