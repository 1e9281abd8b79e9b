"""`--gpu-layers auto` on the real default model's numbers. The GPUs here are mostly fakes:
made-up free memory handed to the pure fit (`layers_that_fit`), or a stand-in for
`gpu_free_memory` when going through `resolve_gpu_layers`; the one test on the real backend
registry holds on a CPU build and on a GPU build alike. The model's numbers are real: SmolLM2-135M's GGUF read through ggml's own
GGUF reader, and checked against the `gguf` package. The expected sizes and layer counts are worked
out by hand from the GGUF's metadata and tensor types (below), not by the module's own functions."""

from __future__ import annotations

import argparse
import re
from collections import defaultdict

import llama_cpp
import pytest

from backends import gpu_layers
from backends.gpu_layers import (
    GIB,
    compute_buffer_bytes,
    gpu_bytes,
    layers_that_fit,
    read_model_shape,
    resolve_gpu_layers,
)
from backends.registry import default_model_path
from backends.settings import parse_gpu_layers_option

CTX = 4096 * 4  # the engine's n_ctx: 4096 tokens per sequence, 4 slots

# SmolLM2-135M-Instruct Q4_1 by hand, from its GGUF (llama, 30 blocks, n_embd 576, n_ff 1536, 9 heads,
# 3 KV heads, vocabulary 49152):
# A block: attn_q and attn_output 576x576 (331,776 weights each), attn_k and attn_v 576x192 (110,592),
# ffn_gate, ffn_up and ffn_down 576x1536 (884,736), all Q4_1 (32 weights in 20 bytes):
# (2 * 331,776 + 2 * 110,592 + 3 * 884,736) * 20 / 32 = 2,211,840, and two f32 norms of 576: 4,608.
LAYER_BYTES = 2_216_448
# K and V of one token in one block: 3 KV heads of 64 (576 / 9), f16: 3 * (64 + 64) * 2 = 768 bytes;
# for CTX tokens: 768 * 16,384; for 4096 tokens: 768 * 4096.
KV_PER_TOKEN = 768
KV_AT_CTX = 12_582_912
KV_AT_4096 = 3_145_728
# The output head, tied to token_embd: 576x49152 in Q8_0 (32 weights in 34 bytes): 28,311,552 / 32 * 34
# = 30,081,024, and output_norm, 576 f32: 2,304.
OUTPUT_BYTES = 30_083_328
# The compute buffer estimate (module docstring): f32 activations of a 512-token micro-batch, 4 * 576 +
# 2 * 1536 wide, and its 49152 logits: 4 * 512 * (2,304 + 3,072 + 49,152).
COMPUTE_BYTES = 111_673_344
MARGIN = 1 << 30  # llama.cpp's --fit-target default: 1 GiB kept free on each device
# A fake GPU with 1.2 GiB free: int(1.2 * 2**30) = 1,288,490,188; less the margin and the compute buffer:
# 1,288,490,188 - 1,073,741,824 - 111,673,344 = 103,075,020 bytes for layers. At CTX a layer takes
# 2,216,448 + 12,582,912 = 14,799,360: 6 fit (88,796,160; 7 would take 103,595,520). At 4096 tokens
# a layer takes 2,216,448 + 3,145,728 = 5,362,176: 19 fit (101,881,344; 20 would take 107,243,520).
FITS_IN_1_2_GIB = 6
FITS_IN_1_2_GIB_AT_4096 = 19


def hand_cost(layers: int, kv_per_layer: int = KV_AT_CTX) -> int:
    """GPU bytes of offloading `layers` of SmolLM2-135M, from the numbers above."""
    if layers <= 0:
        return 0
    blocks = min(layers, 30)
    return blocks * (LAYER_BYTES + kv_per_layer) + (OUTPUT_BYTES if layers > 30 else 0) + COMPUTE_BYTES


@pytest.fixture(scope="module")
def shape() -> gpu_layers.ModelShape:
    return read_model_shape(default_model_path())


def test_the_default_model_shape_matches_the_gguf_package(shape):
    gguf = pytest.importorskip("gguf")
    reader = gguf.GGUFReader(default_model_path())
    per_block: dict[int, int] = defaultdict(int)
    sizes = {}
    for tensor in reader.tensors:
        sizes[tensor.name] = int(tensor.n_bytes)
        if match := re.match(r"blk\.(\d+)\.", tensor.name):
            per_block[int(match[1])] += int(tensor.n_bytes)
    assert shape.n_layer == 30
    assert shape.layer_bytes == tuple(per_block[i] for i in range(30)) == (LAYER_BYTES,) * 30
    # tied embeddings: offloading the output head copies token_embd to the GPU
    assert "output.weight" not in sizes
    assert shape.output_bytes == sizes["token_embd.weight"] + sizes["output_norm.weight"] == OUTPUT_BYTES
    assert shape.kv_bytes_per_token == (KV_PER_TOKEN,) * 30
    assert (shape.n_embd, shape.n_ff, shape.n_vocab, shape.n_ctx_train) == (576, 1536, 49152, 8192)


def test_everything_fits_on_a_big_fake_gpu(shape):
    assert layers_that_fit(shape, [8 * GIB], CTX) == shape.n_layer + 1  # all blocks and the output head


