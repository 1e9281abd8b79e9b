"""A loaded GGUF model: weights, vocabulary, tokenizer and metadata through llama.cpp's C API.

Only the engine's scheduler thread decodes; tokenizing and reading metadata are read-only on
the model and safe from any thread.
"""

from __future__ import annotations

import ctypes
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp

from backends import cpu_repack
from backends.llama_log import init_backend
from backends.tensor_placement import OverrideError, TensorOverride, override_array

load_log = logging.getLogger("fireside.load")


class ModelLoadError(Exception):
    """A model file that is missing or that llama.cpp cannot load."""


class LoadProgress:
    """`loading NAME: 40%` lines while llama.cpp loads weights, so a person starting the server
    sees a big model move: the first call, then at most one line per `interval` seconds (on a new
    percentage), and 100% when done. llama.cpp calls it per tensor from the loading thread."""

    def __init__(self, name: str, interval: float = 1.0):
        self.name = name
        self.interval = interval
        self._last_time: float | None = None
        self._last_percent = -1
        self.callback = llama_cpp.llama_progress_callback(self._on_progress)  # kept alive with self

    def _on_progress(self, progress: float, _user: ctypes.c_void_p) -> bool:
        try:
            self.report(progress)
        except Exception:  # noqa: BLE001 - an exception must not cross into C
            pass
        return True  # go on loading

    def report(self, progress: float) -> None:
        percent = max(0, min(100, int(progress * 100)))
        now = time.monotonic()
        due = self._last_time is None or (now - self._last_time >= self.interval and percent > self._last_percent)
        if (due or percent == 100) and percent != self._last_percent:
            self._last_time, self._last_percent = now, percent
            load_log.info("loading %s: %d%%", self.name, percent)


@dataclass(frozen=True)
class ModelOptions:
    gpu_layers: int = 0
    # Off: the weights are read into memory the process owns. A mapped file that another program
    # truncates or rewrites under a loaded model kills the whole server with SIGBUS at its next
    # decode; read, the loaded model is immune to anything done to its file. The cost, measured on
    # SmolLM2-135M (94 MiB) and Gemma 3 270M (241 MiB) from a warm page cache: loads 0.1 to 0.5 s
    # slower, the same resident memory but anonymous (not shared by two loads of one file, and
    # swapped rather than dropped under pressure). Ollama turns mmap off for CPU loads too.
    use_mmap: bool = False
    vocab_only: bool = False  # metadata and tokenizer without the weights (reading a template)
    # the devices (ggml_backend_dev_t) to offload to, in order: RPC workers' first, then this
    # machine's GPUs (backends/rpc_models.py); empty: llama.cpp's own choice of this machine's
    devices: tuple[int, ...] = ()
    tensor_split: tuple[float, ...] = ()  # each device's share of the offloaded layers (default: by free memory)
    # tensors sent to another device than `gpu_layers` gives them (--cpu-moe, --override-tensor)
    tensor_overrides: tuple[TensorOverride, ...] = ()
    # llama.cpp's extra CPU buffer types (weights repacked for AMX, AVX2, NEON); None: as the
    # process's policy decides for the file (backends/cpu_repack.py: off where they crash)
    cpu_repack: bool | None = None


def _set_load_mode(params: llama_cpp.llama_model_params, use_mmap: bool) -> None:
    """Builds differ: llama.cpp's older `use_mmap` flag, or its newer `load_mode` enum (whose
    AUTO maps the file). A ctypes Structure takes any attribute name silently, so the field
    is looked up rather than assigned blindly."""
    fields = {name for name, *_ in llama_cpp.llama_model_params._fields_}
    if "load_mode" in fields:
        params.load_mode = llama_cpp.LLAMA_LOAD_MODE_MMAP if use_mmap else llama_cpp.LLAMA_LOAD_MODE_NONE
    elif "use_mmap" in fields:
        params.use_mmap = use_mmap
    else:
        raise ModelLoadError("this llama.cpp build has neither load_mode nor use_mmap in its model parameters")


def _place_layers(params: llama_cpp.llama_model_params, options: ModelOptions) -> list[Any]:
    """The devices, the share of layers each takes and the tensors sent elsewhere, when the
    options name them; what llama.cpp reads during the load, to keep alive until then."""
    kept: list[Any] = []
    if options.tensor_overrides:
        try:
            overrides, patterns = override_array(options.tensor_overrides)
        except OverrideError as error:
            raise ModelLoadError(str(error)) from None
        params.tensor_buft_overrides = ctypes.cast(overrides, ctypes.c_void_p)
        kept += [overrides, patterns]
    if options.devices:
        array = (ctypes.c_void_p * (len(options.devices) + 1))(*options.devices, None)
        params.devices = ctypes.cast(array, ctypes.c_void_p)
        kept.append(array)
    if options.tensor_split:
        most = llama_cpp.llama_max_devices()
        if len(options.tensor_split) > most:
            raise ModelLoadError(f"tensor_split has {len(options.tensor_split)} shares; this build splits over "
                                 f"at most {most} devices")
        shares = (ctypes.c_float * most)(*options.tensor_split)
        params.tensor_split = shares
        kept.append(shares)
    return kept


