"""The fit with real inputs (issue 35, item 2): the default model's tensor table read through ggml's
GGUF reader, the plan applied to real loads, `/health` and `fireside doctor --model`.

No GPU here: an RPC worker on loopback is the offload device (a ggml device of its own), and
`--gpu-memory` gives it the size of a small card, so the fit has to move experts or layers to this
machine's CPU. Where a load put each layer and tensor is llama.cpp's own account
(`LlamaModel.layer_devices`, `.overridden`), compared with the plan; the answers are compared with
a plain CPU load of the same file. Expected numbers are worked out by hand in the comments.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from backends.adapters import BARE
from backends.fit import GIB, FitSettings, Room, plan
from backends.fit_inputs import plan_load
from backends.llama_model import LlamaModel, ModelLoadError, ModelOptions
from backends.model_shape import read_model_shape
from backends.registry import default_model_path
from tests.test_lora_adapters import greedy
from tests.test_tensor_placement import moe  # noqa: F401 - the tiny MoE fixture

# SmolLM2-135M-Instruct Q4_1 (llama, 30 blocks, n_embd 576, n_ff 1536, 9 heads, 3 KV heads, vocabulary
# 49152). A block: attn_q and attn_output 576x576, attn_k and attn_v 576x192, three FFN matrices
# 576x1536, all Q4_1 (20 bytes per 32 weights): 2,211,840, and two f32 norms: 4,608.
LAYER_BYTES = 2_216_448
KV_VALUES = 3 * (64 + 64)  # per token and block: 768 bytes in f16
# The output head is tied to token_embd (576x49152 Q8_0, 30,081,024) and output_norm (2,304).
OUTPUT_BYTES = 30_083_328


def test_the_default_model_shape_matches_the_gguf_package():
    gguf = pytest.importorskip("gguf")
    shape = read_model_shape(default_model_path())
    reader = gguf.GGUFReader(default_model_path())
    per_block: dict[int, int] = defaultdict(int)
    sizes = {}
    for tensor in reader.tensors:
        sizes[tensor.name] = int(tensor.n_bytes)
        if match := re.match(r"blk\.(\d+)\.", tensor.name):
            per_block[int(match[1])] += int(tensor.n_bytes)
    assert shape.tensors == sizes
    assert shape.n_layer == 30
    assert shape.layer_bytes == tuple(per_block[i] for i in range(30)) == (LAYER_BYTES,) * 30
    assert shape.tied_output and shape.output_bytes == OUTPUT_BYTES
    assert shape.kv_values_per_token == (KV_VALUES,) * 30
    assert (shape.n_embd, shape.n_ff, shape.n_vocab, shape.n_ctx_train, shape.n_expert) == (576, 1536, 49152, 8192, 0)


def test_the_default_model_on_a_made_up_card():
    # A 1.2 GiB card: 1,288,490,188 free, 214,748,364 after the 1 GiB margin. Beside the head
    # (30,083,328), the activations (4 * 512 * (4 * 576 + 2 * 1536) = 11,010,048) and the logits
    # (4 * 512 * 49152 = 100,663,296), 72,991,692 are left for blocks.
    # 4 slots of 4096 tokens: a block with its cache takes 2,216,448 + 768 * 16384 = 14,799,360: 4 fit
    # (the last 4, 26-29), and with the head that is 5 layers. One slot of 4096: 2,216,448 + 3,145,728
    # = 5,362,176 a block: 13 fit, 14 layers.
    card = [Room("CUDA0", int(1.2 * GIB))]
    four_slots = plan_load(default_model_path(), card, gpu_layers="auto", ctx_size=4096, parallel=4, cache_type="f16")
    assert four_slots.gpu_layers == 5 and four_slots.devices[0].blocks == (26, 27, 28, 29)
    # ctx_size 0: the model's training context (8192), at most 4096 tokens per slot
    assert plan_load(default_model_path(), card, gpu_layers="auto", ctx_size=0, parallel=4,
                     cache_type="f16").gpu_layers == 5
    assert plan_load(default_model_path(), card, gpu_layers="auto", ctx_size=4096, parallel=1,
                     cache_type="f16").gpu_layers == 14
    big = plan_load(default_model_path(), [Room("CUDA0", 24 * GIB)], gpu_layers="auto", ctx_size=4096,
                    parallel=4, cache_type="f16")
    assert big.gpu_layers == 31 and big.reason.startswith("everything fits")


def test_an_unreadable_file_has_no_plan_and_loads_as_configured(tmp_path):
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"not a gguf file at all")
    from backends.ggml_native import GgufError

    with pytest.raises(GgufError):
        plan_load(garbage, [Room("CUDA0", GIB)], gpu_layers="auto", ctx_size=0, parallel=1, cache_type="f16")


# --- the tiny MoE on an RPC worker sized as a small card ------------------------------------------
#
# tests/fixtures/make_tiny_moe.py: 4 blocks; a block's shared tensors 50,688 bytes and its experts
# 393,216 (three 4x128x64 stacks in f32... as the file holds them: 131,072 each); the head (tied to the
# 49152x64 f32 embedding) 12,583,168. At 256 tokens, one slot: 64 KV values * 2 bytes * 256 = 32,768 a
# block. Activations 4 * 512 * (4 * 64 + 2 * 256) = 1,572,864; logits 4 * 512 * 49152 = 100,663,296.
# Everything on the worker: 4 * (50,688 + 393,216 + 32,768) + 12,583,168 + 1,572,864 + 100,663,296
# = 116,726,016. The worker's free memory is this machine's, so --gpu-memory decides:
#   116,000,000: one block's experts moved (116,332,800) is still too much, two (115,939,584) fit;
#   115,100,000: with every expert moved it takes 115,153,152, still too much; without block 0's
#   layer (83,456 less): 115,069,696 fits: blocks 1-3 and the head, 4 layers.
EXPERTS_OF_TWO = 116_000_000
LAYERS_OF_THREE = 115_100_000
TOKENS_AT = {"ctx_size": 256, "parallel": 1, "cache_type": "f16"}


@pytest.fixture(scope="module")
def worker() -> Iterator[tuple[str, tuple[int, ...]]]:
    """A `fireside worker` and its devices (held for the module)."""
    from backends.rpc import CONNECTIONS
    from backends.rpc_endpoint import Endpoint
    from tests.servers import stop_process
    from tests.test_rpc import start_worker

    process = start_worker()
    endpoint = Endpoint("127.0.0.1", process.port)
    spellings = CONNECTIONS.hold((endpoint,))
    try:
        yield str(endpoint), tuple(CONNECTIONS.devices((endpoint,)))
    finally:
        CONNECTIONS.release(spellings)
        stop_process(process.process)


def _load(path: Path, **options) -> tuple[list[int], LlamaModel]:
    model = LlamaModel(path, ModelOptions(**options))
    try:
        return greedy(model, BARE), model
    finally:
        model.close()


@pytest.mark.parametrize(("cap", "gpu_layers", "expert_blocks", "worker_blocks"), [
    (EXPERTS_OF_TWO, 5, 2, (0, 1, 2, 3)), (LAYERS_OF_THREE, 4, 4, (1, 2, 3)),
])
def test_the_plan_is_what_llama_cpp_loads_and_answers_as_the_cpu(moe: Path, worker, cap, gpu_layers, expert_blocks,  # noqa: F811
                                                                 worker_blocks) -> None:
    from backends.fit_inputs import FitLimits, offload_rooms

    _, devices = worker
    rooms = offload_rooms(devices)
    placed = plan_load(moe, rooms, gpu_layers="auto", limits=FitLimits(gpu_memory=cap), **TOKENS_AT)
    assert (placed.gpu_layers, placed.cpu_expert_blocks) == (gpu_layers, expert_blocks)
    (device,) = placed.devices
    assert device.blocks == worker_blocks and device.output and device.total <= cap
    plain, _ = _load(moe)
    tokens, model = _load(moe, gpu_layers=placed.gpu_layers, devices=devices, tensor_overrides=placed.overrides)
    assert tokens == plain
    # llama.cpp's own account of the load agrees with the plan, layer by layer and tensor by tensor
    assert {layer for layer, name in model.layer_devices.items() if name == device.device} == {*worker_blocks, 4}
    assert {layer for layer, name in model.layer_devices.items() if name == "CPU"} == set(range(4)) - set(worker_blocks)
    moved = {f"blk.{b}.ffn_{kind}_exps.weight" for b in range(expert_blocks) for kind in ("gate", "up", "down")}
    moved_by_override = {tensor for tensor, buffer in model.overridden.items() if buffer == "CPU"}
    assert moved_by_override == moved


def test_served_the_plan_is_on_health_and_the_answer_is_the_cpus(moe: Path, worker) -> None:  # noqa: F811
    """`fireside serve --model MOE --rpc WORKER --gpu-memory 116000000`: the experts of blocks 0 and 1
    stay on this machine; /health shows the plan, and a greedy completion equals the plain load's."""
    from tests.servers import start_server, stop_server
    from tests.test_lora_adapters import PROMPT, TOKENS

    endpoint, _ = worker
    plain, _ = _load(moe)
    server = start_server("--model", str(moe), "--rpc", endpoint, "--gpu-memory", str(EXPERTS_OF_TWO),
                          "--parallel", "1", "--ctx-size", "256")
    try:
        line = server.output.wait_for(lambda text: text.startswith("serving tiny-moe "))
        assert line is not None and "the expert tensors of blocks 0-1 stay in system memory" in line
        body = httpx.post(f"{server.v1}/completions", timeout=60, json={
            "model": "tiny-moe", "prompt": PROMPT, "max_tokens": TOKENS, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True}).json()
        assert body["choices"][0]["token_ids"] == plain
        (model,) = server.health()["models"]
        placement = model["placement"]
        assert (placement["gpu_layers"], placement["cpu_expert_blocks"]) == (5, 2)
        (device,) = placement["devices"]
        assert device["blocks"] == [0, 1, 2, 3] and device["expert_blocks"] == [2, 3] and device["output"]
        assert device["total_bytes"] <= device["budget_bytes"] == EXPERTS_OF_TWO
        assert placement["host"]["expert_blocks"] == [0, 1]
        assert model["tensors_by_override"] == {"CPU": 6}  # llama.cpp's account: 2 blocks x 3 expert tensors
    finally:
        stop_server(server)


