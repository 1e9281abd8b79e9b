"""The `fireside serve` command: start-up, model ids, and one-line errors for bad model files."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from tests.conftest import FIRESIDE, start_server, stop_server


def run_fireside(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(FIRESIDE), *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("content", [None, b"", b"GGUF" + b"\x00" * 64, b"not a model at all" * 100])
def test_missing_or_broken_model_is_one_line_and_exit_1(tmp_path, content):
    path = tmp_path / "model.gguf"
    if content is not None:
        path.write_bytes(content)
    result = run_fireside("serve", "--model", str(path), "--port", "1")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("fireside: ") and str(path) in lines[0]
    assert "Traceback" not in result.stderr + result.stdout


def test_more_aliases_than_models_is_an_error(model_path):
    result = run_fireside("serve", "--model", str(model_path), "--alias", "a", "--alias", "b")
    assert result.returncode == 2 and "--alias given twice for one --model" in result.stderr


def test_serve_prints_where_it_listens_and_what_it_serves(model_path):
    server = start_server("--model", str(model_path), "--ctx-size", "256", "--parallel", "1")
    try:
        assert server.model == model_path.stem
        assert httpx.get(f"{server.v1}/models").json()["data"][0]["context_length"] == 256
    finally:
        stop_server(server)
    output = server.process.stdout.read()
    assert f"listening on {server.base_url}" in output
    assert f"serving {model_path.stem} from {model_path}" in output


def test_several_models_with_aliases(model_path):
    server = start_server("--model", str(model_path), "--alias", "small",
                          "--model", str(model_path), "--alias", "tiny",
                          "--ctx-size", "256", "--parallel", "1")
    try:
        ids = [m["id"] for m in httpx.get(f"{server.v1}/models").json()["data"]]
        assert ids == ["small", "tiny"]
        for model in ids:
            response = httpx.post(f"{server.v1}/completions", json={"model": model, "prompt": "Hi", "max_tokens": 2})
            assert response.status_code == 200 and response.json()["model"] == model
        assert httpx.post(f"{server.v1}/completions", json={"model": model_path.stem, "prompt": "Hi"}).status_code == 404
        # a model can also be named by its file's path
        by_path = httpx.post(f"{server.v1}/completions", json={"model": str(model_path), "prompt": "Hi", "max_tokens": 1})
        assert by_path.status_code == 200
    finally:
        stop_server(server)


def test_two_models_with_the_same_id_is_an_error(model_path):
    result = run_fireside("serve", "--model", str(model_path), "--model", str(model_path))
    assert result.returncode == 1
    assert "--alias" in result.stderr


@pytest.mark.parametrize("mapped", [False, True])
def test_weights_are_read_into_memory_unless_mmap(model_path, mapped):
    server = start_server("--model", str(model_path), "--ctx-size", "256", "--parallel", "1",
                          *(["--mmap"] if mapped else []))
    try:
        maps = Path(f"/proc/{server.process.pid}/maps").read_text()
        assert (str(model_path.resolve()) in maps) == mapped
    finally:
        stop_server(server)
