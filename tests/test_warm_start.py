"""A warm start: the slots' prompt caches (and the RAM prompt cache's entries) saved at shutdown
and read back on the next start (`backends/prompt_store.py`), on the real SmolLM2 behind real
servers of their own: each test stops and starts them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest

from backends.prompt_store import PromptStore, SavedPrompt, StoreOptions, store_key
from tests.conftest import start_server, stop_server

# About 200 tokens: well past the store's 32-token minimum, most of each prompt
SYSTEM = " ".join(f"Rule {i}: answer politely and briefly, in plain words, about the topic asked." for i in range(12))
ARGS = ("--ctx-size", "1024", "--parallel", "2", "--prompt-cache-disk", "64MiB")


def _ask(server, question: str) -> tuple[str, int, int]:
    body = {"model": server.model, "temperature": 0, "max_tokens": 8,
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]}
    response = httpx.post(f"{server.v1}/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    data = response.json()
    usage = data["usage"]
    return data["choices"][0]["message"]["content"], usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]


@pytest.fixture
def data_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("FIRESIDE_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


@pytest.mark.parametrize(("more", "said", "source"), [
    ((), "read from disk into the RAM prompt cache", "disk"),
    (("--cache-ram", "0"), "restored into the slots from disk", "slot"),  # no RAM cache: straight into a slot
])
def test_a_restart_keeps_the_prompt_cache_and_its_answers(data_dir, model_path, more, said, source):
    server = start_server("--model", str(model_path), *ARGS, *more)
    try:
        _, _, cold = _ask(server, "What is a cat?")
        second, prompt_tokens, warm = _ask(server, "What is a dog?")
    finally:
        stop_server(server)
    assert cold == 0 and warm > 0.8 * prompt_tokens  # the shared system prompt was reused
    saved, = (data_dir / "prompt-cache").glob("*.prompts")
    server = start_server("--model", str(model_path), *ARGS, *more)
    log = server.output
    try:
        again, tokens, restored = _ask(server, "What is a dog?")
        _, _, shared = _ask(server, "What is a horse?")
    finally:
        stop_server(server)
    assert log.wait_for(lambda line: said in line)
    assert log.wait_for(lambda line: f"cached_from={source}" in line)  # the request log says where they came from
    assert (again, tokens) == (second, prompt_tokens)  # the restored cache gives the same greedy answer
    assert restored == prompt_tokens - 1 and shared > 0.8 * prompt_tokens
    assert saved.exists()


def test_a_changed_model_file_starts_cold(data_dir, model_path, tmp_path):
    copy = tmp_path / "model.gguf"
    shutil.copyfile(model_path, copy)
    server = start_server("--model", str(copy), *ARGS)
    try:
        _ask(server, "What is a cat?")
    finally:
        stop_server(server)
    stat = copy.stat()
    os.utime(copy, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # as a new download would
    server = start_server("--model", str(copy), *ARGS)
    try:
        _, _, cached = _ask(server, "What is a cat?")
    finally:
        stop_server(server)
    assert cached == 0


def _prompt(tokens: int, state: int) -> SavedPrompt:
    return SavedPrompt(list(range(tokens)), [], None, "user-1", bytes(state))


def test_the_store_round_trips_and_keeps_within_its_bound(tmp_path):
    model = tmp_path / "a.gguf"
    model.write_bytes(b"model")
    options = StoreOptions(tmp_path / "cache", max_bytes=10_000)
    store = PromptStore(options, store_key(model, 1024))
    assert store.load() == []
    store.save([_prompt(100, 4000), _prompt(100, 4000), _prompt(100, 4000)])  # the third is past the bound
    assert store.load() == [_prompt(100, 4000), _prompt(100, 4000)]
    other = PromptStore(options, store_key(model, 2048))  # other settings: another file
    assert other.path != store.path and other.load() == []
    other.save([_prompt(100, 8000)])  # the folder is over its bound: the older file goes
    assert not store.path.exists() and other.load() == [_prompt(100, 8000)]
    other.path.write_bytes(b"not msgpack")
    assert other.load() == [] and not other.path.exists()  # unreadable: dropped, started cold
    before = store_key(model, 1024)
    model.write_bytes(b"another model")
    assert store_key(model, 1024) != before  # a changed model file never reads the old cache
