"""Tensor placement beside `gpu_layers` (issue 35, item 1): `--cpu-moe`, `--n-cpu-moe N` and
`--override-tensor REGEX=DEVICE`, through llama.cpp's `tensor_buft_overrides`.

The model is a tiny mixture-of-experts GGUF the tests write (`tests/fixtures/make_tiny_moe.py`).
Where each tensor landed is llama.cpp's own account (`LlamaModel.overridden`, read from its load
log). Oracle: the same model loaded plainly on the CPU; an RPC worker on loopback stands in for a
GPU (a ggml device with its own memory), so the experts kept local are really apart from the rest.
"""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest

from app.settings.config import ConfigError, load_config
from backends.adapters import BARE
from backends.llama_model import LlamaModel, ModelLoadError, ModelOptions
from backends.tensor_placement import (
    EXPERT_TENSORS,
    TensorOverride,
    expert_overrides,
    matches,
    parse_overrides,
)
from tests.built import built
from tests.fixtures.make_tiny_moe import N_LAYER, make_tiny_moe
from tests.test_lora_adapters import greedy

EXPERTS = {f"blk.{block}.ffn_{kind}_exps.weight" for block in range(N_LAYER) for kind in ("gate", "up", "down")}


@pytest.fixture(scope="module")
def moe() -> Path:
    """Built once and cached (`tests.built`): reading SmolLM2's tokenizer takes seconds."""
    import tests.fixtures.make_tiny_qwen2vl as tokenizer_source
    from backends.registry import default_model_path

    return built("tiny-moe", make_tiny_moe, default_model_path(), Path(tokenizer_source.__file__)) / "tiny-moe.gguf"


def answer(path: Path, **options) -> tuple[list[int], dict[str, str]]:
    """Greedy tokens of the chat prompt, and the tensors an override placed (with their buffer types)."""
    model = LlamaModel(path, ModelOptions(**options))
    try:
        return greedy(model, BARE), model.overridden
    finally:
        model.close()


def test_the_overrides_read_as_llama_server_writes_them() -> None:
    assert parse_overrides(r"blk\.1\.=CPU, \.ffn_up_exps=CUDA0") == (
        TensorOverride(r"blk\.1\.", "CPU"), TensorOverride(r"\.ffn_up_exps", "CUDA0"))
    assert parse_overrides("a=b=RPC0[127.0.0.1:50052]") == (TensorOverride("a=b", "RPC0[127.0.0.1:50052]"),)
    for bad, complaint in (("blk.1", "is not REGEX=DEVICE"), ("=CPU", "is not REGEX=DEVICE"),
                           ("blk[=CPU", "is not a regular expression")):
        with pytest.raises(ValueError, match=complaint):
            parse_overrides(bad)
    assert expert_overrides(cpu_moe=True) == (TensorOverride(EXPERT_TENSORS, "CPU"),)
    blocks = expert_overrides(n_cpu_moe=2)
    assert [matches(blocks, f"blk.{b}.ffn_{k}_exps.weight") for b in (0, 1, 2) for k in ("up", "gate_up")] == [
        "CPU", "CPU", "CPU", "CPU", None, None]
    assert matches(blocks, "blk.0.ffn_up.weight") is None and matches(blocks, "blk.10.ffn_up_exps.weight") is None


def test_each_placement_answers_as_the_plain_load(moe: Path) -> None:
    plain, none = answer(moe)
    assert none == {} and len(set(plain)) > 3  # an answer that varies: the comparisons below can fail
    tokens, placed = answer(moe, tensor_overrides=expert_overrides(cpu_moe=True))
    assert (tokens, placed) == (plain, dict.fromkeys(EXPERTS, "CPU"))
    tokens, placed = answer(moe, tensor_overrides=expert_overrides(n_cpu_moe=2))
    assert tokens == plain and set(placed) == {name for name in EXPERTS if name.startswith(("blk.0.", "blk.1."))}
    tokens, placed = answer(moe, tensor_overrides=parse_overrides(r"blk\.3\.attn=CPU"))
    assert tokens == plain and set(placed) == {f"blk.3.attn_{t}.weight" for t in ("q", "k", "v", "output", "norm")}


def test_an_unknown_device_is_refused_naming_what_there_is(moe: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"override \\\.ffn_up_exps=CUDA0: this machine has no buffer type "
                                             r"'CUDA0' \(it has: .*CPU"):
        LlamaModel(moe, ModelOptions(tensor_overrides=parse_overrides(r"\.ffn_up_exps=CUDA0")))


