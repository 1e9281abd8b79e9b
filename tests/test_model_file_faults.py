"""Faults of model files and memory, on real servers serving copies of the real GGUF files: a file
truncated, deleted or replaced under a loaded model, or broken before a lazy load, is a 503 for
that model alone (in each front door's error shape) and never takes the server down; a model
larger than the memory budget or the free memory is refused before loading, with the numbers.
Servers of their own: the tests break their model files under them."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from backends.memory import FAKE_ENV, describe_bytes
from tests.cli_runner import CliResult, run_cli
from tests.conftest import (
    OutputReader,
    RunningServer,
    default_model_path,
    free_port,
    start_server,
    stop_server,
)

MODEL = default_model_path()  # SmolLM2-135M-Instruct


def copy_model(folder: Path, name: str, source: Path = MODEL) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{name}.gguf"
    shutil.copyfile(source, target)
    return target


def serving(*args: str) -> tuple[RunningServer, OutputReader]:
    server = start_server("--parallel", "1", "--ctx-size", "512", *args)
    return server, server.output


@pytest.fixture
def two_models(tmp_path: Path) -> Iterator[tuple[RunningServer, OutputReader, Path]]:
    """A server with two copies of SmolLM2 given on the command line (loaded at start-up): `a`,
    whose file the test harms, and `b`, which must go on serving."""
    a, b = copy_model(tmp_path, "a"), copy_model(tmp_path, "b")
    server, output = serving("--model", str(a), "--alias", "a", "--model", str(b), "--alias", "b")
    try:
        yield server, output, a
    finally:
        stop_server(server)


def complete(client: httpx.Client, model: str, **fields) -> httpx.Response:
    return client.post("/v1/completions", json={"model": model, "prompt": "Hello", "max_tokens": 2, **fields})


def unavailable_message(response: httpx.Response) -> str:
    """The message of an OpenAI-shaped 503 for a model that cannot be loaded."""
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["code"] == "model_unavailable" and error["param"] == "model"
    return error["message"]


def assert_front_doors_answer_503(client: httpx.Client, model: str, *words: str) -> None:
    """Every front door answers 503 for `model` in its own error shape, its message holding `words`."""
    shapes = {
        "openai chat": (client.post("/v1/chat/completions", json={
            "model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}),
            lambda body: body["error"]["message"]),
        "embeddings": (client.post("/v1/embeddings", json={"model": model, "input": "Hi"}),
                       lambda body: body["error"]["message"]),
        "responses": (client.post("/v1/responses", json={"model": model, "input": "Hi", "max_output_tokens": 2}),
                      lambda body: body["error"]["message"]),
        "anthropic": (client.post("/v1/messages", json={
            "model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}),
            lambda body: body["type"] == "error" and body["error"]["message"]),
        "ollama": (client.post("/api/generate", json={"model": model, "prompt": "Hi", "stream": False}),
                   lambda body: body["error"]),
        "tgi": (client.post("/generate", json={"model": model, "inputs": "Hi", "parameters": {"max_new_tokens": 2}}),
                lambda body: body["error_type"] == "overloaded" and body["error"]),
    }
    for door, (response, message_of) in shapes.items():
        assert response.status_code == 503, (door, response.text)
        message = message_of(response.json())
        assert message and all(word in message for word in words), (door, message)


# ---- a file harmed under a loaded model ---------------------------------------------------------------


def test_a_file_truncated_under_a_running_stream_does_not_kill_the_server(two_models) -> None:
    """The weights were read into memory, not mapped: a mapped file cut short under a decoding
    model is a SIGBUS that ends the whole server (llama.cpp's default). The stream that was
    running finishes; the next request for the model is a 503 that says what happened."""
    server, _, a = two_models
    size = a.stat().st_size
    body = {"model": "a", "prompt": "Once upon a time", "max_tokens": 100, "ignore_eos": True, "stream": True,
            "temperature": 0, "stream_options": {"include_usage": True}}
    with httpx.Client(base_url=server.base_url, timeout=120) as client:
        chunks = []
        with client.stream("POST", "/v1/completions", json=body) as stream:
            assert stream.status_code == 200
            for line in stream.iter_lines():
                if line.startswith("data: {"):
                    chunks.append(json.loads(line[6:]))
                    if len(chunks) == 1:
                        os.truncate(a, 1000)  # in place, as `cp other a.gguf` or a download over it begins
        finishes = [choice["finish_reason"] for chunk in chunks for choice in chunk["choices"] if choice["finish_reason"]]
        assert finishes == ["length"] and chunks[-1]["usage"]["completion_tokens"] == 100  # all of it, from memory
        assert server.process.poll() is None
        message = unavailable_message(complete(client, "a"))
        assert f"{a} was truncated from {size} to 1000 bytes while a was loaded" in message
        assert_front_doors_answer_503(client, "a", str(a), "truncated")
        assert complete(client, "b").status_code == 200
        shutil.copyfile(MODEL, a)  # mended: it loads again
        assert complete(client, "a").status_code == 200
    assert server.process.poll() is None


def test_a_file_deleted_under_a_loaded_model_is_a_503_naming_it_and_the_others_serve(two_models) -> None:
    server, output, a = two_models
    with httpx.Client(base_url=server.base_url, timeout=120) as client:
        assert complete(client, "a").status_code == 200
        a.unlink()
        message = unavailable_message(complete(client, "a"))
        assert f"{a} was deleted while a was loaded" in message and "not found" in message
        assert complete(client, "b").status_code == 200
        assert {card["id"]: card["loaded"] for card in client.get("/v1/models").json()["data"]} == {
            "a": False, "b": True}  # the copy of a deleted file is not kept in memory
    assert output.wait_for(lambda line: f"a: {a} was deleted" in line) is not None  # said once, in the log


def test_a_file_replaced_under_a_loaded_model_loads_anew_from_the_new_file(two_models, gemma_path: Path) -> None:
    """A rename over the file (what `fireside pull`, `huggingface-cli` and most downloaders do):
    the loaded copy finishes what it runs, and the next request loads the new file, as Ollama
    loads a re-pulled model anew. Here the new file is another model altogether (Gemma 3 270M),
    which tokenizes the same prompt differently."""
    server, output, a = two_models
    prompt = {"prompt": "Hello there, how are you?", "max_tokens": 1}
    with httpx.Client(base_url=server.base_url, timeout=120) as client:
        before = complete(client, "a", **prompt).json()["usage"]["prompt_tokens"]
        replacement = copy_model(a.parent, "incoming", gemma_path)
        os.replace(replacement, a)
        after = complete(client, "a", **prompt)
        assert after.status_code == 200, after.text
        assert after.json()["usage"]["prompt_tokens"] != before
        assert complete(client, "b", **prompt).json()["usage"]["prompt_tokens"] == before
    assert output.wait_for(lambda line: f"{a} was replaced by another file" in line) is not None


def test_a_file_truncated_before_a_lazy_load_is_a_503_naming_the_model_and_the_path(tmp_path: Path) -> None:
    broken = copy_model(tmp_path / "models", "broken")
    os.truncate(broken, broken.stat().st_size // 2)
    gone = tmp_path / "models" / "gone.gguf"
    good = copy_model(tmp_path / "models", "good")
    config = tmp_path / "config.toml"
    config.write_text("".join(f'[[models]]\nid = "{name}"\nfile = "{path}"\n\n'
                              for name, path in (("broken", broken), ("gone", gone), ("good", good))))
    server, _ = serving("--config", str(config))
    try:
        with httpx.Client(base_url=server.base_url, timeout=120) as client:
            message = unavailable_message(complete(client, "broken"))
            assert "model broken could not be loaded" in message and str(broken) in message
            assert "not within the file bounds" in message  # llama.cpp's own reason
            assert_front_doors_answer_503(client, "gone", "gone", str(gone), "not found")
            assert complete(client, "good").status_code == 200
    finally:
        stop_server(server)


# ---- memory: the budget and the free memory --------------------------------------------------------------


def sizes_config(folder: Path, top: str = "") -> Path:
    """`small`: SmolLM2 with a 256-token context; `big`: the same file with 8192 tokens, whose
    KV cache (180 MiB in f16) makes it about 274 MiB in all."""
    model = copy_model(folder / "models", "smollm2")
    config = folder / "config.toml"
    config.write_text(f'{top}\n[[models]]\nid = "small"\nfile = "{model}"\ncontext_size = 256\n\n'
                      f'[[models]]\nid = "big"\nfile = "{model}"\ncontext_size = 8192\n')
    return config


def test_a_model_larger_than_the_memory_budget_is_refused_with_the_numbers(tmp_path: Path) -> None:
    budget = 150 * 2**20
    server, _ = serving("--config", str(sizes_config(tmp_path)), "--memory-budget", str(budget))
    try:
        with httpx.Client(base_url=server.base_url, timeout=120) as client:
            message = unavailable_message(complete(client, "big"))
            weights = describe_bytes(MODEL.stat().st_size)
            assert f"big needs about 273.8 MiB ({weights} of weights and 180.0 MiB of KV cache for 8192 tokens)" in message
            assert f"more than the memory budget of {describe_bytes(budget)}" in message
            assert_front_doors_answer_503(client, "big", "memory budget")
            assert complete(client, "small").status_code == 200
            assert {card["id"]: card["loaded"] for card in client.get("/v1/models").json()["data"]} == {
                "small": True, "big": False}
    finally:
        stop_server(server)


def refused_start(*args: str) -> CliResult:
    """`fireside serve ARGS` refused before it loads a model: one line and exit 1 (in this process:
    the refusal comes from the memory estimate, before anything loads)."""
    result = run_cli("serve", "--port", str(free_port()), "--prompt-cache-disk", "0", *args)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fireside: "), result.stderr
    assert "listening on" not in result.stdout
    return result


def test_a_command_line_model_larger_than_the_budget_stops_start_up_with_the_numbers() -> None:
    result = refused_start("--model", str(MODEL), "--memory-budget", "10MiB")
    assert f"{MODEL.stem} needs about" in result.stderr
    assert f"({describe_bytes(MODEL.stat().st_size)} of weights" in result.stderr
    assert "more than the memory budget of 10.0 MiB" in result.stderr


# A machine short of memory cannot be arranged on one that has enough: FIRESIDE_FAKE_MEMAVAILABLE
# replaces the reading of /proc/meminfo's MemAvailable (and only that) with the number it holds.


def test_a_model_larger_than_the_free_memory_is_refused_before_loading(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    available = 150 * 2**20
    monkeypatch.setenv(FAKE_ENV, str(available))
    server, _ = serving("--config", str(sizes_config(tmp_path)))
    try:
        with httpx.Client(base_url=server.base_url, timeout=120) as client:
            message = unavailable_message(complete(client, "big"))
            assert "big needs about 273.8 MiB" in message
            assert f"more than the free memory: {describe_bytes(available)} available" in message
            assert complete(client, "small").status_code == 200
            # `small` is idle now, but unloading it (99 MiB) would still leave too little
            message = unavailable_message(complete(client, "big"))
            assert "and 99.4 MiB more held by idle models" in message
            assert {card["id"]: card["loaded"] for card in client.get("/v1/models").json()["data"]} == {
                "small": True, "big": False}  # left loaded: unloading it would not have helped
    finally:
        stop_server(server)


def test_a_command_line_model_larger_than_the_free_memory_stops_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FAKE_ENV, str(50 * 2**20))
    result = refused_start("--model", str(MODEL))
    assert f"{MODEL.stem} needs about" in result.stderr and "more than the free memory: 50.0 MiB available" in result.stderr


def test_idle_models_unload_to_make_free_memory_for_another(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`small` (99 MiB) fits in 120 MiB; `mid` (139 MiB: a 2048-token context) fits only once the
    idle `small` is unloaded. (The fake reading stays 120 MiB whatever is loaded, so the registry's
    own estimates decide here; on a real machine the reading drops as models load.)"""
    monkeypatch.setenv(FAKE_ENV, str(120 * 2**20))
    config = sizes_config(tmp_path)
    config.write_text(config.read_text().replace('id = "big"', 'id = "mid"').replace("8192", "2048"))
    server, output = serving("--config", str(config))
    try:
        with httpx.Client(base_url=server.base_url, timeout=120) as client:
            assert complete(client, "small").status_code == 200
            assert complete(client, "mid").status_code == 200
            assert {card["id"]: card["loaded"] for card in client.get("/v1/models").json()["data"]} == {
                "small": False, "mid": True}
        assert output.wait_for(lambda line: "unloading small to free memory for mid" in line) is not None
    finally:
        stop_server(server)
