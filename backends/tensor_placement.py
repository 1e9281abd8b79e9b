"""Where a model's tensors go besides `gpu_layers`: llama.cpp's tensor buffer-type overrides
(`llama_model_params.tensor_buft_overrides`), each a regular expression searched in tensor names
and the buffer type of the device that holds the tensors it matches.

`--cpu-moe` and `--n-cpu-moe N` are such overrides, as llama-server builds them: every expert
tensor of a mixture-of-experts model (`blk.N.ffn_{up,down,gate,gate_up}_exps`), or those of the
first N blocks, stay in system memory while attention, the shared weights and the KV cache go to
the GPU. That is how a 20B-30B MoE model runs on an 8-24 GB card: only a few experts are active
per token, so the CPU's share of each step is small. `--override-tensor REGEX=DEVICE` is the
general form (llama-server's `-ot`); DEVICE names a buffer type as ggml names it: `CPU`, `CUDA0`,
`Metal`, `Vulkan0`, `RPC0[host:port]`...
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from typing import Any

EXPERT_TENSORS = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"  # llama.cpp's LLM_FFN_EXPS_REGEX
CPU = "CPU"


@dataclass(frozen=True)
class TensorOverride:
    pattern: str  # searched in each tensor's name (std::regex, ECMAScript: as Python reads these)
    device: str  # the buffer type's name

    def __str__(self) -> str:
        return f"{self.pattern}={self.device}"


def parse_overrides(text: str) -> tuple[TensorOverride, ...]:
    """`REGEX=DEVICE[,REGEX=DEVICE...]`, as llama-server's `--override-tensor` takes them
    (ValueError naming what is wrong)."""
    overrides = []
    for part in text.split(","):
        pattern, found, device = part.strip().rpartition("=")
        if not found or not pattern or not device:
            raise ValueError(f"{part.strip()!r} is not REGEX=DEVICE (for example \\.ffn_.*_exps\\.=CPU)")
        try:
            re.compile(pattern)
        except re.error as error:
            raise ValueError(f"{pattern!r} is not a regular expression: {error}") from None
        overrides.append(TensorOverride(pattern, device))
    return tuple(overrides)


def expert_overrides(cpu_moe: bool = False, n_cpu_moe: int = 0) -> tuple[TensorOverride, ...]:
    """Every expert tensor on the CPU (`cpu_moe`), or those of blocks 0 to n_cpu_moe - 1."""
    if cpu_moe:
        return (TensorOverride(EXPERT_TENSORS, CPU),)
    return tuple(TensorOverride(rf"blk\.{block}{EXPERT_TENSORS}", CPU) for block in range(n_cpu_moe))


def buffer_types() -> dict[str, int]:
    """Each device's buffer type by its name (`ggml_backend_buft_t` handles), as llama-server lists them."""
    # llama.cpp loads here, not where the command line is parsed
    from backends import ggml_native

    buffer_type = ggml_native.native_function("ggml_backend_dev_buffer_type", ctypes.c_void_p, ctypes.c_void_p)
    name = ggml_native.native_function("ggml_backend_buft_name", ctypes.c_char_p, ctypes.c_void_p)
    found = {}
    for device in ggml_native.devices():
        handle = buffer_type(device.handle)
        if handle:
            found[(name(handle) or b"").decode("utf-8", errors="replace")] = handle
    return found


class OverrideError(ValueError):
    """An override names a buffer type this machine does not have."""


class _Override(ctypes.Structure):  # struct llama_model_tensor_buft_override
    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


def override_array(overrides: tuple[TensorOverride, ...]) -> tuple[ctypes.Array[Any], list[bytes]]:
    """The NULL-terminated array llama.cpp reads while it loads, and the pattern strings it points
    into (keep both alive until then)."""
    known = buffer_types()
    for override in overrides:
        if override.device not in known:
            raise OverrideError(f"override {override}: this machine has no buffer type {override.device!r} "
                                f"(it has: {', '.join(sorted(known)) or 'none'})")
    patterns = [override.pattern.encode() for override in overrides]
    entries = [_Override(pattern, known[override.device]) for pattern, override in zip(patterns, overrides, strict=True)]
    return (_Override * (len(entries) + 1))(*entries, _Override(None, None)), patterns


def matches(overrides: tuple[TensorOverride, ...], tensor: str) -> str | None:
    """The device the first override matching `tensor` sends it to, as llama.cpp picks it."""
    for override in overrides:
        if re.search(override.pattern, tensor):
            return override.device
    return None
