"""LoRA adapters (GGUFs written by llama.cpp's `convert_lora_to_gguf.py`) loaded onto a base model.

An adapter holds only its own low-rank tensors: it is loaded against one `LlamaModel` and applied
to a context's decode steps (`llama_set_adapters_lora`), so any number of adapters share one copy
of the base's weights. llama.cpp checks an adapter as it loads it (its type, its architecture
against the base's, each `lora_a`/`lora_b` pair against the base tensor it adapts) and logs why it
refuses one; `LoraAdapter` turns that into one message that names the file and, where the fault is
in a tensor, the tensor.
"""

from __future__ import annotations

import ctypes
import functools
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp

from backends.llama_model import LlamaModel, init_backend


class AdapterError(Exception):
    """An adapter file that cannot be used with its base model; the message names the file."""


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
        self._handle: llama_cpp.llama_adapter_lora_p | None = handle
        self._closing = threading.Lock()
        self.alpha = _float_metadata(handle, "adapter.lora.alpha")
        stat = path.stat()
        # what KV computed under it is keyed by: a file rewritten in place is another adapter
        self.identity = f"{path}:{stat.st_size}:{stat.st_mtime_ns}"

    @property
    def handle(self) -> llama_cpp.llama_adapter_lora_p:
        if self._handle is None:
            raise AdapterError(f"LoRA adapter {self.path} was unloaded")
        return self._handle

    def close(self) -> None:
        # under a lock: an adapter model's unload and its base's may close it at once, and the
        # base's weights must not be freed while this frees the adapter
        with self._closing:
            if self._handle is not None:
                llama_cpp.llama_adapter_lora_free(self._handle)
                self._handle = None

    def __repr__(self) -> str:
        return f"LoraAdapter({self.path.name})"


@dataclass(frozen=True)
class AdapterSet:
    """The adapters (with their scales) one decode step applies; empty: the bare base. Requests
    batch together only when their sets are equal, and the prefix cache keys KV by the set."""

    adapters: tuple[tuple[LoraAdapter, float], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.adapters)

    @functools.cached_property
    def key(self) -> str:
        """Equal for equal sets: the adapters' files (as loaded) and their scales."""
        return ";".join(f"{adapter.identity}@{scale!r}" for adapter, scale in self.adapters)


BARE = AdapterSet()


def _float_metadata(handle: llama_cpp.llama_adapter_lora_p, key: str) -> float | None:
    buffer = ctypes.create_string_buffer(64)
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
    scales = (ctypes.c_float * max(count, 1))(*(scale for _, scale in adapters.adapters))
    status = llama_cpp.llama_set_adapters_lora(ctx, handles, count, scales)
    if status != 0:
        raise AdapterError(f"llama.cpp refused the adapters {[a.path.name for a, _ in adapters.adapters]} "
                           f"(status {status})")


TURN_STEPS = 4  # steps a set keeps the context while other sets wait


class AdapterTurns:
    """Which adapter set the next decode step serves. llama.cpp applies adapters to a whole context,
    so one step decodes the sequences of one set (the bare base being one). When several sets have
    running sequences they take turns of TURN_STEPS steps, in the order they first appear among
    the running sequences: none waits more than (k - 1) * TURN_STEPS steps with k sets. Turns
    longer than one step because each change of set makes llama.cpp reserve its compute graph
    again (5 to 8 ms on the default model on two cores, more than half a step). While only the
    bare base runs and nothing is applied, a step costs one scan of the sequences."""

    def __init__(self) -> None:
        self._served = ""  # the key of the set the last step served
        self._streak = 0  # steps it has served in a row
        self._ctx: Any = None  # the context adapters were last applied to
        # The set applied to it, held (so no new adapter can be another with its id) and compared
        # by its adapters' identity: a file unloaded and loaded again has the same key but another
        # handle, and the context must not keep the freed one.
        self._applied = BARE

    def turn(self, running: Sequence[Any], ctx: Any) -> list[Any]:
        """The sequences this step decodes (of `running`, whose `.handle.job.adapters` say their
        set), with their set applied to `ctx`."""
        if not self._applied and not any(seq.handle.job.adapters for seq in running):
            self._served = ""
            return list(running)
        groups: dict[str, list[Any]] = {}
        sets: dict[str, AdapterSet] = {}
        for seq in running:
            adapters = seq.handle.job.adapters or BARE
            groups.setdefault(adapters.key, []).append(seq)
            sets.setdefault(adapters.key, adapters)
        keys = list(groups)
        if self._served not in groups:
            chosen = keys[0]
        elif self._streak < TURN_STEPS or len(keys) == 1:
            chosen = self._served
        else:
            chosen = keys[(keys.index(self._served) + 1) % len(keys)]
        if ctx is not self._ctx or not _same(sets[chosen], self._applied):
            apply(ctx, sets[chosen])
            self._ctx, self._applied = ctx, sets[chosen]
        self._streak = self._streak + 1 if chosen == self._served else 1
        self._served = chosen
        return groups[chosen]


def _same(one: AdapterSet, other: AdapterSet) -> bool:
    return len(one.adapters) == len(other.adapters) and all(
        a is b and s == t for (a, s), (b, t) in zip(one.adapters, other.adapters, strict=True))
