"""What a GGUF model is made of, read without its weights: the bytes of every tensor and the
hyperparameters that size its KV cache and compute buffers. The fit (`backends/fit.py`) places
these tensors on devices; the registry's memory estimate sizes the KV cache from them.

The reading goes through ggml's own GGUF reader (`ggml_native.GgufFile`): metadata and the
tensor table of every part of a split file, tens of milliseconds even for a 30B model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backends import ggml_native
from backends.model_file import gguf_parts

KV_ELEMENT_BYTES = 2  # the KV cache's default type is f16
_BLOCK = re.compile(r"^blk\.(\d+)\.")
INPUT_TENSORS = ("token_embd", "per_layer_token_embd")  # read on the CPU: llama.cpp never offloads them


@dataclass(frozen=True)
class ModelShape:
    """A model's tensors (bytes by name) and the widths that size its cache and activations."""

    tensors: dict[str, int] = field(hash=False)
    n_layer: int
    kv_values_per_token: tuple[int, ...]  # K + V values of one token, per block
    n_embd: int
    n_ff: int  # the widest feed-forward activation of a token (a MoE's: its used experts together)
    n_vocab: int
    n_ctx_train: int = 0
    n_expert: int = 0
    n_swa: int = 0  # the sliding window's tokens (0: none)
    swa_layers: tuple[bool, ...] = ()  # per block: attends through the sliding window
    recurrent_layers: tuple[bool, ...] = ()  # per block: a recurrent state instead of a KV cache
    recurrent_values: int = 0  # a recurrent block's state values per sequence (f32)

    def block_of(self, tensor: str) -> int | None:
        match = _BLOCK.match(tensor)
        return int(match[1]) if match and int(match[1]) < self.n_layer else None

    @property
    def layer_bytes(self) -> tuple[int, ...]:
        sizes = [0] * self.n_layer
        for name, size in self.tensors.items():
            block = self.block_of(name)
            if block is not None:
                sizes[block] += size
        return tuple(sizes)

    @property
    def tied_output(self) -> bool:
        """No output head of its own: llama.cpp uses a copy of the token embedding there."""
        return "output.weight" not in self.tensors

    @property
    def output_bytes(self) -> int:
        """What the output "layer" holds: the head, the final norm and whatever else is outside
        the blocks and the input (rope factors, ...)."""
        rest = sum(size for name, size in self.tensors.items()
                   if self.block_of(name) is None and not name.startswith(INPUT_TENSORS))
        return rest + (self.tensors.get("token_embd.weight", 0) if self.tied_output else 0)

    def cache_bytes(self, ctx_tokens: int, parallel: int, n_ubatch: int, element_bytes: float,
                    swa_full: bool = False) -> tuple[int, ...]:
        """Per block, what its cache takes for `ctx_tokens` cells over `parallel` slots, as
        llama.cpp sizes it: a full-attention block keys and values for every cell; a
        sliding-window one for its window and a batch per slot (padded to 256; every cell with
        `swa_full`); a recurrent one its state per slot."""
        per_slot = max(ctx_tokens // max(parallel, 1), 1)
        window = min(per_slot, -(-(self.n_swa + n_ubatch) // 256) * 256) * max(parallel, 1)
        sizes = []
        for block, values in enumerate(self.kv_values_per_token):
            if block < len(self.recurrent_layers) and self.recurrent_layers[block]:
                sizes.append(4 * self.recurrent_values * max(parallel, 1))
            elif not swa_full and self.n_swa and block < len(self.swa_layers) and self.swa_layers[block]:
                sizes.append(int(values * window * element_bytes))
            else:
                sizes.append(int(values * ctx_tokens * element_bytes))
        return tuple(sizes)

    def cache_by_kind(self, ctx_tokens: int, parallel: int, n_ubatch: int, element_bytes: float,
                      swa_full: bool = False) -> dict[str, tuple[int, int]]:
        """`cache_bytes` summed by kind of block: "full", "window", "recurrent" -> (bytes, blocks)."""
        found: dict[str, tuple[int, int]] = {}
        sizes = self.cache_bytes(ctx_tokens, parallel, n_ubatch, element_bytes, swa_full)
        for block, size in enumerate(sizes):
            if block < len(self.recurrent_layers) and self.recurrent_layers[block]:
                kind = "recurrent"
            elif not swa_full and self.n_swa and block < len(self.swa_layers) and self.swa_layers[block]:
                kind = "window"
            else:
                kind = "full"
            total, blocks = found.get(kind, (0, 0))
            found[kind] = (total + size, blocks + 1)
        return found

    @property
    def kv_bytes_per_token(self) -> tuple[int, ...]:
        """K and V of one token per block, in the default f16 cache."""
        return tuple(values * KV_ELEMENT_BYTES for values in self.kv_values_per_token)


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
    n_embd = _int(key("embedding_length"))
    heads = _per_layer(key("attention.head_count"), n_layer, 1)
    kv_heads = heads if key("attention.head_count_kv") is None else _per_layer(key("attention.head_count_kv"),
                                                                                n_layer, 0)
    kv_values = []
    for i in range(n_layer):
        head_dim = n_embd // heads[i] if heads[i] else 0
        kv_values.append(kv_heads[i] * (_int(key("attention.key_length"), head_dim)
                                        + _int(key("attention.value_length"), head_dim)))
    n_swa = _int(key("attention.sliding_window"))
    recurrent = _recurrent_layers(arch, metadata, n_layer, kv_heads)
    kv_values = [0 if recurrent[i] else values for i, values in enumerate(kv_values)]
    experts_used = _int(key("expert_used_count"))
    expert_ff = _int(key("expert_feed_forward_length"), _int(key("feed_forward_length")))
    tokens = metadata.get("tokenizer.ggml.tokens")
    return ModelShape(
        tensors=dict(tensor_sizes), n_layer=n_layer, kv_values_per_token=tuple(kv_values), n_embd=n_embd,
        n_ff=max(_int(key("feed_forward_length")), experts_used * expert_ff),
        n_vocab=len(tokens) if isinstance(tokens, list) else 0, n_ctx_train=_int(key("context_length")),
        n_expert=_int(key("expert_count")), n_swa=n_swa,
        swa_layers=_swa_layers(arch, key("attention.sliding_window_pattern"), n_layer) if n_swa else (),
        recurrent_layers=recurrent, recurrent_values=_recurrent_values(arch, metadata, n_embd) if any(recurrent) else 0,
    )


# llama.cpp's default sliding-window patterns by architecture (`load_swa_pattern(ml, n, dense_first)`
# in its models/*.cpp), where the GGUF does not give its own
_SWA_PATTERNS = {"gemma2": (2, False), "gemma3": (6, False), "gemma3n": (5, False), "llama4": (4, False),
                 "cohere2": (4, False), "cohere2moe": (4, True), "gpt-oss": (2, False), "exaone4": (4, False),
                 "smallthinker": (4, True)}
_RECURRENT_ARCHES = ("mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7")


def _swa_layers(arch: str, pattern: Any, n_layer: int) -> tuple[bool, ...]:
    """Which blocks attend through the sliding window: the GGUF's per-block list, else its
    period, else llama.cpp's default for the architecture (every block: a period of 0)."""
    if isinstance(pattern, list):
        flags = [bool(v) for v in pattern][:n_layer]
        return tuple(flags + [False] * (n_layer - len(flags)))
    period, dense_first = _SWA_PATTERNS.get(arch, (0, False))
    if isinstance(pattern, int) and not isinstance(pattern, bool):
        period = pattern
    if dense_first:
        return tuple(period == 0 or i % period != 0 for i in range(n_layer))
    return tuple(period == 0 or i % period < period - 1 for i in range(n_layer))


def _recurrent_layers(arch: str, metadata: dict[str, Any], n_layer: int, kv_heads: list[int]) -> tuple[bool, ...]:
    """Which blocks keep a recurrent state: all of a Mamba or RWKV; a hybrid's listed ones, or
    those with no KV heads (LFM2, Granite 4, Nemotron-H, Jamba), or all but every Nth (Qwen3-Next,
    Qwen3.5)."""
    if arch in _RECURRENT_ARCHES:
        return (True,) * n_layer
    listed = metadata.get(f"{arch}.attention.recurrent_layers")
    if isinstance(listed, list):
        flags = [bool(v) for v in listed][:n_layer]
        return tuple(flags + [False] * (n_layer - len(flags)))
    interval = metadata.get(f"{arch}.full_attention_interval")
    if arch.startswith(("qwen3next", "qwen35")):
        period = _int(interval, 4) or 4
        return tuple((i + 1) % period != 0 for i in range(n_layer))
    has_state = any(metadata.get(f"{arch}.{name}") is not None for name in ("ssm.state_size", "shortconv.l_cache"))
    return tuple(has_state and heads == 0 for heads in kv_heads)


def _recurrent_values(arch: str, metadata: dict[str, Any], n_embd: int) -> int:
    """A recurrent block's state values per sequence (llama.cpp's `n_embd_r` + `n_embd_s`)."""
    def key(name: str) -> int:
        return _int(metadata.get(f"{arch}.{name}"))

    if key("shortconv.l_cache"):  # LFM2's convolution keeps its last l_cache - 1 inputs
        return n_embd * (key("shortconv.l_cache") - 1)
    if key("wkv.head_size"):  # RWKV: token shifts and the wkv state
        return (key("token_shift_count") or 2) * n_embd + n_embd * key("wkv.head_size")
    d_conv, d_inner, d_state, groups = (key("ssm.conv_kernel"), key("ssm.inner_size"), key("ssm.state_size"),
                                        key("ssm.group_count"))
    return max(d_conv - 1, 0) * (d_inner + 2 * groups * d_state) + d_state * d_inner


_SHAPE_KEYS = ("block_count", "embedding_length", "feed_forward_length", "attention.head_count",
               "attention.head_count_kv", "attention.key_length", "attention.value_length", "context_length",
               "expert_count", "expert_used_count", "expert_feed_forward_length", "attention.sliding_window",
               "attention.sliding_window_pattern", "attention.recurrent_layers", "full_attention_interval",
               "shortconv.l_cache", "ssm.conv_kernel", "ssm.inner_size", "ssm.state_size", "ssm.group_count",
               "wkv.head_size", "token_shift_count")


def read_model_shape(path: Path) -> ModelShape:
    """The shape of the GGUF at `path` (every part of a split one): metadata and tensor sizes, no weights."""
    parts = gguf_parts(path) or [path]  # a missing file: ggml's reader says so
    with ggml_native.GgufFile(parts[0]) as first:
        arch = first.value("general.architecture")
        metadata = {"general.architecture": arch, "tokenizer.ggml.tokens": first.value("tokenizer.ggml.tokens")}
        metadata |= {f"{arch}.{name}": first.value(f"{arch}.{name}") for name in _SHAPE_KEYS}
        sizes = first.tensor_sizes()
    for part in parts[1:]:
        with ggml_native.GgufFile(part) as more:
            sizes |= more.tensor_sizes()
    return shape_from_gguf(metadata, sizes)
