"""The model registry: models from the config file load on first use, unload after their
keep-alive or to make room (least recently used first), and requests never fail because another
model was being unloaded. Real servers on the real default model, each model id a copy in name;
servers of their own, since loads and unloads are what the tests watch."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from app.settings.config import (
    ConfigError,
    add_model,
    load_config,
    parse_duration,
    parse_size,
    remove_model,
)
from backends.engine import EngineOptions
from backends.llama_model import ModelOptions
from backends.registry import ModelRegistry, ModelSpec
from tests.cli_runner import run_cli
from tests.conftest import default_model_path, start_server, stop_server

MODEL = default_model_path()


def write_config(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path


def entry(model_id: str, **fields: str) -> str:
    lines = ["[[models]]", f'id = "{model_id}"', f'file = "{MODEL}"']
    lines += [f"{key} = {value}" for key, value in fields.items()]
    return "\n".join(lines) + "\n"


def models(client: httpx.Client) -> dict[str, bool]:
    return {card["id"]: card["loaded"] for card in client.get("/v1/models").json()["data"]}


def complete(client: httpx.Client, model: str, **fields) -> httpx.Response:
    return client.post("/v1/completions", json={"model": model, "prompt": "Hello", "max_tokens": 2, **fields})


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    return tmp_path / "config"


def serve(config: Path, *args: str):
    return start_server("--config", str(config), "--parallel", "2", "--ctx-size", "512", *args)


def test_config_models_load_on_first_use_and_keep_alive_unloads_them(config_dir: Path) -> None:
    config = write_config(config_dir, entry("alpha", keep_alive='"2s"') + entry("beta", aliases='["b"]'))
    server = serve(config)
    try:
        with httpx.Client(base_url=server.base_url, timeout=60) as client:
            assert models(client) == {"alpha": False, "beta": False}  # listed before any is loaded
            # A model unloads only when unused: while this stream is open, alpha's 2 s cannot run out.
            body = {"model": "alpha", "prompt": "Hello", "max_tokens": 400, "ignore_eos": True, "stream": True}
            with client.stream("POST", "/v1/completions", json=body) as stream:
                assert stream.status_code == 200
                lines = stream.iter_lines()  # kept, so the connection stays open until the check is done
                assert next(line for line in lines if line.startswith("data: {"))
                assert models(client) == {"alpha": True, "beta": False}
            assert complete(client, "b").status_code == 200  # an alias loads its model
            assert models(client)["beta"] is True
            deadline = time.monotonic() + 60  # only a server that never unloads alpha gets there
            while models(client)["alpha"] and time.monotonic() < deadline:
                time.sleep(0.5)
            assert models(client) == {"alpha": False, "beta": True}  # 2 s keep-alive, default 5 min
            assert complete(client, "alpha").status_code == 200  # loads again
            assert client.get("/v1/models/b").json()["id"] == "beta"
            assert complete(client, "gamma").status_code == 404
    finally:
        stop_server(server)


def test_max_loaded_unloads_the_least_recently_used_and_no_request_fails(config_dir: Path) -> None:
    config = write_config(config_dir, "max_loaded = 2\n" + entry("a") + entry("b") + entry("c"))
    server = serve(config)
    try:
        with httpx.Client(base_url=server.base_url, timeout=120) as client:
            for name in ("a", "b", "a", "c"):  # c needs room: b is the least recently used
                assert complete(client, name).status_code == 200
            assert models(client) == {"a": True, "b": False, "c": True}
            # Requests for all three at once, over and over: each finds its model loaded, loading,
            # or waits for room; none fails because another model was being unloaded.
            names = ["a", "b", "c"] * 6
            with ThreadPoolExecutor(6) as pool:
                statuses = list(pool.map(lambda name: complete(client, name, stream=name == "b").status_code, names))
            assert statuses == [200] * len(names)
            assert sum(models(client).values()) <= 2
    finally:
        stop_server(server)


def counting_registry(max_loaded: int) -> tuple[ModelRegistry, list[str]]:
    """A registry of three lazily loaded copies of the default model, and the ids it loads, in order."""
    specs = [ModelSpec(MODEL, alias=name, eager=False) for name in ("a", "b", "c")]
    registry = ModelRegistry(specs, ModelOptions(), EngineOptions(ctx_size=256, parallel=1), max_loaded=max_loaded)
    loads: list[str] = []
    load = registry._load
    registry._load = lambda spec: (loads.append(spec.id), load(spec))[1]  # the real load runs
    return registry, loads


async def use(registry: ModelRegistry, name: str) -> str:
    lease = await registry.acquire(name)
    lease.release()
    return lease.served.id


def test_requests_for_one_model_that_needs_room_load_it_once_and_unload_one_other() -> None:
    """Two requests at once for a model that is not loaded: one load, one model unloaded for it
    (both requests once made room and loaded a copy: two unloads, and a 500 from the second load)."""
    registry, loads = counting_registry(max_loaded=2)

    async def scenario() -> None:
        await use(registry, "a")
        await use(registry, "b")
        first, second = await asyncio.gather(registry.acquire("c"), registry.acquire("c"))
        assert first.served is second.served
        first.release()
        second.release()

    try:
        asyncio.run(scenario())
        assert loads == ["a", "b", "c"]
        assert [served.id for served in registry] == ["b", "c"]  # a, the least recently used, made room
    finally:
        registry.close()


def test_a_model_just_loaded_is_not_unloaded_before_its_requests_take_it() -> None:
    """One slot, two models wanted at once: each is loaded once and serves its request. A model
    whose requests have not yet taken their leases is not idle, or the two would unload each
    other forever."""
    registry, loads = counting_registry(max_loaded=1)

    async def scenario() -> list[str]:
        await use(registry, "a")
        return await asyncio.wait_for(asyncio.gather(use(registry, "b"), use(registry, "c")), 60)

    try:
        assert asyncio.run(scenario()) == ["b", "c"]
        assert loads == ["a", "b", "c"]
    finally:
        registry.close()


def test_a_request_that_leaves_during_the_load_does_not_stop_it_for_the_others() -> None:
    registry, loads = counting_registry(max_loaded=2)

    async def scenario() -> str:
        leaving = asyncio.create_task(registry.acquire("a"))
        staying = asyncio.create_task(registry.acquire("a"))
        while not any(served.id == "a" for served in registry) and not loads:
            await asyncio.sleep(0)  # until the load has begun
        leaving.cancel()
        lease = await staying
        lease.release()
        return lease.served.id

    try:
        assert asyncio.run(scenario()) == "a"
        assert loads == ["a"]
    finally:
        registry.close()


def test_memory_budget_keeps_one_model_of_this_size(config_dir: Path) -> None:
    budget = int(MODEL.stat().st_size * 1.5)  # room for one copy's weights and cache, not two
    config = write_config(config_dir, f"memory_budget = {budget}\n" + entry("a") + entry("b"))
    server = serve(config)
    try:
        with httpx.Client(base_url=server.base_url, timeout=60) as client:
            assert complete(client, "a").status_code == 200
            assert complete(client, "b").status_code == 200
            assert models(client) == {"a": False, "b": True}
    finally:
        stop_server(server)


def test_config_sampling_defaults_apply_to_fields_left_out(config_dir: Path) -> None:
    config = write_config(config_dir, entry("greedy") + "[models.sampling]\ntemperature = 0\nmax_tokens = 6\n")
    server = serve(config)
    try:
        with httpx.Client(base_url=server.base_url, timeout=60) as client:
            # ignore_eos: the budget is spent whole on any machine (no sampling field, no default of its own)
            defaulted = client.post("/v1/completions", json={"model": "greedy", "prompt": "The sky is",
                                                             "ignore_eos": True}).json()
            explicit = complete(client, "greedy", prompt="The sky is", temperature=0, max_tokens=6,
                                ignore_eos=True).json()
            assert defaulted["usage"]["completion_tokens"] == 6  # not the endpoint's default of 16
            assert defaulted["choices"][0]["text"] == explicit["choices"][0]["text"]
            hot = [complete(client, "greedy", prompt="The sky is", temperature=2, max_tokens=6, seed=s).json()
                   for s in range(3)]
            assert len({h["choices"][0]["text"] for h in hot}) > 1  # a request's own field wins
    finally:
        stop_server(server)


def test_command_line_model_serves_beside_the_config(config_dir: Path) -> None:
    config = write_config(config_dir, entry("later"))
    server = serve(config, "--model", str(MODEL), "--alias", "now")
    try:
        with httpx.Client(base_url=server.base_url, timeout=60) as client:
            assert models(client) == {"now": True, "later": False}
    finally:
        stop_server(server)


def test_a_bad_config_stops_start_up_with_the_place(config_dir: Path) -> None:
    config = write_config(config_dir, entry("a", gpu_layers='"lots"'))
    result = run_cli("serve", "--config", str(config), "--port", "1")
    assert result.returncode == 1
    assert "models[0].gpu_layers" in result.stderr and "auto" in result.stderr
    assert result.stderr.startswith(f"fireside: {config}:4: ") and len(result.stderr.splitlines()) == 1


def run_module(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`python -m app.cli ARGS`: a real process on purpose, the smoke test of `fireside models` and
    of the module's entry point (the other commands here run in-process)."""
    return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env}, cwd=Path(__file__).resolve().parents[1], check=False)


