"""The KV cache's element type (`--cache-type`) and its size: what the slots' caches take in
memory, for the context's parameters, `fireside doctor` and `/metrics`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import llama_cpp

from backends.llama_log import CacheSizes
from backends.llama_model import LlamaModel
from backends.settings import CACHE_TYPES


def ggml_type(cache_type: str) -> int:
    """llama.cpp's ggml type of one of `CACHE_TYPES` ("q8_0": GGML_TYPE_Q8_0)."""
    if cache_type not in CACHE_TYPES:
        raise KeyError(cache_type)
    return getattr(llama_cpp, f"GGML_TYPE_{cache_type.upper()}")


@dataclass(frozen=True)
class KvSize:
    cells: int  # token positions the cache holds, over all slots
    bytes_per_cell: float

    @property
    def bytes(self) -> int:
        return round(self.cells * self.bytes_per_cell)


def kv_size(model: LlamaModel, cells: int, cache_type: str) -> KvSize:
    """The cache's size for `cells` positions: keys and values of every layer's KV heads."""
    handle = model.handle
    layers = llama_cpp.llama_model_n_layer(handle)
    heads, kv_heads = llama_cpp.llama_model_n_head(handle), llama_cpp.llama_model_n_head_kv(handle)
    # a head's key and value widths: the GGUF's own where it states them (Gemma 3: 256, not n_embd / n_head)
    arch = model.metadata("general.architecture")
    default = llama_cpp.llama_model_n_embd(handle) // max(heads, 1)
    key, value = (int(model.metadata(f"{arch}.attention.{name}_length") or default) for name in ("key", "value"))
    values_per_cell = layers * kv_heads * (key + value)
    return KvSize(cells, values_per_cell * CACHE_TYPES[cache_type])


class _Engine(Protocol):  # what `engine_kv` reads of `backends.engine.Engine`
    model: LlamaModel
    ctx_size: int
    options: Any

    @property
    def kv_sizes(self) -> CacheSizes: ...

    def load(self) -> Any: ...


def engine_kv(engine: _Engine) -> tuple[KvSize, KvSize]:
    """An engine's whole cache (every slot's window, the sliding-window layers' windows, the
    recurrent states: what llama.cpp allocated) and the part its slots hold now (full-attention
    cells by the tokens held; windows and states by the slots holding any)."""
    options, load = engine.options, engine.load()
    cells = engine.ctx_size * options.parallel
    sizes = engine.kv_sizes
    if not sizes.window and not sizes.recurrent:  # every layer's keys and values for every cell (exact)
        per_cell = kv_size(engine.model, 1, options.cache_type).bytes_per_cell
        return KvSize(cells, per_cell), KvSize(load.kv_used, per_cell)
    per_slot = (sizes.window + sizes.recurrent) / max(options.parallel, 1)
    used = sizes.full * min(1.0, load.kv_used / max(cells, 1)) + per_slot * load.held_slots
    return KvSize(cells, sizes.total / max(cells, 1)), KvSize(load.kv_used, used / max(load.kv_used, 1))
