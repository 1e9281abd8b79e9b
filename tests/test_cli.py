"""The `fireside serve` command: start-up, model ids, and one-line errors for bad model files.
The servers here are its smoke tests: what a real `fireside serve` process prints and maps. The
refusals run in this process (tests/cli_runner.py), one of them also as a real `fireside` process;
a fresh process checks that the commands that load no model import neither the engine nor llama.cpp."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.cli_runner import CliResult, run_cli
from tests.conftest import FIRESIDE, free_port, start_server, stop_server


def run_fireside(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(FIRESIDE), *args], capture_output=True, text=True, timeout=60, check=False)


def assert_one_line_refusal(result: CliResult | subprocess.CompletedProcess[str], path: Path) -> None:
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("fireside: ") and str(path) in lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    assert "listening on" not in result.stdout


@pytest.mark.parametrize("content", [None, b"", b"GGUF" + b"\x00" * 64, b"not a model at all" * 100])
def test_missing_or_broken_model_is_one_line_and_exit_1(tmp_path, content):
    path = tmp_path / "model.gguf"
    if content is not None:
        path.write_bytes(content)
    assert_one_line_refusal(run_cli("serve", "--model", str(path), "--port", "1"), path)


def test_the_fireside_command_refuses_a_broken_model_in_one_line(tmp_path):
    """A real process on purpose (the smoke test of a refused `fireside serve`): the console
    script's exit status, and a stderr with nothing but the one line, llama.cpp's own output included."""
    path = tmp_path / "model.gguf"
    path.write_bytes(b"not a model at all" * 100)
    assert_one_line_refusal(run_fireside("serve", "--model", str(path), "--port", "1"), path)


def test_more_aliases_than_models_is_an_error(model_path):
    result = run_cli("serve", "--model", str(model_path), "--alias", "a", "--alias", "b")
    assert result.returncode == 2 and "--alias given twice for one --model" in result.stderr
    assert result.stderr.startswith("usage: fireside serve ")


# Each run of `app.cli.main`, in turn in one fresh process (this one has loaded everything already),
# and the heavy modules loaded after it: the engine, llama.cpp, Litestar. None of these runs needs one.
_LOADS = """
import json, sys
from app.cli import main
heavy = ("llama_cpp", "backends.engine", "litestar")
for argv in json.loads(sys.argv[1]):
    try:
        status = main(argv)
    except SystemExit as exit_:
        status = exit_.code
    loaded = sorted(m for m in sys.modules if m in heavy or m.startswith(tuple(h + "." for h in heavy)))
    print("\\nRUN " + json.dumps([status, loaded]), flush=True)
"""


def test_help_models_and_a_refused_serve_load_neither_the_engine_nor_llama_cpp(tmp_path):
    runs = [["--help"], ["models", "--port", "1"], ["serve", "--host", "0.0.0.0", "--port", "1"],
            ["serve", "--config", str(tmp_path / "broken.toml"), "--port", str(free_port())], ["config", "path"],
            ["rm", "nothing"], ["serve", "--bogus"]]
    (tmp_path / "broken.toml").write_text("[[models]]\nid =\n")
    env = {name: value for name, value in os.environ.items() if name != "FIRESIDE_API_KEY"}
    result = subprocess.run([sys.executable, "-c", _LOADS, json.dumps(runs)], capture_output=True, text=True,
                            timeout=60, env=env, cwd=Path(__file__).resolve().parents[1], check=False)
    assert result.returncode == 0, result.stderr
    found = [json.loads(line[4:]) for line in result.stdout.splitlines() if line.startswith("RUN ")]
    assert [status for status, _ in found] == [0, 0, 2, 1, 0, 1, 2], result.stderr
    assert [loaded for _, loaded in found] == [[]] * len(runs)
    assert "usage: fireside" in result.stdout and "loaded state unknown" in result.stdout
    assert "refusing to listen on 0.0.0.0" in result.stderr and "broken.toml:2: invalid TOML" in result.stderr


def test_serve_prints_where_it_listens_and_what_it_serves(model_path):
    server = start_server("--model", str(model_path), "--ctx-size", "256", "--parallel", "1")
    try:
        assert server.model == model_path.stem
        assert httpx.get(f"{server.v1}/models").json()["data"][0]["context_length"] == 256
    finally:
        stop_server(server)
    output = server.output.wait_closed()
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
    result = run_cli("serve", "--model", str(model_path), "--model", str(model_path))
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