def _set_repack(params: llama_cpp.llama_model_params, path: Path, options: ModelOptions) -> bool:
    """Whether the load may use llama.cpp's extra CPU buffer types (its default), as the options
    or the process's policy say; builds without the field always may."""
    if options.vocab_only or "use_extra_bufts" not in {name for name, *_ in llama_cpp.llama_model_params._fields_}:
        return True
    repack = options.cpu_repack
    if repack is None:
        repack = cpu_repack.policy().repack(path, gpu_layers=options.gpu_layers)
    params.use_extra_bufts = repack
    return repack


class LlamaModel:
    """Owns a `llama_model` and its vocabulary."""

    def __init__(self, path: Path, options: ModelOptions):
        llama_log = init_backend()
        if not path.is_file():
            raise ModelLoadError(f"model file not found: {path}")
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = options.gpu_layers
        _set_load_mode(params, options.use_mmap)
        params.vocab_only = options.vocab_only
        progress = None if options.vocab_only else LoadProgress(path.name)
        if progress is not None:
            params.progress_callback = progress.callback
        kept = _place_layers(params, options)  # arrays llama.cpp reads during the load
        self.cpu_repack = _set_repack(params, path, options)
        llama_log.errors.clear()
        with llama_log.thread_placements() as placed:
            self._model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        del kept
        # tensor -> buffer type, for the tensors an override placed (ModelOptions.tensor_overrides)
        self.overridden: dict[str, str] = placed.overridden
        self.layer_devices: dict[int, str] = placed.layers  # layer (n_layer: the output head) -> device
        self.buffers: dict[str, float] = placed.buffers  # the weights' buffer types -> MiB
        if not self._model:
            # The first error line says why (a bad header, an unknown architecture, ...).
            reason = llama_log.errors[0] if llama_log.errors else "llama.cpp could not read it"
            raise ModelLoadError(f"cannot load model {path}: {reason}")
        self.path = path
        self.vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab: int = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.n_ctx_train: int = llama_cpp.llama_model_n_ctx_train(self._model)
        self.add_bos: bool = llama_cpp.llama_vocab_get_add_bos(self.vocab)
        self.bos_token_id: int = llama_cpp.llama_vocab_bos(self.vocab)
        self.eos_token_id: int = llama_cpp.llama_vocab_eos(self.vocab)
        self.eog_token_ids: tuple[int, ...] = tuple(
            t for t in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(self.vocab, t)
        )
        self._piece_buffer = ctypes.create_string_buffer(256)
        architecture = self.metadata("general.architecture") or ""
        self.expert_count = int(self.metadata(f"{architecture}.expert_count") or 0)  # 0: a dense model

    @property
    def handle(self) -> llama_cpp.llama_model_p:
        return self._model

    def close(self) -> None:
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None

    def metadata(self, key: str) -> str | None:
        size = 4096
        while True:
            buffer = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_model_meta_val_str(self._model, key.encode(), buffer, size)
            if n < 0:
                return None
            if n < size:
                return buffer.raw[:n].decode("utf-8", errors="replace")
            size = n + 1

    def chat_template(self) -> str | None:
        template = llama_cpp.llama_model_chat_template(self._model, None)
        return template.decode("utf-8") if template else None

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 8
        tokens = (llama_cpp.llama_token * capacity)()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), tokens, capacity, add_special, parse_special)
        if n < 0:
            capacity = -n
            tokens = (llama_cpp.llama_token * capacity)()
            n = llama_cpp.llama_tokenize(self.vocab, data, len(data), tokens, capacity, add_special, parse_special)
        return tokens[:n]

    def token_bytes(self, token: int, *, special: bool = False) -> bytes:
        """The bytes of one token's piece. Not thread-safe: the scheduler thread's call."""
        buffer = self._piece_buffer
        n = llama_cpp.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, special)
        if n < 0:
            buffer = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, special)
        return buffer.raw[:n]

    def token_piece(self, token: int, *, special: bool = True) -> bytes:
        """The bytes of one token's piece, like `token_bytes` but safe from any thread: each call
        has a buffer of its own (the event loop renders logprobs while the scheduler decodes)."""
        buffer = ctypes.create_string_buffer(32)
        n = llama_cpp.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, special)
        if n < 0:
            buffer = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, special)
        return buffer.raw[:n]

    def detokenize(self, tokens: list[int], *, special: bool = True) -> str:
        if not tokens:
            return ""
        array = (llama_cpp.llama_token * len(tokens))(*tokens)
        capacity = max(64, len(tokens) * 16)
        buffer = ctypes.create_string_buffer(capacity)
        n = llama_cpp.llama_detokenize(self.vocab, array, len(tokens), buffer, capacity, False, special)
        if n < 0:
            capacity = -n
            buffer = ctypes.create_string_buffer(capacity)
            n = llama_cpp.llama_detokenize(self.vocab, array, len(tokens), buffer, capacity, False, special)
        return buffer.raw[:n].decode("utf-8", errors="replace")

    def token_text(self, token: int) -> str:
        return self.detokenize([token], special=True)

    def is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))