def test_a_number_of_layers_that_cannot_fit_is_refused_before_loading(moe: Path, worker) -> None:  # noqa: F811
    from backends.engine import EngineOptions
    from backends.registry import ModelRegistry, ModelSpec
    from backends.rpc_endpoint import Endpoint

    endpoint, _ = worker
    spec = ModelSpec(moe, "moe", gpu_layers=-1, rpc=(Endpoint.parse(endpoint),))
    from backends.fit_inputs import FitLimits

    with pytest.raises(ModelLoadError) as refused:
        ModelRegistry.load([spec], ModelOptions(), EngineOptions(ctx_size=256, parallel=1, threads=1),
                           fit_limits=FitLimits(gpu_memory=100_000_000))
    # all 5 layers take 116,726,016 (above): more than the 100,000,000 the worker may take
    assert re.search(r"moe does not fit: RPC\S* would take 111 MiB \(.*\) but 95 MiB is available", str(refused.value))


def test_doctor_prints_the_plan_for_a_model(moe: Path, worker, capsys) -> None:  # noqa: F811
    from app.cli import main

    endpoint, _ = worker
    assert main(["doctor", "--model", str(moe), "--rpc", endpoint, "--gpu-memory", str(EXPERTS_OF_TWO),
                 "--parallel", "1", "--ctx-size", "256"]) == 0
    text = capsys.readouterr().out
    plan_lines = text[text.index("plan for "):].splitlines()
    assert plan_lines[1] == "  the expert tensors of blocks 0-1 stay in system memory; everything else is on the GPU"
    assert re.match(r"  RPC\S*: the layers of every block \(0-3\), the experts of blocks 2-3, the output head; "
                    r"\d+ MiB \(.*\) of 111 MiB usable$", plan_lines[2])
    assert plan_lines[3].startswith("  system memory: the experts of blocks 0-1, the token embedding; ")
    assert main(["doctor", "--json", "--model", str(moe), "--parallel", "1", "--ctx-size", "256"]) == 0
    report = json.loads(capsys.readouterr().out)
    alone = report["model_plan"]
    assert alone["devices"] == [] and alone["placement"]["gpu_layers"] == 0  # no GPU here without --rpc
    assert alone["lines"][0] == "no GPU to offload to: everything in system memory"
    assert alone["placement"]["host"]["blocks"] == [0, 1, 2, 3] and alone["placement"]["host"]["output"]


