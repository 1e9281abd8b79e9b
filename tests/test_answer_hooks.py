"""`answer`'s hooks, seen from the outside: Ollama's generation door takes one lease per request
and reports as `load_duration` the time that lease took to get (the model's load included), on a
server run in this process so that the registry's leases can be counted; `count_tokens` renders
and tokenizes only (no image encoded, no grammar compiled) and counts what `prepare` would.

The server is the real app on real HTTP (uvicorn on loopback) with the real `ollama` client; its
registry is the real one, counting the leases requests take and timing each `acquire` from the
inside, so that `load_duration` can be checked to hold that time (containment, never a speed).
"""

from __future__ import annotations

import asyncio
import base64
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import msgspec
import ollama
import pytest
import uvicorn

from app.api.anthropic.plan import count_plan
from app.api.anthropic.wire import CountTokensRequest
from app.pipeline.errors import BadRequest
from app.pipeline.prepare import count_chat_tokens, prepare
from app.server.app import create_app
from backends.engine import EngineOptions
from backends.llama_model import ModelOptions
from backends.registry import Lease, ModelRegistry, ModelSpec, default_model_path
from tests.fixtures.make_tiny_vlm import IMAGE_TOKENS
from tests.images import noise, png
from tests.servers import free_port

MODEL = "m"
STORY = [{"role": "user", "content": "Tell me a long story about a dragon."}]
GREEDY = {"temperature": 0, "num_predict": 4}


class CountingRegistry(ModelRegistry):
    """The real registry, keeping how many leases requests took and how long each `acquire` took."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.leases = 0
        self.acquired: list[float] = []  # seconds, each acquire as the registry itself took it

    async def acquire(self, name: str) -> Lease | None:
        started = time.perf_counter()
        lease = await super().acquire(name)
        self.acquired.append(time.perf_counter() - started)
        if lease is not None:
            self.leases += 1
        return lease


@dataclass
class InProcess:
    registry: CountingRegistry
    client: ollama.Client


@pytest.fixture(scope="module")
def in_process() -> Iterator[InProcess]:
    """The model loads on first use (so a request can be made to load it) and unloads on request."""
    registry = CountingRegistry([ModelSpec(default_model_path(), MODEL, eager=False)], ModelOptions(),
                                EngineOptions(ctx_size=512, parallel=1))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(registry), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive(), "the in-process server did not start"
            time.sleep(0.05)
        yield InProcess(registry, ollama.Client(host=f"http://127.0.0.1:{port}", timeout=120))
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        registry.close()


def _unloaded(setup: InProcess) -> None:
    """The model unloaded now (`keep_alive: 0` with no messages: no lease)."""
    before = setup.registry.leases
    assert setup.client.chat(model=MODEL, messages=[], keep_alive=0).done_reason == "unload"
    assert list(setup.registry) == [] and setup.registry.leases == before


def _holds_the_acquire(setup: InProcess, final: ollama.ChatResponse | ollama.GenerateResponse) -> None:
    """`load_duration` holds the registry's own `acquire` of this request's one lease, and is
    within the request's total."""
    inner = round(setup.registry.acquired[-1] * 1e9)
    assert final.load_duration >= inner - 1
    assert final.load_duration <= final.total_duration
    # the load comes first: the prompt's evaluation starts after it, and the parts add up
    parts = final.load_duration + final.prompt_eval_duration + final.eval_duration
    assert abs(final.total_duration - parts) <= 3


def test_a_chat_takes_one_lease_and_reports_the_load(in_process) -> None:
    registry, client = in_process.registry, in_process.client
    _unloaded(in_process)
    before = registry.leases
    whole = client.chat(model=MODEL, messages=STORY, options=GREEDY)
    assert registry.leases == before + 1
    assert [served.id for served in registry] == [MODEL]  # this request loaded it
    assert whole.done_reason == "length" and whole.eval_count == 4
    _holds_the_acquire(in_process, whole)
    assert whole.load_duration > 1  # not the 1 ns floor of a load time nobody measured

    parts = list(client.chat(model=MODEL, messages=STORY, options=GREEDY, stream=True))
    assert registry.leases == before + 2
    assert "".join(part.message.content for part in parts) == whole.message.content
    _holds_the_acquire(in_process, parts[-1])


