"""ggml functions that llama-cpp-python does not bind: the backend device registry (which
backends this build of llama.cpp has, its devices and their free memory) and ggml's own GGUF
reader (a model's metadata and tensor sizes without reading its weights).

The functions come from the same shared libraries llama-cpp-python loaded, never from another
copy: a second copy of ggml would have a registry of its own and answer for nothing that
llama.cpp uses. On Linux and macOS the symbols resolve through libllama's handle (the dynamic
loader searches its dependencies, libggml and libggml-base); Windows' GetProcAddress does not, so
there the ggml and ggml-base DLLs beside libllama are opened by name (which returns the already
loaded module). Each foreign function is a fresh ctypes prototype, so setting its argument and
return types never changes a function object that llama-cpp-python shares.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import llama_cpp
from llama_cpp._ctypes_extensions import load_shared_library

# enum ggml_backend_dev_type
DEVICE_TYPES = {0: "CPU", 1: "GPU", 2: "IGPU", 3: "ACCEL", 4: "META"}


class NativeFunctionMissing(Exception):
    """The installed llama.cpp build does not export a function we asked for."""


@functools.cache
def _fallback_libraries() -> tuple[ctypes.CDLL, ...]:
    """ggml-base and ggml from libllama's own folder, for platforms whose symbol lookup does not
    search a library's dependencies (Windows)."""
    folder = Path(getattr(llama_cpp.llama_cpp._lib, "_name", "") or ".").parent
    libraries = []
    for name in ("ggml-base", "ggml"):
        try:
            libraries.append(load_shared_library(name, folder))
        except (OSError, RuntimeError, FileNotFoundError):
            continue
    return tuple(libraries)


@functools.cache
def native_function(name: str, restype: Any, *argtypes: Any) -> Any:
    """A callable for the exported C function `name`, typed with `restype(*argtypes)`."""
    prototype = ctypes.CFUNCTYPE(restype, *argtypes)
    for library in (llama_cpp.llama_cpp._lib, *_fallback_libraries()):
        if hasattr(library, name):
            return prototype((name, library))
    raise NativeFunctionMissing(f"this llama.cpp build does not export {name}")


# --- the backend device registry ------------------------------------------------------------

_size_t = ctypes.c_size_t
_ptr = ctypes.c_void_p


@dataclass(frozen=True)
class Device:
    """One device of llama.cpp's backend registry; memory in bytes as the backend reports it
    (a CPU device reports system RAM; Metal reports its working-set limit)."""

    name: str
    description: str
    type: str  # CPU, GPU, IGPU, ACCEL, META
    backend: str  # the registry entry: CPU, CUDA, Metal, Vulkan, BLAS, RPC, ...
    free: int
    total: int
    handle: int = field(default=0, compare=False, repr=False)  # the ggml_backend_dev_t, for llama.cpp's calls


def _text(pointer: bytes | None) -> str:
    return pointer.decode("utf-8", errors="replace") if pointer else ""


def backend_names() -> list[str]:
    """The backends compiled into (or loaded by) this llama.cpp build, in registry order."""
    count = native_function("ggml_backend_reg_count", _size_t)()
    get = native_function("ggml_backend_reg_get", _ptr, _size_t)
    name = native_function("ggml_backend_reg_name", ctypes.c_char_p, _ptr)
    return [_text(name(get(i))) for i in range(count)]


def devices() -> list[Device]:
    """Every device the registry holds, with the memory its backend reports now."""
    count = native_function("ggml_backend_dev_count", _size_t)()
    get = native_function("ggml_backend_dev_get", _ptr, _size_t)
    return [describe_device(dev) for dev in (get(i) for i in range(count)) if dev]


def describe_device(dev: int) -> Device:
    """One device (a `ggml_backend_dev_t`), with the memory its backend reports now."""
    name = native_function("ggml_backend_dev_name", ctypes.c_char_p, _ptr)
    description = native_function("ggml_backend_dev_description", ctypes.c_char_p, _ptr)
    dev_type = native_function("ggml_backend_dev_type", ctypes.c_int, _ptr)
    memory = native_function("ggml_backend_dev_memory", None, _ptr, ctypes.POINTER(_size_t), ctypes.POINTER(_size_t))
    backend_reg = native_function("ggml_backend_dev_backend_reg", _ptr, _ptr)
    reg_name = native_function("ggml_backend_reg_name", ctypes.c_char_p, _ptr)
    free, total = _size_t(0), _size_t(0)
    memory(dev, ctypes.byref(free), ctypes.byref(total))
    reg = backend_reg(dev)
    return Device(
        name=_text(name(dev)), description=_text(description(dev)),
        type=DEVICE_TYPES.get(dev_type(dev), "UNKNOWN"), backend=_text(reg_name(reg)) if reg else "",
        free=free.value, total=total.value, handle=dev,
    )


