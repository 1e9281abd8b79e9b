"""The engine's settings as the command line and the config file spell them, checked without
loading llama.cpp (`fireside --help`, `fireside models` and a refused `fireside serve` never load
it): the KV cache's element types, the draft modes, the GPU layers and the tensor split. The
parsers of `fireside serve` and of the config file take them from here, and so does the engine."""

from __future__ import annotations

import argparse
from typing import Literal

# The KV cache's element types (`--cache-type`, the config's `cache_type`) and the bytes each
# stored value takes: f16 is 2 bytes, q8_0 a block of 32 values in 34 bytes, q4_0 32 values in
# 18. llama.cpp's ggml type of each: `backends.kv_cache.ggml_type`.
CACHE_TYPES: dict[str, float] = {"f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}
DEFAULT_CACHE_TYPE = "f16"

# Automatic drafts by prompt lookup (`--draft`, the config's `draft`): "auto" drafts, "off" does not.
DRAFT_MODES = ("auto", "off")

GpuLayersSetting = int | Literal["auto"]


def parse_gpu_layers_option(value: str) -> GpuLayersSetting:
    """`--gpu-layers`: `auto`, a number of layers, or -1 (all). An argparse `type=`."""
    if value.strip().lower() == "auto":
        return "auto"
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of layers, -1 (all) or auto, got {value!r}") from None
    if number < -1:
        raise argparse.ArgumentTypeError(f"expected a number of layers, -1 (all) or auto, got {number}")
    return number


def parse_tensor_split(value: str | list[float] | tuple[float, ...]) -> tuple[float, ...]:
    """`--tensor-split 3,1` or the config's `tensor_split = [3, 1]`: the proportion of the
    offloaded layers each device takes, in llama.cpp's device order (RPC workers first)."""
    parts: list[object] = value.split(",") if isinstance(value, str) else list(value)
    try:
        shares = tuple(float(p) for p in parts if not isinstance(p, bool) and str(p).strip())
    except (TypeError, ValueError):
        raise ValueError(f"tensor_split is a list of proportions, such as 3,1; got {value!r}") from None
    if len(shares) != len(parts) or not shares or any(not s >= 0 for s in shares) or not sum(shares) > 0:
        raise ValueError(f"tensor_split is a list of proportions (0 or more, not all 0), such as 3,1; got {value!r}")
    return shares

# context checkpoints (backends/checkpoints.py): per slot, as llama-server's --ctx-checkpoints, and the
# tokens between two inside a long prompt (its --checkpoint-min-step)
DEFAULT_CHECKPOINTS = 32
DEFAULT_CHECKPOINT_STEP = 8192
