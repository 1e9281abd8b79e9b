"""llama.cpp's log, routed to Python logging (`fireside.llama`), and the backend's one-time start.

Error lines are kept for messages (`thread_errors`), and a load's tensor placements are read
from llama.cpp's own account of them (`thread_placements`). Apart from `llama_model` so that
ggml's helpers (`ggml_native`) can start the backend without importing the model's module.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import llama_cpp

log = logging.getLogger("fireside.llama")


_OVERRIDDEN = re.compile(r"tensor (?P<tensor>\S+) \(.*\) buffer type overridden to (?P<buffer>.+)$")
_ASSIGNED = re.compile(r"load_tensors: layer +(?P<layer>\d+) assigned to device (?P<device>[^,]+),")
_BUFFER = re.compile(r"load_tensors: +(?P<buffer>\S+) model buffer size = +(?P<mib>[\d.]+) MiB")
_CACHE_KIND = re.compile(r"llama_kv_cache_iswa: creating +(?P<kind>non-SWA|SWA) KV cache")
_CACHE_SIZE = re.compile(r"(?P<what>llama_kv_cache|llama_memory_recurrent): size = +(?P<mib>[\d.]+) MiB")


@dataclass
class CacheSizes:
    """What a context's memory took, by kind of layer, in bytes (llama.cpp's own account): the
    full-attention KV cache, the sliding-window one, the recurrent states."""

    full: int = 0
    window: int = 0
    recurrent: int = 0
    _next: str = field(default="full", repr=False)

    @property
    def total(self) -> int:
        return self.full + self.window + self.recurrent


@dataclass
class Placements:
    """llama.cpp's account of a load: the tensors an override placed (tensor -> buffer type), the
    device of each layer (the blocks, then the output head as layer `n_layer`), and the weights'
    buffers (`CPU`, `CUDA0`, `CPU_REPACK`, `AMX`... -> MiB)."""

    overridden: dict[str, str] = field(default_factory=dict)
    layers: dict[int, str] = field(default_factory=dict)
    buffers: dict[str, float] = field(default_factory=dict)


class _LlamaLog:
    """Routes llama.cpp's log lines to Python logging and keeps error lines for messages."""

    # enum ggml_log_level: NONE, DEBUG, INFO, WARN, ERROR, CONT (continues the previous line)
    _levels = {0: logging.DEBUG, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}

    def __init__(self) -> None:
        self.errors: list[str] = []
        self._captures = threading.local()  # error lines of the calling thread, while captured
        self._level = logging.DEBUG
        self._callback = llama_cpp.llama_log_callback(self._on_log)
        llama_cpp.llama_log_set(self._callback, ctypes.c_void_p(0))

    def _on_log(self, level: int, text: bytes, _user: ctypes.c_void_p) -> None:
        if level != 5:
            self._level = self._levels.get(level, logging.DEBUG)
        message = text.decode("utf-8", errors="replace").rstrip()
        placed = getattr(self._captures, "placed", None)
        if placed is not None:
            if found := _OVERRIDDEN.match(message):
                placed.overridden[found["tensor"]] = found["buffer"]
            elif found := _ASSIGNED.match(message):
                placed.layers[int(found["layer"])] = found["device"]
            elif found := _BUFFER.match(message):
                placed.buffers[found["buffer"]] = float(found["mib"])
        sizes = getattr(self._captures, "sizes", None)
        if sizes is not None:
            if found := _CACHE_KIND.match(message):
                sizes._next = "window" if found["kind"] == "SWA" else "full"
            elif found := _CACHE_SIZE.match(message):
                kind = "recurrent" if found["what"] == "llama_memory_recurrent" else sizes._next
                setattr(sizes, kind, getattr(sizes, kind) + round(float(found["mib"]) * (1 << 20)))
                sizes._next = "full"
        if self._level >= logging.ERROR and message:
            self.errors.append(message)
            captured = getattr(self._captures, "lines", None)
            if captured is not None:
                captured.append(message)
        if message and log.isEnabledFor(self._level):
            log.log(self._level, message)


    @contextlib.contextmanager
    def thread_placements(self) -> Iterator[Placements]:
        """Where a load on this thread put its layers and the tensors an override placed
        (llama.cpp's own account, in its debug lines)."""
        placed = Placements()
        self._captures.placed = placed
        try:
            yield placed
        finally:
            self._captures.placed = None

    @contextlib.contextmanager
    def thread_cache_sizes(self) -> Iterator[CacheSizes]:
        """What a context made on this thread allocated for its KV cache and recurrent states."""
        sizes = CacheSizes()
        self._captures.sizes = sizes
        try:
            yield sizes
        finally:
            self._captures.sizes = None

    @contextlib.contextmanager
    def thread_errors(self) -> Iterator[list[str]]:
        """The error lines llama.cpp logs on this thread inside the `with` block."""
        lines: list[str] = []
        self._captures.lines = lines
        try:
            yield lines
        finally:
            self._captures.lines = None


_backend_lock = threading.Lock()
_llama_log: _LlamaLog | None = None


def init_backend() -> _LlamaLog:
    global _llama_log
    with _backend_lock:
        if _llama_log is None:
            _llama_log = _LlamaLog()
            llama_cpp.llama_backend_init()
        return _llama_log
