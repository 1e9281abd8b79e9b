"""`--gpu-layers auto`: offload as many layers as fit in the GPU memory that is free now.

Two halves. `layers_that_fit` is pure arithmetic on a model's shape, the context size and the
free bytes of each GPU, so it is tested with made-up device memory (no GPU runs on the machines
that run the tests). `resolve_gpu_layers` gathers the real inputs: the GGUF's layer count and
tensor sizes through ggml's own GGUF reader (no weights are read), and the devices and free
memory that llama.cpp's backend registry reports.

What an offloaded layer costs on the GPU: its weights plus its share of the KV cache (K and V
in f16 for every token of the context: llama.cpp keeps the cache of an offloaded layer beside
it). Offloading all `n_layer + 1` "layers" also moves the output head (and, for models whose
output is tied to the token embedding, a copy of that matrix). Once anything is offloaded the GPU
also holds a compute buffer, estimated from the batch size and the model's widths assuming
flash attention (llama.cpp's default, `auto`, turns it on for CUDA and Metal). Of each
device's free memory a margin is kept back (1 GiB: the default of llama.cpp's own `--fit-target`,
for the driver, the display and other programs), and the rest is the budget.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends import ggml_native
from backends.settings import GpuLayersSetting

log = logging.getLogger("fireside.gpu")

GIB = 1 << 30
DEVICE_MARGIN = 1 * GIB  # kept free on each device, as llama.cpp's --fit-target defaults to
KV_ELEMENT_BYTES = 2  # the KV cache's default type is f16
FLOAT_BYTES = 4  # activations and logits are f32
DEFAULT_UBATCH = 512  # the engine's batch size (EngineOptions.batch_size)
DEFAULT_CTX = 4096  # ctx_size 0: the model's training context, at most this (as the registry does)


@dataclass(frozen=True)
class ModelShape:
    """What the fit needs to know of a model; all sizes in bytes."""

    layer_bytes: tuple[int, ...]  # weights of each repeating block, blk.0 first
    output_bytes: int  # what offloading the last "layer" (n_layer + 1) adds: output head, final norm
    kv_bytes_per_token: tuple[int, ...]  # K + V cache of one token, per block
    n_embd: int
    n_ff: int
    n_vocab: int
    n_ctx_train: int = 0

    @property
    def n_layer(self) -> int:
        return len(self.layer_bytes)


def compute_buffer_bytes(shape: ModelShape, n_ubatch: int = DEFAULT_UBATCH) -> int:
    """An estimate of the GPU compute buffer: one micro-batch of hidden states, Q/K/V and FFN
    activations, and its logits, in f32 (no KQ matrix: flash attention)."""
    activations = n_ubatch * (4 * shape.n_embd + 2 * shape.n_ff)
    logits = n_ubatch * shape.n_vocab
    return FLOAT_BYTES * (activations + logits)


def gpu_bytes(shape: ModelShape, n_gpu_layers: int, ctx_tokens: int, n_ubatch: int = DEFAULT_UBATCH) -> int:
    """GPU memory taken by offloading `n_gpu_layers`, as llama.cpp counts them: the last
    `min(n_gpu_layers, n_layer)` blocks, and the output head when `n_gpu_layers > n_layer`."""
    if n_gpu_layers <= 0:
        return 0
    blocks = range(max(shape.n_layer - n_gpu_layers, 0), shape.n_layer)
    weights = sum(shape.layer_bytes[i] for i in blocks)
    kv_cache = ctx_tokens * sum(shape.kv_bytes_per_token[i] for i in blocks)
    output = shape.output_bytes if n_gpu_layers > shape.n_layer else 0
    return weights + kv_cache + output + compute_buffer_bytes(shape, n_ubatch)


def gpu_budget(free_memory: Sequence[int], margin: int = DEVICE_MARGIN) -> int:
    """Bytes the model may take over all offload devices, a margin kept back on each. llama.cpp
    splits layers over several GPUs in proportion to their free memory, so the sum stands."""
    return sum(max(free - margin, 0) for free in free_memory)


def layers_that_fit(shape: ModelShape, free_memory: Sequence[int], ctx_tokens: int, *,
                    n_ubatch: int = DEFAULT_UBATCH, margin: int = DEVICE_MARGIN) -> int:
    """The most layers (0 to n_layer + 1, which offloads everything) whose weights, KV cache for
    `ctx_tokens` tokens and compute buffer fit in the free memory of the offload devices.
    No devices (a CPU build, no GPU): 0."""
    budget = gpu_budget(free_memory, margin)
    if budget <= 0:
        return 0
    fitting = 0
    for n in range(1, shape.n_layer + 2):  # the cost grows with n: stop at the first that does not fit
        if gpu_bytes(shape, n, ctx_tokens, n_ubatch) > budget:
            break
        fitting = n
    return fitting


# --- the real inputs -----------------------------------------------------------------------------

_SPLIT = re.compile(r"^(?P<prefix>.*)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$")
_BLOCK = re.compile(r"^blk\.(\d+)\.")


def _split_parts(path: Path) -> list[Path]:
    """All files of a split GGUF (`name-00001-of-00003.gguf`), or just `path`."""
    match = _SPLIT.match(path.name)
    if not match:
        return [path]
    count = int(match["count"])
    return [path.with_name(f"{match['prefix']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]


def _per_layer(value: Any, n_layer: int, default: int) -> list[int]:
    """A hyperparameter that GGUF stores either once or per layer (an array)."""
    if isinstance(value, list):
        values = [int(v) for v in value if v is not None][:n_layer]
        return values + [values[-1] if values else default] * (n_layer - len(values))
    return [int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default] * n_layer


def _int(value: Any, default: int = 0) -> int:
    if isinstance(value, list):
        numbers = [v for v in value if isinstance(v, (int, float))]
        return int(max(numbers)) if numbers else default
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def shape_from_gguf(metadata: dict[str, Any], tensor_sizes: dict[str, int]) -> ModelShape:
    """A model's shape from its GGUF metadata (`{arch}.block_count`, ...) and tensor sizes."""
    arch = metadata.get("general.architecture") or ""

    def key(name: str) -> Any:
        return metadata.get(f"{arch}.{name}")

    n_layer = _int(key("block_count"))
    layer_bytes = [0] * n_layer
    output_bytes = 0
    for name, size in tensor_sizes.items():
        block = _BLOCK.match(name)
        if block and int(block[1]) < n_layer:
            layer_bytes[int(block[1])] += size
        elif not block and not name.startswith("token_embd"):
            output_bytes += size  # output.weight, output_norm, rope factors, ...
    if "output.weight" not in tensor_sizes:  # tied embeddings: the output head is a copy of token_embd
        output_bytes += tensor_sizes.get("token_embd.weight", 0)
    n_embd = _int(key("embedding_length"))
    heads = _per_layer(key("attention.head_count"), n_layer, 1)
    kv_heads = _per_layer(key("attention.head_count_kv"), n_layer, 0)
    if key("attention.head_count_kv") is None:
        kv_heads = heads  # no GQA
    kv_per_token = []
    for i in range(n_layer):
        head_dim = n_embd // heads[i] if heads[i] else 0
        k_dim = _int(key("attention.key_length"), head_dim)
        v_dim = _int(key("attention.value_length"), head_dim)
        kv_per_token.append(kv_heads[i] * (k_dim + v_dim) * KV_ELEMENT_BYTES)
    tokens = metadata.get("tokenizer.ggml.tokens")
    return ModelShape(
        layer_bytes=tuple(layer_bytes), output_bytes=output_bytes, kv_bytes_per_token=tuple(kv_per_token),
        n_embd=n_embd, n_ff=_int(key("feed_forward_length")),
        n_vocab=len(tokens) if isinstance(tokens, list) else 0, n_ctx_train=_int(key("context_length")),
    )