def test_models_rm_and_config_path_commands(tmp_path: Path) -> None:
    env = {"FIRESIDE_CONFIG_DIR": str(tmp_path / "config"), "FIRESIDE_MODELS_DIR": str(tmp_path / "models")}
    downloaded = tmp_path / "models" / "org" / "repo" / "small.gguf"
    downloaded.parent.mkdir(parents=True)
    os.link(MODEL, downloaded) if MODEL.stat().st_dev == downloaded.parent.stat().st_dev else downloaded.write_bytes(
        MODEL.read_bytes())
    stray = tmp_path / "models" / "stray.gguf"
    stray.write_bytes(b"GGUF")
    assert run_cli("config", "path", env=env).stdout.strip() == str(tmp_path / "config" / "config.toml")
    add_model({"id": "small", "file": downloaded, "aliases": ["s"]}, tmp_path / "config" / "config.toml")
    listing = run_module("models", "--port", "1", env=env)
    assert listing.returncode == 0, listing.stderr
    assert "small" in listing.stdout and "org/repo/small.gguf" in listing.stdout
    assert "(not configured)" in listing.stdout and "stray.gguf" in listing.stdout
    assert "loaded state unknown" in listing.stdout
    removed = run_cli("rm", "s", env=env)
    assert removed.returncode == 0, removed.stderr
    assert not downloaded.exists() and not (tmp_path / "models" / "org").exists()  # empty folders go too
    assert stray.exists()
    assert load_config(tmp_path / "config" / "config.toml").models == ()
    again = run_cli("rm", "small", env=env)
    assert again.returncode == 1 and again.stderr.startswith("fireside: no model 'small' in "), again.stderr


