"""Ollama's API without a model: its option, duration and name rules, and its error shape in front
of the API-key guard (an app with no models, in process)."""

from __future__ import annotations

import asyncio
import math

import pytest
from litestar.testing import TestClient

from app.api.ollama.options import (
    keep_alive_seconds,
    parse_options,
    reasoning,
    response_format,
)
from app.api.ollama.pull import parse_name
from app.pipeline.errors import BadRequest
from app.pipeline.plan import ResponseFormat, Sampling
from app.server.app import create_app
from app.server.security import SecuritySettings
from app.settings.api import ApiSettings
from backends.engine import EngineOptions
from backends.llama_model import ModelLoadError, ModelOptions
from backends.registry import ModelRegistry, ModelSpec, default_model_path


@pytest.mark.parametrize(("given", "seconds"), [
    ("5m", 300.0), ("1h30m", 5400.0), ("90s", 90.0), ("0", 0.0), (0, 0.0), ("300", 300.0), (2.5, 2.5),
    ("-1", math.inf), (-1, math.inf), ("-1m", math.inf), (None, None), ("500ms", 0.5),
])
def test_keep_alive_durations(given, seconds) -> None:
    assert keep_alive_seconds(given) == seconds


@pytest.mark.parametrize("given", ["soon", "5 minutes", "m5", True])
def test_bad_keep_alive_is_refused(given) -> None:
    with pytest.raises(BadRequest, match="keep_alive is a duration"):
        keep_alive_seconds(given)


def test_options_map_onto_the_plan() -> None:
    options = parse_options({"temperature": 0, "top_k": 5, "top_p": 0.5, "min_p": 0.1, "typical_p": 0.9, "seed": 7,
                             "repeat_penalty": 1.1, "presence_penalty": 0.2, "frequency_penalty": 0.3,
                             "repeat_last_n": -1, "num_predict": 12, "stop": ["\n"], "num_ctx": 512,
                             "mirostat": 2, "mirostat_tau": 4.0, "mirostat_eta": 0.2})
    assert options.sampling == Sampling(temperature=0.0, top_k=5, top_p=0.5, min_p=0.1, typical_p=0.9, seed=7,
                                        repetition_penalty=1.1, presence_penalty=0.2, frequency_penalty=0.3,
                                        mirostat_target=4.0, mirostat_lr=0.2)
    assert (options.max_tokens, options.stop, options.num_ctx) == (12, ("\n",), 512)
    assert parse_options({"num_predict": -1}).max_tokens is None and parse_options({"num_predict": -2}).max_tokens is None
    # no effect given the others: accepted, as in Ollama
    assert parse_options({"mirostat": 0, "mirostat_tau": 3.0, "repeat_last_n": 64}).sampling == Sampling()


@pytest.mark.parametrize(("given", "message"), [
    ({"num_thread": 4}, "options.num_thread is a load-time option"),
    ({"use_mmap": False}, "options.use_mmap is a load-time option"),
    ({"num_keep": 4}, "options.num_keep cannot be honoured"),
    ({"tfs_z": 1.0}, "options.tfs_z cannot be honoured"),
    ({"whatever": 1}, "options.whatever is not an option Fireside knows"),
    ({"num_predict": -3}, "options.num_predict is a token count"),
    ({"temperature": "hot"}, "options.temperature must be a number"),
    ({"repeat_penalty": 1.2, "repeat_last_n": 64}, "options.repeat_last_n 64 cannot be honoured"),
    ({"mirostat": 1}, "options.mirostat 1 cannot be honoured"),
])
def test_options_that_cannot_be_honoured_are_named(given, message) -> None:
    with pytest.raises(BadRequest) as refused:
        parse_options(given)
    assert refused.value.message.startswith(message), refused.value.message


def test_format_and_think() -> None:
    assert response_format("json") == ResponseFormat("json_object")
    assert response_format({"type": "object"}) == ResponseFormat("json_schema", schema={"type": "object"})
    assert response_format("") is None and response_format(None) is None
    assert reasoning(True).effort == "medium" and reasoning(False).effort == "none"
    assert reasoning("high").effort == "high" and reasoning("low").param == "think"
    with pytest.raises(BadRequest, match="think is true, false or one of low, medium, high"):
        reasoning("max")


