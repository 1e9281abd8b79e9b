"""The fit's real inputs: the offload devices llama.cpp would use and their free memory now, the
GGUF's tensor table, the context and cache type the engine will allocate and the system memory
available; then `backends.fit.plan` decides. The registry calls `plan_load` before every load.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from backends import ggml_native
from backends.fit import DEFAULT_UBATCH, DEVICE_MARGIN, FitSettings, Plan, Room, plan
from backends.memory import available_memory
from backends.model_shape import ModelShape, read_model_shape
from backends.served import DEFAULT_CTX
from backends.settings import CACHE_TYPES, GpuLayersSetting
from backends.tensor_placement import TensorOverride

log = logging.getLogger("fireside.fit")


@dataclass(frozen=True)
class FitLimits:
    """What the fit may use of each offload device (`--gpu-memory`), beyond the margin it keeps."""

    gpu_memory: int | None = None
    margin: int = DEVICE_MARGIN


def _buffer_type_name(handle: int) -> str:
    buffer_type = ggml_native.native_function("ggml_backend_dev_buffer_type", ctypes.c_void_p, ctypes.c_void_p)
    name = ggml_native.native_function("ggml_backend_buft_name", ctypes.c_char_p, ctypes.c_void_p)
    found = buffer_type(handle)
    return (name(found) or b"").decode("utf-8", errors="replace") if found else ""


def offload_rooms(devices: Sequence[int] = ()) -> list[Room]:
    """The devices a load offloads to, with their free memory now: `devices` (ggml device
    handles: RPC workers' and local GPUs, as the registry passes them) or, when none are given,
    the ones llama.cpp picks itself; empty when this build cannot offload."""
    import llama_cpp

    from backends.llama_log import init_backend

    init_backend()
    if devices:
        found = [ggml_native.describe_device(handle) for handle in devices]
    elif llama_cpp.llama_supports_gpu_offload():
        found = ggml_native.offload_devices(ggml_native.devices())
    else:
        return []
    return [Room(device.name, _usable_free(device), _buffer_type_name(device.handle)) for device in found]


def _usable_free(device: ggml_native.Device) -> int:
    # A device that reports no memory at all: llama.cpp falls back to the host's (its
    # llama-model.cpp); so does the fit.
    if device.free == 0 and device.total == 0:
        return available_memory() or 0
    return device.free


def context_tokens(shape: ModelShape, ctx_size: int, parallel: int) -> int:
    """The KV cache's cells: `ctx_size` tokens per slot (0: the model's own, at most DEFAULT_CTX)."""
    per_slot = ctx_size or min(shape.n_ctx_train or DEFAULT_CTX, DEFAULT_CTX)
    return per_slot * max(parallel, 1)


def plan_load(path: Path, rooms: Sequence[Room], *, gpu_layers: GpuLayersSetting, ctx_size: int, parallel: int,
              cache_type: str, overrides: tuple[TensorOverride, ...] = (), tensor_split: tuple[float, ...] = (),
              n_ubatch: int = DEFAULT_UBATCH, limits: FitLimits | None = None,
              check_host: bool = True, draft: Path | None = None, swa_full: bool = False) -> Plan:
    """The plan for loading the GGUF at `path` onto `rooms` and system memory (ggml's GGUF
    reader: `GgufError`, `NativeFunctionMissing` or OSError when it cannot read the file). A
    `draft` model goes to the GPUs with it: its weights and cache are kept free on each device."""
    shape = read_model_shape(path)
    limits = limits or FitLimits()
    tokens = context_tokens(shape, ctx_size, parallel)
    reserved = 0
    if draft is not None and rooms:
        small = read_model_shape(draft)
        reserved = sum(small.tensors.values()) + sum(small.cache_bytes(tokens, parallel, n_ubatch, CACHE_TYPES["f16"]))
    settings = FitSettings(
        ctx_tokens=tokens, parallel=parallel, swa_full=swa_full, reserved=reserved, gpu_layers=gpu_layers, n_ubatch=n_ubatch,
        kv_element_bytes=CACHE_TYPES[cache_type], overrides=overrides, tensor_split=tensor_split,
        margin=limits.margin, gpu_memory=limits.gpu_memory,
        host_free=available_memory() if check_host else None,
    )
    placed = plan(shape, rooms, settings)
    log.info("fit of %s: %s", path.name, placed.reason)
    return placed