def test_some_layers_fit_exactly_as_far_as_the_memory_goes(shape):
    # free memory for `wanted` layers: 1 GiB margin + wanted * (2,216,448 + 12,582,912) + 111,673,344,
    # and for 31 the output head's 30,083,328 more
    needed = {1: 1_200_214_528, 10: 1_333_408_768, 29: 1_614_596_608, 30: 1_629_395_968, 31: 1_659_479_296}
    for wanted, free in needed.items():
        assert free == MARGIN + hand_cost(wanted)
        assert layers_that_fit(shape, [free], CTX) == wanted
        assert layers_that_fit(shape, [free - 1], CTX) == wanted - 1
    assert layers_that_fit(shape, [int(1.2 * GIB)], CTX) == FITS_IN_1_2_GIB
    assert layers_that_fit(shape, [int(1.2 * GIB)], 4096) == FITS_IN_1_2_GIB_AT_4096  # a smaller context


def test_the_offloaded_layers_cost_weights_kv_cache_output_and_compute(shape):
    assert compute_buffer_bytes(shape) == COMPUTE_BYTES
    assert gpu_bytes(shape, 0, CTX) == 0
    # one block: 2,216,448 + 12,582,912 + 111,673,344
    assert gpu_bytes(shape, 1, CTX) == 126_472_704
    # all 30 blocks: 30 * 14,799,360 + 111,673,344
    assert gpu_bytes(shape, 30, CTX) == 555_654_144
    # and the output head: + 30,083,328
    assert gpu_bytes(shape, 31, CTX) == gpu_bytes(shape, 1000, CTX) == 585_737_472
    assert gpu_bytes(shape, 30, 4096) == 30 * (LAYER_BYTES + KV_AT_4096) + COMPUTE_BYTES


def test_nothing_fits_when_the_margin_and_compute_buffer_take_it_all(shape):
    assert layers_that_fit(shape, [MARGIN + COMPUTE_BYTES], CTX) == 0
    assert layers_that_fit(shape, [MARGIN + COMPUTE_BYTES + LAYER_BYTES + KV_AT_CTX - 1], CTX) == 0
    assert layers_that_fit(shape, [MARGIN // 2], CTX) == 0


def test_no_gpu_means_no_layers(shape):
    assert layers_that_fit(shape, [], CTX) == 0


def test_two_fake_gpus_pool_their_memory_after_each_keeps_its_margin(shape):
    needed = 407_660_544  # 20 * (2,216,448 + 12,582,912) + 111,673,344
    split = [MARGIN + needed // 2, MARGIN + needed - needed // 2]
    assert layers_that_fit(shape, split, CTX) == 20
    assert layers_that_fit(shape, [split[0], split[1] - 1], CTX) == 19


def test_resolve_passes_numbers_through_and_auto_fits_the_real_build():
    model = default_model_path()
    assert resolve_gpu_layers(12, model, 4096) == 12
    assert resolve_gpu_layers(-1, model, 4096) == -1
    free = gpu_layers.gpu_free_memory()  # the real registry
    layers = resolve_gpu_layers("auto", model, 4096, parallel=4)
    if not llama_cpp.llama_supports_gpu_offload():
        assert free == []  # a CPU build: nothing to offload to
        assert layers == 0
    elif not free:
        assert layers == 0  # a GPU build on a machine without a GPU
    else:
        assert all(bytes_free > 0 for bytes_free in free)
        budget = sum(max(bytes_free - MARGIN, 0) for bytes_free in free)
        # the most layers whose hand-worked cost fits (the free memory is read again by resolve: a
        # dedicated GPU's barely moves)
        assert hand_cost(layers) <= budget and (layers == 31 or hand_cost(layers + 1) > budget)


def test_resolve_auto_reads_the_real_model_with_a_fake_gpu(shape, monkeypatch):
    monkeypatch.setattr(gpu_layers, "gpu_free_memory", lambda: [int(1.2 * GIB)])  # the fake GPU
    model = default_model_path()
    assert resolve_gpu_layers("auto", model, 4096, parallel=4) == FITS_IN_1_2_GIB
    # ctx_size 0: the model's training context (8192), at most 4096 tokens per sequence
    assert resolve_gpu_layers("auto", model, 0, parallel=4) == FITS_IN_1_2_GIB
    assert resolve_gpu_layers("auto", model, 4096, parallel=1) == FITS_IN_1_2_GIB_AT_4096
    monkeypatch.setattr(gpu_layers, "gpu_free_memory", lambda: [24 * GIB])
    assert resolve_gpu_layers("auto", model, 4096, parallel=4) == 31


def test_resolve_auto_on_an_unreadable_file_runs_on_the_cpu(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_layers, "gpu_free_memory", lambda: [24 * GIB])  # the fake GPU
    assert resolve_gpu_layers("auto", tmp_path / "missing.gguf", 4096) == 0
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"not a gguf file at all")
    assert resolve_gpu_layers("auto", garbage, 4096) == 0


def test_the_option_parses_auto_numbers_and_all():
    assert parse_gpu_layers_option("auto") == "auto"
    assert parse_gpu_layers_option("AUTO") == "auto"
    assert parse_gpu_layers_option("0") == 0
    assert parse_gpu_layers_option("33") == 33
    assert parse_gpu_layers_option("-1") == -1
    for bad in ("-2", "many", "1.5", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_gpu_layers_option(bad)
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu-layers", type=parse_gpu_layers_option, default=0)
    assert parser.parse_args(["--gpu-layers", "auto"]).gpu_layers == "auto"
    assert parser.parse_args(["--gpu-layers", "7"]).gpu_layers == 7