@pytest.mark.parametrize(("name", "repo", "path", "quant"), [
    ("hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M", "bartowski/Llama-3.2-1B-Instruct-GGUF", None, "Q4_K_M"),
    ("acme/Tiny-GGUF", "acme/Tiny-GGUF", None, None),
    ("acme/Tiny-GGUF:latest", "acme/Tiny-GGUF", None, None),
    ("acme/Tiny-GGUF/Tiny-Q8_0.gguf", "acme/Tiny-GGUF", "Tiny-Q8_0.gguf", None),
])
def test_pull_names(name, repo, path, quant) -> None:
    target, tag = parse_name(name)
    assert (target.repo_id, target.path, tag) == (repo, path, quant)


def test_an_ollama_library_name_is_refused() -> None:
    with pytest.raises(BadRequest, match="Fireside pulls GGUF models from the Hub"):
        parse_name("llama3.2:latest")


def test_errors_under_api_are_in_ollamas_shape_even_from_the_key_guard() -> None:
    registry = ModelRegistry([], ModelOptions(), EngineOptions(ctx_size=512))
    app = create_app(registry, ApiSettings(security=SecuritySettings(api_keys=("sk-test-0123456789",))))
    with TestClient(app) as client:
        locked = client.get("/api/tags")
        assert locked.status_code == 401 and list(locked.json()) == ["error"] and "API key" in locked.json()["error"]
        assert client.get("/v1/models").json()["error"]["code"] == "invalid_api_key"  # /v1 keeps OpenAI's shape
        key = {"Authorization": "Bearer sk-test-0123456789"}
        assert client.get("/api/tags", headers=key).json() == {"models": []}
        assert client.get("/api/ps", headers=key).json() == {"models": []}
        missing = client.post("/api/show", json={"model": "nope"}, headers=key)
        assert (missing.status_code, missing.json()) == (404, {"error": "model 'nope' not found"})
        broken = client.post("/api/chat", content=b"{", headers=key)
        assert broken.status_code == 400 and broken.json()["error"].startswith("Request body is not valid JSON")
        extra = client.post("/api/generate", json={"model": "m", "prompt": "x", "nonsense": 1}, headers=key)
        assert (extra.status_code, extra.json()) == (400, {"error": "Object contains unknown field `nonsense`"})


def test_registry_keep_alive_unload_add_and_remove(tmp_path) -> None:
    """What `keep_alive`, `/api/pull` and `/api/delete` ask of the registry, on the real model. Its
    clock stands still at `now`: expiry times are exact, whatever time the steps take."""
    now = 1000.0
    registry = ModelRegistry([ModelSpec(default_model_path(), "a", eager=False)], ModelOptions(),
                             EngineOptions(ctx_size=256, parallel=1), clock=lambda: now)

    async def scenario() -> None:
        lease = await registry.acquire("a")
        registry.keep_alive("a", 0)  # held: it stays until the request is done
        assert [served.id for served in registry] == ["a"] and registry.expires_at("a") is not None
        lease.release()
        await registry.unload("a")  # the unload that release started is awaited here
        assert list(registry) == []
        lease = await registry.acquire("a")  # loaded again: its own keep-alive (forever) is back
        assert registry.expires_at("a") is None
        registry.keep_alive("a", 300)
        assert registry.expires_at("a") == now + 300  # 300 s after its last use (its load, at `now`)
        lease.release()
        registry.add(ModelSpec(tmp_path / "b.gguf", "b", aliases=("hf.co/o/b:Q4",), eager=False))
        assert registry.knows("hf.co/o/b:Q4").id == "b"
        with pytest.raises(ModelLoadError, match="two models would be served as 'a'"):
            registry.add(ModelSpec(tmp_path / "c.gguf", "c", aliases=("a",), eager=False))
        assert (await registry.remove("b")).id == "b" and registry.knows("b") is None
        assert (await registry.remove("a")).id == "a" and list(registry) == [] and registry.specs() == []
        assert await registry.remove("a") is None

    try:
        asyncio.run(scenario())
    finally:
        registry.close()