def test_plan_of_a_dense_model_never_moves_experts():
    shape = read_model_shape(default_model_path())
    placed = plan(shape, [Room("CUDA0", int(1.2 * GIB))], FitSettings(ctx_tokens=16384))
    assert placed.cpu_expert_blocks == 0 and placed.overrides == ()


def test_gpu_memory_from_the_command_line_or_the_config(tmp_path):
    import argparse

    from app.cli.placement_options import add_placement_options
    from app.cli.serving import gpu_memory
    from app.settings.config import ConfigError, load_config

    config_file = tmp_path / "config.toml"
    config_file.write_text('gpu_memory = "6GiB"\n')
    config = load_config(config_file)
    assert config.gpu_memory == 6 * GIB
    parser = argparse.ArgumentParser()
    add_placement_options(parser)
    assert gpu_memory(parser.parse_args([]), config) == 6 * GIB
    assert gpu_memory(parser.parse_args(["--gpu-memory", "900MiB"]), config) == 900 << 20
    assert parser.parse_args([]).gpu_layers == "auto"  # the fit is the default
    with pytest.raises(SystemExit):
        parser.parse_args(["--gpu-memory", "lots"])
    config_file.write_text('gpu_memory = "lots"\n')
    with pytest.raises(ConfigError, match=r"config.toml:1: gpu_memory"):
        load_config(config_file)


def test_a_draft_models_weights_and_cache_are_kept_free(moe: Path) -> None:  # noqa: F811
    # The default model as the tiny MoE's draft (they share SmolLM2's vocabulary): its tensors, and
    # its cache for the same 256 tokens (30 blocks x 768 bytes a token), come off the worker's budget.
    from backends.fit_inputs import FitLimits

    draft = default_model_path()
    room = [Room("RPC0", 200 * 1024 * 1024)]
    alone = plan_load(moe, room, gpu_layers="auto", limits=FitLimits(gpu_memory=EXPERTS_OF_TWO + 1, margin=0),
                      **TOKENS_AT)
    beside = plan_load(moe, room, gpu_layers="auto", limits=FitLimits(gpu_memory=EXPERTS_OF_TWO + 1,
                                                                       margin=0), draft=draft, **TOKENS_AT)
    assert alone.devices[0].budget == EXPERTS_OF_TWO + 1
    weights = sum(read_model_shape(draft).tensors.values())
    assert beside.devices[0].budget == 200 * 1024 * 1024 - weights - 256 * 30 * 768