def offload_devices(all_devices: list[Device]) -> list[Device]:
    """The devices llama.cpp spreads offloaded layers over: discrete GPUs (RPC servers too), and
    integrated GPUs only when there is no discrete one, as `llama_model_load` picks them."""
    gpus = [d for d in all_devices if d.type == "GPU"]
    return gpus or [d for d in all_devices if d.type == "IGPU"]


# --- ggml's GGUF reader ----------------------------------------------------------------------

class _GgufInitParams(ctypes.Structure):
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", _ptr)]


# enum gguf_type -> the ctypes type of one element (STRING = 8 and ARRAY = 9 are handled apart)
_GGUF_SCALARS = {
    0: ctypes.c_uint8, 1: ctypes.c_int8, 2: ctypes.c_uint16, 3: ctypes.c_int16, 4: ctypes.c_uint32,
    5: ctypes.c_int32, 6: ctypes.c_float, 7: ctypes.c_bool, 10: ctypes.c_uint64, 11: ctypes.c_int64,
    12: ctypes.c_double,
}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


class GgufError(Exception):
    """A file ggml's GGUF reader cannot open or parse."""


class GgufFile:
    """Metadata and tensor sizes of a GGUF through ggml's reader, weights left unread.

    ggml asserts (aborting the process) when a getter is called on a key of another type, so
    every read checks the key's type first.
    """

    def __init__(self, path: Path):
        from backends.llama_log import init_backend

        init_backend()  # ggml's own messages (a bad magic) go to our log, not to stderr
        init = native_function("gguf_init_from_file", _ptr, ctypes.c_char_p, _GgufInitParams)
        self._ctx = init(str(path).encode(), _GgufInitParams(True, None))
        if not self._ctx:
            raise GgufError(f"cannot read GGUF metadata from {path}")
        self.path = path

    def __enter__(self) -> GgufFile:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._ctx:
            native_function("gguf_free", None, _ptr)(self._ctx)
            self._ctx = None

    def _key(self, key: str) -> int:
        return native_function("gguf_find_key", ctypes.c_int64, _ptr, ctypes.c_char_p)(self._ctx, key.encode())

    def value(self, key: str) -> str | int | float | bool | list[Any] | None:
        """The key's value (numbers, a string, or a list of numbers); None when absent. Arrays
        of strings come back as their length only, as a list of None (the tokenizer's vocabulary
        is large and only its size is ever needed here)."""
        key_id = self._key(key)
        if key_id < 0:
            return None
        kv_type = native_function("gguf_get_kv_type", ctypes.c_int, _ptr, ctypes.c_int64)(self._ctx, key_id)
        if kv_type == _GGUF_STRING:
            return _text(native_function("gguf_get_val_str", ctypes.c_char_p, _ptr, ctypes.c_int64)(self._ctx, key_id))
        if kv_type == _GGUF_ARRAY:
            return self._array(key_id)
        element = _GGUF_SCALARS.get(kv_type)
        if element is None:
            return None
        data = native_function("gguf_get_val_data", _ptr, _ptr, ctypes.c_int64)(self._ctx, key_id)
        return ctypes.cast(data, ctypes.POINTER(element))[0]

    def _array(self, key_id: int) -> list[Any]:
        n = native_function("gguf_get_arr_n", _size_t, _ptr, ctypes.c_int64)(self._ctx, key_id)
        arr_type = native_function("gguf_get_arr_type", ctypes.c_int, _ptr, ctypes.c_int64)(self._ctx, key_id)
        element = _GGUF_SCALARS.get(arr_type)
        if element is None:  # strings (or nested arrays): only the count matters to us
            return [None] * n
        data = native_function("gguf_get_arr_data", _ptr, _ptr, ctypes.c_int64)(self._ctx, key_id)
        return list(ctypes.cast(data, ctypes.POINTER(element * n)).contents) if n else []

    def tensor_sizes(self) -> dict[str, int]:
        """Bytes of each tensor in this file, by name."""
        count = native_function("gguf_get_n_tensors", ctypes.c_int64, _ptr)(self._ctx)
        name = native_function("gguf_get_tensor_name", ctypes.c_char_p, _ptr, ctypes.c_int64)
        size = native_function("gguf_get_tensor_size", _size_t, _ptr, ctypes.c_int64)
        return {_text(name(self._ctx, i)): size(self._ctx, i) for i in range(count)}