def test_experts_stay_local_while_the_rest_goes_to_a_worker(moe: Path) -> None:
    """An RPC worker as the GPU: every layer offloaded to it, the experts kept on this machine's
    CPU; the answer is the plain load's."""
    from backends.rpc import CONNECTIONS
    from backends.rpc_endpoint import Endpoint
    from tests.servers import stop_process
    from tests.test_rpc import start_worker

    plain, _ = answer(moe)
    worker = start_worker()
    try:
        endpoint = Endpoint("127.0.0.1", worker.port)
        spellings = CONNECTIONS.hold((endpoint,))
        try:
            devices = tuple(CONNECTIONS.devices((endpoint,)))
            tokens, placed = answer(moe, gpu_layers=-1, devices=devices, tensor_overrides=expert_overrides(cpu_moe=True))
            rest, none = answer(moe, gpu_layers=-1, devices=devices)
        finally:
            CONNECTIONS.release(spellings)
    finally:
        stop_process(worker.process)
    assert placed == dict.fromkeys(EXPERTS, "CPU") and none == {}
    assert tokens == plain and rest == plain


def test_a_dense_model_given_moe_options_warns_in_one_line(caplog) -> None:
    from backends.engine import EngineOptions
    from backends.registry import ModelRegistry, ModelSpec, default_model_path

    caplog.set_level(logging.WARNING, logger="fireside.registry")
    spec = ModelSpec(default_model_path(), "dense", tensor_overrides=expert_overrides(cpu_moe=True))
    registry = ModelRegistry.load([spec], ModelOptions(), EngineOptions(ctx_size=256, parallel=1, threads=1))
    registry.close()
    assert [r.getMessage() for r in caplog.records] == [
        "dense is not a mixture-of-experts model: --cpu-moe and --n-cpu-moe move nothing"]


@pytest.mark.parametrize(("lines", "placed"), [
    (["cpu_moe = true"], (TensorOverride(EXPERT_TENSORS, "CPU"),)),
    (["n_cpu_moe = 1", 'override_tensor = ["attn=CPU", "ffn_norm=CPU"]'],
     (TensorOverride(rf"blk\.0{EXPERT_TENSORS}", "CPU"), TensorOverride("attn", "CPU"), TensorOverride("ffn_norm", "CPU"))),
    (['override_tensor = "a=CPU,b=CPU"'], (TensorOverride("a", "CPU"), TensorOverride("b", "CPU"))),
])
def test_the_config_places_tensors_per_model(tmp_path: Path, lines: list[str], placed: tuple) -> None:
    config = tmp_path / "config.toml"
    config.write_text("\n".join(["[[models]]", 'id = "m"', 'file = "m.gguf"', *lines, ""]))
    assert load_config(config).models[0].tensor_overrides == placed


@pytest.mark.parametrize(("line", "complaint"), [
    ('cpu_moe = "yes"', "models[0].cpu_moe: cpu_moe is true or false"),
    ("n_cpu_moe = -1", "models[0].n_cpu_moe: n_cpu_moe is a number of blocks"),
    ('override_tensor = ["nothing"]', "models[0].override_tensor: 'nothing' is not REGEX=DEVICE"),
])
def test_a_wrong_placement_key_names_itself(tmp_path: Path, line: str, complaint: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'[[models]]\nid = "m"\nfile = "m.gguf"\n{line}\n')
    with pytest.raises(ConfigError) as error:
        load_config(config)
    assert complaint in str(error.value)


def test_served_with_experts_local_and_layers_on_a_worker_it_answers_as_the_plain_load(moe: Path) -> None:
    """End to end: `fireside serve --model MOE --rpc WORKER --cpu-moe`; the start line says where
    the tensors went, and a greedy completion equals the plain load's tokens."""
    from tests.servers import start_server, stop_process, stop_server
    from tests.test_lora_adapters import PROMPT, TOKENS
    from tests.test_rpc import start_worker

    plain, _ = answer(moe)
    worker = start_worker()
    try:
        server = start_server("--model", str(moe), "--rpc", f"127.0.0.1:{worker.port}", "--cpu-moe",
                              "--parallel", "1", "--ctx-size", "256")
        try:
            line = server.output.wait_for(lambda text: text.startswith("serving tiny-moe "))
            assert line is not None and f"layers on RPC workers 127.0.0.1:{worker.port}" in line
            assert line.rstrip().endswith("tensors placed by override: 12 on CPU)")
            body = httpx.post(f"{server.v1}/completions", timeout=60, json={
                "model": "tiny-moe", "prompt": PROMPT, "max_tokens": TOKENS, "temperature": 0, "ignore_eos": True,
                "return_token_ids": True}).json()
            assert body["choices"][0]["token_ids"] == plain
            (model,) = server.health()["models"]
            assert model["tensors_by_override"] == {"CPU": 12}
        finally:
            stop_server(server)
    finally:
        stop_process(worker.process)
