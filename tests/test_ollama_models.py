"""Ollama's API where it changes the server: `keep_alive` unloading, `/api/pull` from a local
stand-in for the Hugging Face Hub (tests/test_pull.py's, no network), `/api/delete`, and `think`
on SmolLM2 served with reasoning templates (Qwen3's switch, DeepSeek-R1's open `<think>`).
One server of its own, with its own models and config folders: pulls, deletes and unloads change it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import httpx
import ollama
import pytest

from tests.conftest import QWEN3, R1, RunningServer, start_server, stop_server
from tests.test_pull import FakeHub, HubFile, HubHandler, gguf_bytes

ASK = [{"role": "user", "content": "Why is the sky blue?"}]
GREEDY = {"temperature": 0, "num_predict": 8}
TINY = gguf_bytes("ollama-tiny", 64 * 1024)


@pytest.fixture(scope="module")
def hub() -> Iterator[FakeHub]:
    fake = FakeHub()
    fake.add("acme/Tiny-GGUF", {"Tiny-Q4_K_M.gguf": HubFile(TINY), "Tiny-Q8_0.gguf": HubFile(gguf_bytes("q8"))})
    http = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (HubHandler,), {"hub": fake}))
    http.daemon_threads = True
    fake.port = http.server_address[1]
    threading.Thread(target=http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield fake
    http.shutdown()
    http.server_close()


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ollama-home")


@pytest.fixture(scope="module")
def ollama_server(hub, home, model_path) -> Iterator[RunningServer]:
    environment = {"HF_ENDPOINT": hub.url, "HF_HOME": str(home / "hf-home"), "HF_HUB_DISABLE_XET": "1",
                   "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_OFFLINE": "0",
                   "FIRESIDE_MODELS_DIR": str(home / "models"), "FIRESIDE_CONFIG_DIR": str(home / "config")}
    unset = dict.fromkeys(("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_CACHE"))
    running = start_server("--model", str(model_path), "--alias", "tiny",
                           "--model", str(model_path), "--alias", "qwen3", "--chat-template", str(QWEN3),
                           "--model", str(model_path), "--alias", "r1", "--chat-template", str(R1),
                           "--ctx-size", "512", "--parallel", "1", env={**environment, **unset})
    yield running
    stop_server(running)


@pytest.fixture
def client(ollama_server) -> ollama.Client:
    return ollama.Client(host=ollama_server.base_url, timeout=120)


def loaded(client: ollama.Client) -> set[str]:
    return {model.model for model in client.ps().models}


def wait_until_unloaded(client: ollama.Client, name: str) -> None:
    deadline = time.monotonic() + 10
    while name in loaded(client):
        assert time.monotonic() < deadline, f"{name} is still loaded"
        time.sleep(0.1)


def test_think_comes_back_as_thinking(client) -> None:
    opened = client.chat(model="r1", messages=ASK, think=True, options=GREEDY)
    assert opened.message.thinking and opened.message.content == ""  # R1's prompt opens <think>
    streamed = list(client.chat(model="r1", messages=ASK, think=True, options=GREEDY, stream=True))
    assert "".join(part.message.thinking or "" for part in streamed) == opened.message.thinking
    generated = client.generate(model="r1", prompt="Why is the sky blue?", think=True, options=GREEDY)
    assert generated.thinking == opened.message.thinking and generated.response == ""
    off = client.chat(model="qwen3", messages=ASK, think=False, options=GREEDY)
    assert off.message.thinking is None and off.message.content
    high = client.chat(model="qwen3", messages=ASK, think="high", options=GREEDY)
    assert high.done is True
    with pytest.raises(ollama.ResponseError) as refused:
        client.chat(model="qwen3", messages=ASK, think="max", options=GREEDY)
    assert refused.value.status_code == 400 and "think is true, false or one of low" in refused.value.error


def test_keep_alive_zero_unloads_and_an_empty_request_loads(client) -> None:
    assert "tiny" in loaded(client)
    answer = client.chat(model="tiny", messages=ASK, options=GREEDY, keep_alive=0)
    assert answer.done is True
    wait_until_unloaded(client, "tiny")
    before = time.time()
    load = client.generate(model="tiny", prompt="", keep_alive="5m")
    assert (load.done, load.done_reason, load.response) == (True, "load", "")
    [running] = [model for model in client.ps().models if model.model == "tiny"]
    after = time.time()
    # 5 minutes after its last use, which was the load between `before` and `after` (however long the
    # steps took on this machine); a second either side for the clocks' conversion and the rounding
    assert before + 300 - 1 <= running.expires_at.timestamp() <= after + 300 + 1
    unload = client.chat(model="tiny", messages=[], keep_alive=0)
    assert (unload.done, unload.done_reason) == (True, "unload")
    assert "tiny" not in loaded(client)
    again = client.chat(model="tiny", messages=ASK, options=GREEDY)  # loads again, with its own keep-alive
    assert again.load_duration > 1_000_000 and again.message.content
    [running] = [model for model in client.ps().models if model.model == "tiny"]
    assert running.expires_at.year == 9999


def test_pull_streams_progress_then_serves_and_delete_removes(client, ollama_server, home) -> None:
    name = "hf.co/acme/Tiny-GGUF:Q4_K_M"
    progress = list(client.pull(name, stream=True))
    statuses = [part.status for part in progress]
    assert statuses[0] == "pulling manifest" and statuses[-3:] == ["verifying sha256 digest", "writing manifest",
                                                                   "success"]
    downloads = progress[1:-3]
    assert downloads and {part.status for part in downloads} == {f"pulling {HubFile(TINY).sha256[:12]}"}
    assert {part.digest for part in downloads} == {f"sha256:{HubFile(TINY).sha256}"}
    assert {part.total for part in downloads} == {len(TINY)} and downloads[-1].completed == len(TINY)
    path = home / "models" / "acme" / "Tiny-GGUF" / "Tiny-Q4_K_M.gguf"
    assert path.read_bytes() == TINY
    names = {model.model for model in client.list().models}
    assert names == {"tiny", "qwen3", "r1", "tiny-q4_k_m"}
    assert client.show(name).modified_at is not None  # served under the name it was pulled as
    assert client.pull(name, stream=False).status == "success"  # again: the file is in place
    with pytest.raises(ollama.ResponseError) as library:
        client.pull("llama3.2")
    assert library.value.status_code == 400 and "not a Hugging Face repo" in library.value.error
    with pytest.raises(ollama.ResponseError) as mine:
        client.delete("tiny")
    assert mine.value.status_code == 400 and "given on the command line" in mine.value.error
    assert client.delete("tiny-q4_k_m").status == "success"
    assert not path.exists()
    assert {model.model for model in client.list().models} == {"tiny", "qwen3", "r1"}
    assert "tiny-q4_k_m" not in (home / "config" / "config.toml").read_text()
    gone = httpx.request("DELETE", f"{ollama_server.base_url}/api/delete", json={"model": "tiny-q4_k_m"})
    assert gone.status_code == 404 and gone.json() == {"error": "model 'tiny-q4_k_m' not found"}
