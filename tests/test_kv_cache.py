"""`--cache-type`: the KV cache's element type, its size in `/metrics` and `fireside doctor`."""

from __future__ import annotations

import subprocess

import httpx
import pytest

from app.settings.config import ConfigError, load_config
from backends.kv_cache import kv_size
from backends.llama_model import LlamaModel, ModelOptions
from tests.conftest import FIRESIDE, start_server, stop_server


def _gauge(text: str, name: str) -> float:
    line, = [line for line in text.splitlines() if line.startswith(name + "{")]
    return float(line.rsplit(" ", 1)[1])


def test_quantized_caches_take_what_their_blocks_take(model_path):
    model = LlamaModel(model_path, ModelOptions())
    try:
        f16, q8, q4 = (kv_size(model, 1000, kind) for kind in ("f16", "q8_0", "q4_0"))
    finally:
        model.close()
    # SmolLM2-135M: 30 layers, 3 KV heads of 64 values, a key and a value each, 2 bytes in f16
    assert f16.bytes == 1000 * 2 * 30 * 3 * 64 * 2
    assert q8.bytes / f16.bytes == pytest.approx(34 / 64) and q4.bytes / f16.bytes == pytest.approx(18 / 64)


def test_a_q4_cache_serves_and_reports_its_size(model_path):
    # its own server: the KV gauges must hold this one request's cache and nothing else
    server = start_server("--model", str(model_path), "--cache-type", "q4_0", "--ctx-size", "512", "--parallel", "2")
    try:
        answer = httpx.post(f"{server.v1}/completions", timeout=120, json={
            "model": server.model, "prompt": "The capital of France is", "max_tokens": 5, "temperature": 0})
        assert answer.status_code == 200 and answer.json()["choices"][0]["text"]
        metrics = httpx.get(f"{server.base_url}/metrics", timeout=10).text
        doctor = subprocess.run([str(FIRESIDE), "doctor", "--port", server.base_url.rsplit(":", 1)[1]],
                                capture_output=True, text=True, timeout=120, check=True).stdout
    finally:
        stop_server(server)
    model = LlamaModel(model_path, ModelOptions())
    try:
        whole, cell = kv_size(model, 1024, "q4_0"), kv_size(model, 1, "q4_0").bytes_per_cell
    finally:
        model.close()
    assert _gauge(metrics, "fireside_kv_cache_bytes") == whole.bytes
    usage = answer.json()["usage"]
    held = usage["prompt_tokens"] + usage["completion_tokens"] - 1  # the last token is never decoded
    assert _gauge(metrics, "fireside_kv_cache_used_bytes") == round(held * cell)
    assert f"KV cache of {server.model}: " in doctor and f"of {whole.bytes / (1 << 20):.1f} MiB" in doctor


def test_a_config_cache_type_is_checked(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[[models]]\nid = "a"\nfile = "/models/a.gguf"\ncache_type = "q8_0"\n')
    assert load_config(config).models[0].cache_type == "q8_0"
    config.write_text('[[models]]\nid = "a"\nfile = "/models/a.gguf"\ncache_type = "q5_1"\n')
    with pytest.raises(ConfigError, match="cache_type is one of f16, q8_0, q4_0"):
        load_config(config)
