"""LoRA adapters (GGUFs written by llama.cpp's `convert_lora_to_gguf.py`) loaded onto a base model.

An adapter holds only its own low-rank tensors: it is loaded against one `LlamaModel` and applied
to a context's decode steps (`llama_set_adapters_lora`), so any number of adapters share one copy
of the base's weights. llama.cpp checks an adapter as it loads it (its type, its architecture
against the base's, each `lora_a`/`lora_b` pair against the base tensor it adapts) and logs why it
refuses one; `LoraAdapter` turns that into one message that names the file and, where the fault is
in a tensor, the tensor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import llama_cpp

from backends.llama_model import LlamaModel, init_backend


class AdapterError(Exception):
    """An adapter file that cannot be used with its base model; the message names the file."""


@dataclass(frozen=True)
class AdapterSet:
    """The adapters (with their scales) one decode step applies; empty: the bare base. Requests
    batch together only when their sets are equal, and the prefix cache keys KV by the set."""

    adapters: tuple[tuple[LoraAdapter, float], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.adapters)

    @property
    def key(self) -> tuple[tuple[str, float], ...]:
        return tuple((str(adapter.path), scale) for adapter, scale in self.adapters)


BARE = AdapterSet()

# llama.cpp's messages for a refused adapter, read into what the user should do about them
_HINT = re.compile(r"\s*\(hint: [^)]*\)\s*$")


def _reason(lines: list[str]) -> str:
    """The useful part of llama.cpp's error lines for a refused adapter."""
    for line in lines:
        _, found, reason = line.partition("failed to apply lora adapter: ")
        if found:
            reason = _HINT.sub("", reason.strip())
            if reason == "model arch and LoRA arch mismatch":
                return "it was made for another architecture than the base model's"
            if reason.startswith("expect general.type to be 'adapter'"):
                got = reason.rpartition(": ")[2] or "nothing"
                return f"it is not a LoRA adapter GGUF (general.type is {got!r}, not 'adapter')"
            if "has incorrect shape" in reason:
                return f"{reason}: its shapes do not match the base model's (made for another model?)"
            if "does not exist in base model" in reason:
                return f"{reason} (made for another model?)"
            return reason
    return lines[-1] if lines else "llama.cpp could not read it"


class LoraAdapter:
    """One adapter file loaded onto `model`; `close` frees its tensors (the base stays)."""

    def __init__(self, model: LlamaModel, path: Path):
        llama_log = init_backend()
        if not path.is_file():
            raise AdapterError(f"LoRA adapter {path}: file not found")
        with llama_log.thread_errors() as lines:
            handle = llama_cpp.llama_adapter_lora_init(model.handle, str(path).encode())
        if not handle:
            raise AdapterError(f"LoRA adapter {path}: {_reason(lines)}")
        self.path = path
        self.model = model
        self._handle: llama_cpp.llama_adapter_lora_p | None = handle
        self.alpha = _float_metadata(handle, "adapter.lora.alpha")

    @property
    def handle(self) -> llama_cpp.llama_adapter_lora_p:
        if self._handle is None:
            raise AdapterError(f"LoRA adapter {self.path} was unloaded")
        return self._handle

    def close(self) -> None:
        if self._handle is not None:
            llama_cpp.llama_adapter_lora_free(self._handle)
            self._handle = None

    def __repr__(self) -> str:
        return f"LoraAdapter({self.path.name})"


def _float_metadata(handle: llama_cpp.llama_adapter_lora_p, key: str) -> float | None:
    buffer = llama_cpp.ctypes.create_string_buffer(64)
    if llama_cpp.llama_adapter_meta_val_str(handle, key.encode(), buffer, len(buffer)) < 0:
        return None
    try:
        return float(buffer.value.decode())
    except ValueError:
        return None


def apply(ctx: llama_cpp.llama_context_p, adapters: AdapterSet) -> None:
    """Make `adapters` (maybe none) the ones `ctx` applies from its next decode on."""
    count = len(adapters.adapters)
    handles = (llama_cpp.llama_adapter_lora_p_ctypes * max(count, 1))(*(a.handle for a, _ in adapters.adapters))
    scales = (llama_cpp.ctypes.c_float * max(count, 1))(*(scale for _, scale in adapters.adapters))
    status = llama_cpp.llama_set_adapters_lora(ctx, handles, count, scales)
    if status != 0:
        raise AdapterError(f"llama.cpp refused the adapters {[a.path.name for a, _ in adapters.adapters]} "
                           f"(status {status})")
