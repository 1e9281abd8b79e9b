"""`--gpu-layers auto` on the real default model's numbers. No GPU runs on the machines that run
these tests, so the GPUs here are fakes: made-up free memory handed to the pure fit
(`layers_that_fit`), or a stand-in for `gpu_free_memory` when going through
`resolve_gpu_layers`. The model's numbers are real: SmolLM2-135M's GGUF read through ggml's own
GGUF reader, and checked against the `gguf` package."""

from __future__ import annotations

import argparse
import re
from collections import defaultdict

import pytest

from backends import gpu_layers
from backends.gpu_layers import (
    DEVICE_MARGIN,
    GIB,
    compute_buffer_bytes,
    gpu_bytes,
    layers_that_fit,
    parse_gpu_layers_option,
    read_model_shape,
    resolve_gpu_layers,
)
from backends.registry import default_model_path

CTX = 4096 * 4  # the engine's n_ctx: 4096 tokens per sequence, 4 slots


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
    assert shape.layer_bytes == tuple(per_block[i] for i in range(30))
    # tied embeddings: offloading the output head copies token_embd to the GPU
    assert "output.weight" not in sizes
    assert shape.output_bytes == sizes["token_embd.weight"] + sizes["output_norm.weight"]
    # 3 KV heads of 64 (576 / 9 heads), K and V, f16
    assert shape.kv_bytes_per_token == (3 * (64 + 64) * 2,) * 30
    assert (shape.n_embd, shape.n_ff, shape.n_vocab, shape.n_ctx_train) == (576, 1536, 49152, 8192)


def test_everything_fits_on_a_big_fake_gpu(shape):
    assert layers_that_fit(shape, [8 * GIB], CTX) == shape.n_layer + 1  # all blocks and the output head


def test_some_layers_fit_exactly_as_far_as_the_memory_goes(shape):
    for wanted in (1, 10, 29, 30):
        needed = DEVICE_MARGIN + gpu_bytes(shape, wanted, CTX)
        assert layers_that_fit(shape, [needed], CTX) == wanted
        assert layers_that_fit(shape, [needed - 1], CTX) == wanted - 1
    # a GPU with 1.2 GiB free: 1 GiB margin, ~107 MiB compute buffer, ~14 MiB a layer at this context
    some = layers_that_fit(shape, [int(1.2 * GIB)], CTX)
    assert 0 < some < shape.n_layer
    # a smaller context leaves room for more layers
    assert layers_that_fit(shape, [int(1.2 * GIB)], 4096) > some


def test_the_offloaded_layers_cost_weights_kv_cache_output_and_compute(shape):
    compute = compute_buffer_bytes(shape)
    assert compute == 4 * 512 * (4 * 576 + 2 * 1536 + 49152)
    assert gpu_bytes(shape, 0, CTX) == 0
    one_layer = shape.layer_bytes[-1] + CTX * shape.kv_bytes_per_token[-1]
    assert gpu_bytes(shape, 1, CTX) == one_layer + compute
    all_blocks = sum(shape.layer_bytes) + CTX * sum(shape.kv_bytes_per_token)
    assert gpu_bytes(shape, 30, CTX) == all_blocks + compute
    assert gpu_bytes(shape, 31, CTX) == gpu_bytes(shape, 1000, CTX) == all_blocks + shape.output_bytes + compute


def test_nothing_fits_when_the_margin_and_compute_buffer_take_it_all(shape):
    assert layers_that_fit(shape, [DEVICE_MARGIN + compute_buffer_bytes(shape)], CTX) == 0
    assert layers_that_fit(shape, [DEVICE_MARGIN // 2], CTX) == 0


def test_no_gpu_means_no_layers(shape):
    assert layers_that_fit(shape, [], CTX) == 0


def test_two_fake_gpus_pool_their_memory_after_each_keeps_its_margin(shape):
    needed = gpu_bytes(shape, 20, CTX)
    split = [DEVICE_MARGIN + needed // 2, DEVICE_MARGIN + needed - needed // 2]
    assert layers_that_fit(shape, split, CTX) == 20


def test_resolve_passes_numbers_through_and_auto_is_0_on_this_cpu_build():
    model = default_model_path()
    assert resolve_gpu_layers(12, model, 4096) == 12
    assert resolve_gpu_layers(-1, model, 4096) == -1
    assert gpu_layers.gpu_free_memory() == []  # the real registry: a CPU build, no offload
    assert resolve_gpu_layers("auto", model, 4096, parallel=4) == 0


def test_resolve_auto_reads_the_real_model_with_a_fake_gpu(shape, monkeypatch):
    monkeypatch.setattr(gpu_layers, "gpu_free_memory", lambda: [int(1.2 * GIB)])  # the fake GPU
    model = default_model_path()
    assert resolve_gpu_layers("auto", model, 4096, parallel=4) == layers_that_fit(shape, [int(1.2 * GIB)], CTX)
    # ctx_size 0: the model's training context (8192), at most 4096 tokens per sequence
    assert resolve_gpu_layers("auto", model, 0, parallel=4) == layers_that_fit(shape, [int(1.2 * GIB)], CTX)
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
