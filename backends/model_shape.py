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
    experts_used = _int(key("expert_used_count"))
    expert_ff = _int(key("expert_feed_forward_length"), _int(key("feed_forward_length")))
    tokens = metadata.get("tokenizer.ggml.tokens")
    return ModelShape(
        tensors=dict(tensor_sizes), n_layer=n_layer, kv_values_per_token=tuple(kv_values), n_embd=n_embd,
        n_ff=max(_int(key("feed_forward_length")), experts_used * expert_ff),
        n_vocab=len(tokens) if isinstance(tokens, list) else 0, n_ctx_train=_int(key("context_length")),
        n_expert=_int(key("expert_count")),
    )


_SHAPE_KEYS = ("block_count", "embedding_length", "feed_forward_length", "attention.head_count",
               "attention.head_count_kv", "attention.key_length", "attention.value_length", "context_length",
               "expert_count", "expert_used_count", "expert_feed_forward_length")


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