def test_config_edits_keep_comments_and_parse_units(tmp_path: Path) -> None:
    path = write_config(tmp_path, "# my models\nmax_loaded = 1  # one at a time\n")
    add_model({"id": "x", "file": "/models/x.gguf", "keep_alive": "90s"}, path)
    add_model({"id": "y", "file": "/models/y.gguf"}, path)
    assert remove_model("x", path) and not remove_model("x", path)
    text = path.read_text()
    assert "# my models" in text and "# one at a time" in text and 'id = "y"' in text and 'id = "x"' not in text
    assert [m.id for m in load_config(path).models] == ["y"]
    assert parse_duration("90s", "k") == 90 and parse_duration("5m", "k") == 300 and parse_duration(-1, "k") == float("inf")
    assert parse_size("8GiB", "k") == 8 * 2**30 and parse_size("500MB", "k") == 500 * 10**6
    with pytest.raises(ConfigError, match="duration"):
        parse_duration("soon", "keep_alive")
    duplicate = write_config(tmp_path / "dup", entry("a") + entry("b", aliases='["a"]'))
    with pytest.raises(ConfigError, match="'a' is used by"):
        load_config(duplicate)


def test_a_configured_model_whose_file_is_missing_is_503_and_the_others_serve(config_dir: Path,
                                                                               tmp_path: Path) -> None:
    config = write_config(config_dir, entry("here") + f'[[models]]\nid = "gone"\nfile = "{tmp_path / "gone.gguf"}"\n')
    server = serve(config)
    try:
        with httpx.Client(base_url=server.base_url, timeout=60) as client:
            missing = complete(client, "gone")
            assert missing.status_code == 503
            error = missing.json()["error"]
            assert error["code"] == "model_unavailable" and "gone.gguf" in error["message"]
            assert complete(client, "here").status_code == 200
            assert models(client) == {"here": True, "gone": False}
    finally:
        stop_server(server)