def test_generate_takes_one_lease_even_when_its_plan_needs_the_model(in_process) -> None:
    registry, client = in_process.registry, in_process.client
    before = registry.leases
    first = client.generate(model=MODEL, prompt="The sky is", options=GREEDY)
    assert registry.leases == before + 1
    _holds_the_acquire(in_process, first)
    # `context` is made of the model's tokens: the plan is built once the model is held
    follow = client.generate(model=MODEL, prompt="And then?", context=first.context, options=GREEDY)
    assert registry.leases == before + 2
    assert follow.context[:len(first.context)] == first.context
    _holds_the_acquire(in_process, follow)
    streamed = list(client.generate(model=MODEL, prompt="The sky is", options=GREEDY, stream=True))
    assert registry.leases == before + 3 and streamed[-1].context == first.context


def test_keep_alive_and_num_ctx_apply_while_the_one_lease_is_held(in_process) -> None:
    registry, client = in_process.registry, in_process.client
    before = registry.leases
    client.chat(model=MODEL, messages=STORY, options=GREEDY, keep_alive="1h")
    assert registry.leases == before + 1 and registry.expires_at(MODEL) is not None
    client.chat(model=MODEL, messages=STORY, options=GREEDY, keep_alive=-1)  # forever again
    assert registry.expires_at(MODEL) is None
    with pytest.raises(ollama.ResponseError) as refused:
        client.chat(model=MODEL, messages=STORY, options={**GREEDY, "num_ctx": 4096})
    assert refused.value.status_code == 400 and "num_ctx 4096" in refused.value.error
    assert registry.leases == before + 3
    # the refused request gave its lease back: nothing holds the model, so it unloads at once
    _unloaded(in_process)


# ---- count_tokens: render and tokenize only ------------------------------------------------------------

def _image_block(seed: int) -> dict:
    data = base64.b64encode(png(noise(seed))).decode()
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}


@pytest.fixture(scope="module")
def vlm():
    """SmolLM2 with the tests' tiny projector, loaded in this process."""
    from tests.built import tiny_vlm

    _, projector = tiny_vlm()
    registry = ModelRegistry.load([ModelSpec(default_model_path(), "vlm", mmproj=projector)], ModelOptions(),
                                  EngineOptions(ctx_size=512, parallel=1))
    try:
        yield next(iter(registry))
    finally:
        registry.close()


@pytest.fixture
def encoder_runs(vlm, monkeypatch) -> list[int]:
    """How many times the projector's encoder runs (the real one, counted on its way)."""
    runs: list[int] = []
    projector = vlm.projector
    for name in ("encode", "encode_pixels"):
        method = getattr(projector, name)

        def counted(*args, _method=method, **kwargs):
            runs.append(1)
            return _method(*args, **kwargs)

        monkeypatch.setattr(projector, name, counted)
    return runs


def _count_plan(**fields):
    return count_plan(msgspec.convert({"model": "vlm", **fields}, CountTokensRequest))


def test_count_tokens_counts_images_as_prepare_does_without_encoding_them(vlm, encoder_runs) -> None:
    question = "What differs between these?"
    plan = _count_plan(messages=[{"role": "user", "content": [{"type": "text", "text": question},
                                                              _image_block(1), _image_block(2)]}])
    counted = asyncio.run(count_chat_tokens(plan, vlm))
    assert encoder_runs == []
    prepared = asyncio.run(prepare(plan, vlm))
    assert len(encoder_runs) == 2  # the count sees the encoder when it does run
    assert counted == len(prepared.job.prompts[0].tokens)
    text_only = asyncio.run(count_chat_tokens(_count_plan(messages=[{"role": "user", "content": question}]), vlm))
    assert counted >= text_only + 2 * IMAGE_TOKENS


def test_count_tokens_compiles_no_grammar(vlm) -> None:
    """A schema whose grammar cannot be made refuses a create; a count never makes the grammar."""
    messages = [{"role": "user", "content": "Answer in JSON."}]
    broken = _count_plan(messages=messages, output_config={"format": {"type": "json_schema",
                                                                       "schema": {"$ref": "#/$defs/missing"}}})
    assert asyncio.run(count_chat_tokens(broken, vlm)) == asyncio.run(count_chat_tokens(_count_plan(messages=messages),
                                                                                        vlm))
    with pytest.raises(BadRequest, match="points to nothing"):
        asyncio.run(prepare(broken, vlm))