_SHAPE_KEYS = ("block_count", "embedding_length", "feed_forward_length", "attention.head_count",
               "attention.head_count_kv", "attention.key_length", "attention.value_length", "context_length")


def read_model_shape(path: Path) -> ModelShape:
    """The shape of the GGUF at `path` (every part of a split one), read with ggml's GGUF
    reader: metadata and tensor sizes, no weights."""
    parts = _split_parts(path)
    with ggml_native.GgufFile(parts[0]) as first:
        arch = first.value("general.architecture")
        metadata = {"general.architecture": arch, "tokenizer.ggml.tokens": first.value("tokenizer.ggml.tokens")}
        metadata |= {f"{arch}.{name}": first.value(f"{arch}.{name}") for name in _SHAPE_KEYS}
        sizes = first.tensor_sizes()
    for part in parts[1:]:
        with ggml_native.GgufFile(part) as more:
            sizes |= more.tensor_sizes()
    return shape_from_gguf(metadata, sizes)


def gpu_free_memory() -> list[int]:
    """Free bytes of each device llama.cpp would offload to; empty when this build cannot
    offload (a CPU build, or no GPU found)."""
    import llama_cpp

    from backends.llama_model import init_backend

    init_backend()
    if not llama_cpp.llama_supports_gpu_offload():
        return []
    return [device.free for device in ggml_native.offload_devices(ggml_native.devices())]


def resolve_gpu_layers(setting: GpuLayersSetting, model_path: Path, ctx_size: int, *,
                       parallel: int = 1, n_ubatch: int = DEFAULT_UBATCH) -> int:
    """The `n_gpu_layers` to load `model_path` with. A number passes through; `auto` becomes the
    most layers that fit for a context of `ctx_size` tokens per sequence times `parallel`
    sequences (the engine's `n_ctx`; 0: the model's own, at most 4096). Whatever cannot be
    known (no offload support, an unreadable file) gives 0: the model runs on the CPU, and a
    missing or broken file is then reported by the model load itself."""
    if setting != "auto":
        return setting
    free = gpu_free_memory()
    if not free:
        log.info("gpu layers auto: this llama.cpp build has no GPU to offload to; 0 layers")
        return 0
    try:
        shape = read_model_shape(model_path)
    except (ggml_native.GgufError, ggml_native.NativeFunctionMissing, OSError) as error:
        log.warning("gpu layers auto: %s; running on the CPU", error)
        return 0
    per_sequence = ctx_size if ctx_size > 0 else min(shape.n_ctx_train or DEFAULT_CTX, DEFAULT_CTX)
    layers = layers_that_fit(shape, free, per_sequence * max(parallel, 1), n_ubatch=n_ubatch)
    log.info("gpu layers auto: %d of %d layers fit in %.1f GiB free (%d tokens of context)",
             min(layers, shape.n_layer + 1), shape.n_layer + 1, sum(free) / GIB, per_sequence * max(parallel, 1))
    return layers
