"""Ollama's model management: `/api/tags`, `/api/show`, `/api/ps`, `/api/version`, `/api/delete`,
and how an Ollama model name finds one of ours.

Names: Ollama clients write `name:tag` and default the tag to `latest`. A name the registry does
not know as written, ending in `:latest`, is looked up without it (`smollm2:latest` is our
`smollm2`). Models are listed under our own ids, untagged, so that the same names work on `/v1`.

`digest` is the sha256 of the file's path, size and modification time, not of its bytes (hashing
gigabytes for a listing would take minutes); it changes when the file does.

Deleting: Fireside deletes only what `fireside pull` (or `/api/pull`) downloaded: a model of the
config whose file lies in the models folder loses its config entry and its files (split parts
and projector included). A model given on the command line, or one whose file lives elsewhere,
is refused with the reason: its file is the user's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import llama_cpp

from app.api.ollama.wire import OllamaModelDetails
from app.pipeline.chat_formats import chat_format
from app.pipeline.errors import ApiError, BadRequest
from app.settings.locations import models_dir
from backends.embedder import Pooling, declared_pooling
from backends.llama_model import LlamaModel, ModelLoadError, ModelOptions
from backends.model_file import gguf_parts
from backends.registry import ModelRegistry, ModelSpec, ServedModel

# The Ollama API level these routes follow (apps compare it to gate features such as `think`).
OLLAMA_API_VERSION = "0.12.0"
_FILE_TYPES = {getattr(llama_cpp, name): name.split("_", 3)[-1]
               for name in dir(llama_cpp) if name.startswith(("LLAMA_FTYPE_MOSTLY_", "LLAMA_FTYPE_ALL_"))}


class OllamaModelNotFound(ApiError):
    status_code = 404
    error_type = "not_found_error"

    def __init__(self, model: str):
        super().__init__(f"model '{model}' not found", param="model", code="model_not_found")


def resolve(registry: ModelRegistry, name: str) -> ModelSpec:
    """The model an Ollama name means (404 in Ollama's words when none)."""
    spec = registry.knows(name)
    if spec is None and name.endswith(":latest"):
        spec = registry.knows(name.removesuffix(":latest"))
    if spec is None:
        raise OllamaModelNotFound(name)
    return spec


def iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat().replace("+00:00", "Z")


def file_size(spec: ModelSpec) -> int:
    return sum(part.stat().st_size for part in gguf_parts(spec.path))


def digest(spec: ModelSpec) -> str:
    try:
        stat = spec.path.stat()
    except OSError:
        return ""
    return hashlib.sha256(f"{spec.path}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()


def modified_at(spec: ModelSpec) -> str:
    try:
        return iso(spec.path.stat().st_mtime)
    except OSError:
        return iso(0)


def _value(text: str) -> Any:
    for kind in (int, float):
        with contextlib.suppress(ValueError):
            return kind(text)
    return text


def read_metadata(model: LlamaModel) -> dict[str, Any]:
    """The GGUF's key/value metadata, arrays left out (as Ollama's `/api/show` leaves them empty)."""
    import ctypes

    info: dict[str, Any] = {}
    handle = model.handle
    for i in range(llama_cpp.llama_model_meta_count(handle)):
        buffer = ctypes.create_string_buffer(512)
        if llama_cpp.llama_model_meta_key_by_index(handle, i, buffer, 512) < 0:
            continue
        key = buffer.value.decode("utf-8", errors="replace")
        if key.startswith("tokenizer.ggml.") and key not in ("tokenizer.ggml.model", "tokenizer.ggml.pre") \
                or key == "tokenizer.chat_template":
            continue
        value = model.metadata(key)
        if value is not None:
            info[key] = _value(value)
    info["general.parameter_count"] = int(llama_cpp.llama_model_n_params(handle))
    return info


@functools.lru_cache(maxsize=64)
def _file_facts(path: Path, _mtime_ns: int) -> dict[str, Any]:
    """Metadata of a model that is not loaded (its vocabulary only, no weights); {} when unreadable."""
    try:
        model = LlamaModel(path, ModelOptions(vocab_only=True))
    except ModelLoadError:
        return {}
    try:
        return read_metadata(model)
    finally:
        model.close()


def weights_of(registry: ModelRegistry, spec: ModelSpec) -> ModelSpec:
    """The model whose weights serve `spec`: a LoRA adapter's base, else itself."""
    base = registry.knows(spec.base) if spec.base is not None else None
    return base if base is not None else spec


async def metadata(spec: ModelSpec, served: ServedModel | None) -> dict[str, Any]:
    """The GGUF metadata of `spec`'s weights (a LoRA adapter's: give its base's spec, see `weights_of`)."""
    if served is not None:
        return read_metadata(served.model)
    try:
        mtime = spec.path.stat().st_mtime_ns
    except OSError:
        return {}
    return await asyncio.to_thread(_file_facts, spec.path, mtime)


def _parameter_size(info: dict[str, Any]) -> str:
    label = info.get("general.size_label")
    if isinstance(label, str) and label:
        return label
    count = info.get("general.parameter_count") or 0
    if not count:
        return ""
    return f"{count / 1e9:.1f}B" if count >= 1e9 else f"{count / 1e6:.0f}M"


def details(info: dict[str, Any], parent: str | None = None) -> OllamaModelDetails:
    """`parent`: a LoRA adapter's base model (the weights `info` describes)."""
    family = str(info.get("general.architecture", ""))
    file_type = info.get("general.file_type")
    return OllamaModelDetails(parent_model=parent or "", format="gguf", family=family, families=[family] if family else [],
                        parameter_size=_parameter_size(info),
                        quantization_level=_FILE_TYPES.get(file_type, "") if isinstance(file_type, int) else "")


def capabilities(served: ServedModel | None, info: dict[str, Any]) -> list[str]:
    """Ollama's words: completion, tools, thinking, vision, insert, embedding. Tools and thinking
    are read from the chat template, so they are known once the model is loaded."""
    if served is None:
        return ["completion"] if info else []
    pooling = declared_pooling(served.model)
    if pooling != Pooling.none:
        return ["embedding"]
    chat = chat_format(served)
    found = ["completion", "tools"]  # a template that shows no tools gets them described in the prompt
    if chat.family.reasons:
        found.append("thinking")
    if served.projector is not None and served.projector.vision:
        found.append("vision")
    vocab = served.model.vocab
    if min(llama_cpp.llama_vocab_fim_pre(vocab), llama_cpp.llama_vocab_fim_suf(vocab),
           llama_cpp.llama_vocab_fim_mid(vocab)) >= 0:
        found.append("insert")
    return found


def expires_at(registry: ModelRegistry, spec: ModelSpec) -> str:
    at = registry.expires_at(spec.id)
    if at is None:
        return "9999-12-31T23:59:59Z"  # kept loaded for good
    return iso(time.time() + at - time.monotonic())


def in_models_folder(path: Path) -> bool:
    try:
        path.resolve().relative_to(models_dir().resolve())
    except ValueError:
        return False
    return True


def deletable(spec: ModelSpec) -> None:
    """400 with the reason for a model whose files Fireside must not delete."""
    if spec.eager:
        raise BadRequest(f"{spec.id} was given on the command line: its file is yours, not one Fireside downloaded; "
                         "stop the server to stop serving it", param="model")
    if not in_models_folder(spec.path):
        raise BadRequest(f"{spec.id}'s file {spec.path} is outside the models folder ({models_dir()}): Fireside "
                         "deletes only what `fireside pull` downloaded; remove it from the config instead",
                         param="model")
