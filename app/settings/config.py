"""The model registry's config file: which models this install serves, and how.

```toml
max_loaded = 2              # models kept loaded at once (least recently used unloads first)
memory_budget = "12GiB"     # bytes the loaded models may take together
gpu_memory = "10GiB"        # the most each GPU may take for the models (default: its free memory less 1 GiB)
prompt_cache_disk = "1GiB"  # slots' prompt caches kept on disk across restarts ("0": none)
cache_ram = "4GiB"          # the prompt cache in host memory ("0": none; default: a quarter of free memory, <= 8GiB)
cpu_repack = false          # load without llama.cpp's extra CPU buffer types (AMX, repacked weights; --no-repack)

[[models]]
id = "qwen2.5-7b"                                  # the name requests use
file = "Qwen/Qwen2.5-7B-Instruct-GGUF/qwen2.5-7b-instruct-q4_k_m.gguf"  # under the models folder, or absolute
aliases = ["qwen"]
context_size = 8192        # tokens per request (0: the model's own, at most 4096)
gpu_layers = "auto"        # a number, -1 for all, or "auto" (default): the fit, experts to the CPU first
cache_type = "q8_0"        # the KV cache's element type: f16 (default), q8_0 or q4_0 (less memory)
swa_full = true            # sliding-window layers (Gemma, gpt-oss) keep every position (default: their window)
draft = "off"              # automatic drafts by prompt lookup: "auto" (default) or "off"
draft_model = "Qwen/.../qwen2.5-0.5b-instruct-q8_0.gguf"  # a small model of the same vocabulary drafts for it
chat_template = "templates/qwen.jinja"             # replaces the GGUF's own (relative to this file)
keep_alive = "5m"          # unloaded after this long unused ("0": at once, "-1": never)
mmproj = "Qwen/.../mmproj.gguf"                    # a multimodal projector beside the model
pooling = "last"           # how /v1/embeddings pools: "mean", "cls", "last" (the default: the GGUF's own,
                           # else last-token for a generative model), "rank"
rpc = ["192.168.1.20:50052"]   # `fireside worker`s whose devices take its layers (all, unless gpu_layers)
tensor_split = [3, 1]      # the share of layers per device, the workers' first (default: by free memory)
cpu_moe = true             # a mixture-of-experts model's expert tensors stay in system memory (n_cpu_moe = N:
                           # those of the first N blocks); override_tensor = ["REGEX=DEVICE"] places any tensor

[models.sampling]          # defaults for requests that leave these fields out
temperature = 0.7
top_p = 0.9

[[models]]                 # a LoRA fine-tune served on the weights of the model with id "qwen2.5-7b"
id = "qwen-support-bot"
base = "qwen2.5-7b"                                # another entry's id (or a --model's)
lora = "me/support-lora/support-lora-f16.gguf"     # the adapter GGUF (convert_lora_to_gguf.py), under the models folder
lora_scale = 1.0           # how strongly it applies (0: the base's own output)
                           # an adapter entry may also set aliases, keep_alive, sampling and chat_template

[[models]]                 # a model that runs on another OpenAI-compatible server (vLLM, Fireworks, a Fireside)
id = "llama-70b"
upstream = "https://gpu-box.lan:8000/v1"           # its OpenAI base URL; every front door forwards there
api_key_env = "GPU_BOX_KEY"                        # the environment variable holding its bearer key
model = "meta-llama/Llama-3.3-70B-Instruct"        # its name there (default: the id)
```

Read with the standard library's TOML rules through tomlkit, which also edits the file (`fireside
pull` adds an entry, `fireside rm` removes one) without losing the user's comments and layout.
An error names the file, the line and the key (`config.toml:7: models[0].gpu_layers: ...`). Every
edit replaces the file at once (a new file beside it, synced, then renamed over it), so a reader
(a running server loading a model, `fireside models`) sees the old config or the new one, never
half of one; a running server reads a model's entry again each time it loads that model.
"""

from __future__ import annotations

import difflib
import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import tomlkit
from tomlkit.exceptions import TOMLKitError

from app.settings import sizes
from app.settings.atomic_file import replace_file
from app.settings.locations import config_file, models_dir
from app.settings.toml_places import Places
from backends.rpc_endpoint import Endpoint, parse_endpoints
from backends.settings import CACHE_TYPES, DRAFT_MODES, parse_tensor_split
from backends.tensor_placement import TensorOverride, expert_overrides, parse_overrides

if TYPE_CHECKING:  # imported where they are made: reading the config loads neither llama.cpp nor httpx
    from backends.registry import ModelSpec
    from backends.upstream import Upstream

DEFAULT_KEEP_ALIVE = 300.0  # seconds
FOREVER = float("inf")
SAMPLING_FIELDS = frozenset({
    "temperature", "top_p", "top_k", "min_p", "typical_p", "frequency_penalty", "presence_penalty",
    "repetition_penalty", "max_tokens", "stop", "seed", "mirostat_target", "mirostat_lr",
})

GpuLayers = int | Literal["auto"]


class ConfigError(ValueError):
    """The config file cannot be read or says something impossible; the message names the place."""


POOLINGS = ("mean", "cls", "last", "rank")


@dataclass(frozen=True)
class ModelEntry:
    id: str
    file: Path  # absolute
    aliases: tuple[str, ...] = ()
    context_size: int = 0
    gpu_layers: GpuLayers = "auto"
    chat_template: Path | None = None  # absolute
    keep_alive: float = DEFAULT_KEEP_ALIVE  # seconds; FOREVER: never unloaded
    sampling: dict[str, Any] = field(default_factory=dict)
    mmproj: Path | None = None
    pooling: str | None = None  # a `backends.embedder.Pooling` name
    cache_type: str | None = None  # the KV cache's element type; None: --cache-type
    swa_full: bool | None = None  # sliding-window layers keep the whole context; None: --swa-full
    draft: str | None = None  # automatic drafts, "auto" or "off"; None: --draft
    draft_model: Path | None = None  # absolute
    rpc: tuple[Endpoint, ...] = ()  # RPC workers whose devices take its layers
    tensor_split: tuple[float, ...] = ()  # the share of layers on each device (the workers' first)
    tensor_overrides: tuple[TensorOverride, ...] = ()  # cpu_moe, n_cpu_moe, override_tensor
    upstream: Upstream | None = None  # runs on another server; `file` is then its URL, not a file
    base: str | None = None  # a LoRA adapter on the model of this id; `file` is then the adapter (`lora`)
    lora_scale: float = 1.0
    source: Path | None = field(default=None, compare=False)  # the config file it was read from

    @property
    def names(self) -> tuple[str, ...]:
        return (self.id, *self.aliases)


@dataclass(frozen=True)
class Config:
    path: Path
    models: tuple[ModelEntry, ...] = ()
    max_loaded: int | None = None
    memory_budget: int | None = None  # bytes
    prompt_cache_disk: int | None = None  # bytes
    cache_ram: int | None = None  # bytes of the RAM prompt cache (`--cache-ram`)
    gpu_memory: int | None = None  # bytes each offload device may take (`--gpu-memory`)
    cpu_repack: bool = True  # false: no model uses llama.cpp's extra CPU buffer types (`--no-repack`)

    def find(self, name: str) -> ModelEntry | None:
        for entry in self.models:
            if name in entry.names:
                return entry
        return None


_DURATION = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: str | float, where: str) -> float:
    """Seconds from `300`, `"90s"`, `"5m"`, `"1h"`; a negative value means forever."""
    if isinstance(value, bool):
        raise ConfigError(f"{where}: expected a duration like \"5m\", got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        match = _DURATION.match(value)
        if not match:
            raise ConfigError(f"{where}: expected a duration like \"5m\", \"90s\" or \"-1\", got {value!r}")
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    return FOREVER if seconds < 0 else seconds


def parse_size(value: str | int, where: str) -> int:
    """Bytes from `123456`, `"8GiB"`, `"500MB"`."""
    if isinstance(value, bool) or (isinstance(value, int) and value < 1):
        raise ConfigError(f"{where}: expected a size like \"8GiB\", got {value!r}")
    if isinstance(value, int):
        return value
    try:
        return sizes.parse_size(value)
    except ValueError as error:
        raise ConfigError(f"{where}: {error}") from None


def parse_gpu_layers(value: Any, where: str) -> GpuLayers:
    if value == "auto":
        return "auto"
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise ConfigError(f"{where}: gpu_layers is a number of layers, -1 (all) or \"auto\", got {value!r}")
    return value


def _path(value: Any, base: Path, where: str) -> Path:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: expected a path, got {value!r}")
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


MODEL_KEYS = frozenset({"id", "file", "aliases", "context_size", "gpu_layers", "chat_template", "keep_alive",
                        "sampling", "mmproj", "pooling", "cache_type", "swa_full", "draft", "draft_model", "rpc",
                        "tensor_split", "upstream", "api_key_env", "model", "base", "lora", "lora_scale", "cpu_moe", "n_cpu_moe",
                        "override_tensor"})
ADAPTER_KEYS = ("id", "aliases", "base", "lora", "lora_scale", "keep_alive", "sampling", "chat_template")
TOP_LEVEL_KEYS = frozenset({"models", "max_loaded", "memory_budget", "prompt_cache_disk", "gpu_memory",
                            "cpu_repack", "cache_ram"})


def _unknown(names: Any, known: frozenset[str]) -> tuple[str, str] | None:
    """The first name not in `known`, and `unknown key 'contxt_size' (did you mean 'context_size'?
    known: ...)`; None when all are known."""
    unknown = set(names) - known
    if not unknown:
        return None
    name = min(unknown)
    close = difflib.get_close_matches(name, sorted(known), n=1)
    guess = f"did you mean {close[0]!r}? " if close else ""
    return name, f"unknown key {name!r} ({guess}known: {', '.join(sorted(known))})"


def _entry(raw: Any, index: int, places: Places) -> ModelEntry:
    def where(*key: str) -> str:
        return places.where(("models", index, *key))

    if not isinstance(raw, dict):
        raise ConfigError(f"{where()}: expected a table")
    unknown = _unknown(raw, MODEL_KEYS)
    if unknown:
        name, complaint = unknown
        raise ConfigError(f"{places.where(('models', index), line_of=('models', index, name))}: {complaint}")
    model_id = raw.get("id")
    if not isinstance(model_id, str) or not model_id:
        raise ConfigError(f"{where()}: id is required")
    aliases = raw.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a for a in aliases):
        raise ConfigError(f"{where('aliases')}: aliases is a list of names")
    context = raw.get("context_size", 0)
    if isinstance(context, bool) or not isinstance(context, int) or context < 0:
        raise ConfigError(f"{where('context_size')}: context_size is a number of tokens")
    pooling = raw.get("pooling")
    if pooling is not None and pooling not in POOLINGS:
        raise ConfigError(f"{where('pooling')}: pooling is one of {', '.join(POOLINGS)}, got {pooling!r}")
    cache_type = raw.get("cache_type")
    if cache_type is not None and cache_type not in CACHE_TYPES:
        raise ConfigError(f"{where('cache_type')}: cache_type is one of {', '.join(CACHE_TYPES)}, got {cache_type!r}")
    swa_full = raw.get("swa_full")
    if swa_full is not None and not isinstance(swa_full, bool):
        raise ConfigError(f"{where('swa_full')}: swa_full is true or false")
    draft = raw.get("draft")
    if draft is not None and draft not in DRAFT_MODES:
        raise ConfigError(f"{where('draft')}: draft is one of {', '.join(DRAFT_MODES)}, got {draft!r}")
    rpc, tensor_split = _placement(raw, where)
    sampling = raw.get("sampling", {})
    if not isinstance(sampling, dict):
        raise ConfigError(f"{where('sampling')}: sampling is a table ([models.sampling])")
    unknown = _unknown(sampling, SAMPLING_FIELDS)
    if unknown:
        name, complaint = unknown
        line_of = ("models", index, "sampling", name)
        raise ConfigError(f"{places.where(('models', index, 'sampling'), line_of=line_of)}: {complaint}")
    config_path = places.path
    base, lora_scale = _adapter(raw, model_id, where)
    upstream = _upstream(raw, model_id, where) if base is None else None
    if base is not None:
        file = _path(raw.get("lora"), models_dir(), where("lora"))
    else:
        file = _path(raw.get("file"), models_dir(), where("file")) if upstream is None else Path(upstream.url)
    return ModelEntry(
        id=model_id,
        file=file,
        aliases=tuple(aliases),
        context_size=context,
        gpu_layers=parse_gpu_layers(raw.get("gpu_layers", "auto"), where("gpu_layers")),
        chat_template=_path(raw["chat_template"], config_path.parent, where("chat_template"))
        if "chat_template" in raw else None,
        keep_alive=parse_duration(raw.get("keep_alive", DEFAULT_KEEP_ALIVE), where("keep_alive")),
        sampling=dict(sampling),
        mmproj=_path(raw["mmproj"], models_dir(), where("mmproj")) if "mmproj" in raw else None,
        pooling=pooling,
        cache_type=cache_type,
        swa_full=swa_full,
        draft=draft,
        draft_model=_path(raw["draft_model"], models_dir(), where("draft_model")) if "draft_model" in raw else None,
        rpc=rpc,
        tensor_split=tensor_split,
        tensor_overrides=_tensor_overrides(raw, where),
        upstream=upstream,
        base=base,
        lora_scale=lora_scale,
        source=config_path,
    )


def _tensor_overrides(raw: dict[str, Any], where: Callable[..., str]) -> tuple[TensorOverride, ...]:
    """`cpu_moe` (true: every expert tensor on the CPU), `n_cpu_moe` (those of the first N blocks)
    and `override_tensor` ("REGEX=DEVICE", a list of them, or one comma-separated string)."""
    cpu_moe, n_cpu_moe = raw.get("cpu_moe", False), raw.get("n_cpu_moe", 0)
    if not isinstance(cpu_moe, bool):
        raise ConfigError(f"{where('cpu_moe')}: cpu_moe is true or false, got {cpu_moe!r}")
    if isinstance(n_cpu_moe, bool) or not isinstance(n_cpu_moe, int) or n_cpu_moe < 0:
        raise ConfigError(f"{where('n_cpu_moe')}: n_cpu_moe is a number of blocks, got {n_cpu_moe!r}")
    value = raw.get("override_tensor", [])
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
        raise ConfigError(f"{where('override_tensor')}: override_tensor is a list of \"REGEX=DEVICE\"")
    try:
        given = tuple(override for text in texts for override in parse_overrides(text))
    except ValueError as error:
        raise ConfigError(f"{where('override_tensor')}: {error}") from None
    return expert_overrides(cpu_moe, n_cpu_moe) + given


def _adapter(raw: dict[str, Any], model_id: str, where: Callable[..., str]) -> tuple[str | None, float]:
    """`base`, `lora` and `lora_scale` of a LoRA adapter served on another entry's model; (None, 1.0)
    for a model of its own."""
    if "base" not in raw:
        for key in ("lora", "lora_scale"):
            if key in raw:
                raise ConfigError(f"{where(key)}: {key} goes with base (the id of the model the adapter applies to)")
        return None, 1.0
    base = raw["base"]
    if not isinstance(base, str) or not base:
        raise ConfigError(f"{where('base')}: base is the id of the model the LoRA adapter applies to")
    if base == model_id:
        raise ConfigError(f"{where('base')}: {model_id} cannot be its own base")
    if "lora" not in raw:
        raise ConfigError(f"{where()}: {model_id} has a base but no lora (the adapter GGUF file)")
    other = next((key for key in raw if key not in ADAPTER_KEYS), None)
    if other is not None:
        raise ConfigError(f"{where(other)}: {other} does not apply to {model_id}, a LoRA adapter on {base} "
                          f"(its base's entry sets it)")
    scale = raw.get("lora_scale", 1.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise ConfigError(f"{where('lora_scale')}: lora_scale is a number such as 0.5, got {scale!r}")
    return base, float(scale)


# what only a model loaded here has: none of it applies to one that runs upstream
LOCAL_KEYS = ("file", "context_size", "gpu_layers", "chat_template", "keep_alive", "mmproj", "pooling", "cache_type",
              "swa_full", "draft", "draft_model", "rpc", "tensor_split", "cpu_moe", "n_cpu_moe", "override_tensor")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _upstream(raw: dict[str, Any], model_id: str, where: Callable[..., str]) -> Upstream | None:
    """`upstream` (an http(s) URL), `api_key_env` and `model`; None for a model served here."""
    if "upstream" not in raw:
        for key in ("api_key_env", "model"):
            if key in raw:
                raise ConfigError(f"{where(key)}: {key} goes with upstream (a model that runs on another server)")
        return None
    url = raw["upstream"]
    if not isinstance(url, str) or not re.match(r"^https?://[^/\s]+", url):
        raise ConfigError(f"{where('upstream')}: upstream is the OpenAI base URL of another server, like "
                          f"\"https://HOST/v1\", got {url!r}")
    local = next((key for key in LOCAL_KEYS if key in raw), None)
    if local is not None:
        raise ConfigError(f"{where(local)}: {local} does not apply to {model_id}, which runs upstream at {url}")
    key_env = raw.get("api_key_env")
    if key_env is not None and (not isinstance(key_env, str) or not _ENV_NAME.match(key_env)):
        raise ConfigError(f"{where('api_key_env')}: api_key_env is the name of an environment variable holding "
                          f"the upstream's key, like \"FIREWORKS_API_KEY\", got {key_env!r}")
    name = raw.get("model")
    if name is not None and (not isinstance(name, str) or not name):
        raise ConfigError(f"{where('model')}: model is the model's name on the upstream server")
    from backends.upstream import Upstream

    return Upstream(url.rstrip("/"), key_env, name)


def _placement(raw: dict[str, Any], where: Callable[..., str]) -> tuple[tuple[Endpoint, ...], tuple[float, ...]]:
    """`rpc` (a list of "HOST:PORT", or one comma-separated string) and `tensor_split`."""
    rpc: tuple[Endpoint, ...] = ()
    if "rpc" in raw:
        value = raw["rpc"]
        if not isinstance(value, str) and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise ConfigError(f"{where('rpc')}: rpc is a list of \"HOST:PORT\" workers")
        try:
            rpc = parse_endpoints(value)
        except ValueError as error:
            raise ConfigError(f"{where('rpc')}: {error}") from None
    split: tuple[float, ...] = ()
    if "tensor_split" in raw:
        try:
            split = parse_tensor_split(raw["tensor_split"])
        except ValueError as error:
            raise ConfigError(f"{where('tensor_split')}: {error}") from None
    return rpc, split


def _parse(path: Path, text: str) -> tuple[tomlkit.TOMLDocument, Places]:
    places = Places(path, text)
    try:
        return tomlkit.parse(text), places
    except TOMLKitError as error:
        raise ConfigError(places.syntax_error(error)) from None


def load_config(path: Path | None = None) -> Config:
    """The config at `path` (default: the platform's config file); an empty one when missing."""
    path = path or config_file()
    try:
        text = path.read_text(encoding="utf-8")  # one read: the whole file as one edit left it
    except FileNotFoundError:
        return Config(path)
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: {error}") from None
    parsed, places = _parse(path, text)
    document = parsed.unwrap()
    unknown = _unknown(document, TOP_LEVEL_KEYS)
    if unknown:
        name, complaint = unknown
        raise ConfigError(f"{places.where((), line_of=(name,))}: {complaint}")
    raw_models = document.get("models", [])
    if not isinstance(raw_models, list):
        raise ConfigError(f"{places.where(('models',))}: models is an array of tables ([[models]])")
    models = tuple(_entry(raw, i, places) for i, raw in enumerate(raw_models))
    seen: dict[str, str] = {}
    for index, entry in enumerate(models):
        for name in entry.names:
            if name in seen:
                key = ("models", index, "id" if name == entry.id else "aliases")
                raise ConfigError(f"{places.where(key)}: the name {name!r} is used by {seen[name]!r} and {entry.id!r}")
            seen[name] = entry.id
    named = {name: entry for entry in models for name in entry.names}
    for index, entry in enumerate(models):
        base = named.get(entry.base) if entry.base is not None else None  # else maybe a command-line model
        if base is not None and (base.base is not None or base.upstream is not None):
            what = "another LoRA adapter" if base.base is not None else "a model that runs upstream"
            raise ConfigError(f"{places.where(('models', index, 'base'))}: {entry.id}'s base {entry.base!r} is {what}; "
                              "an adapter applies to a model loaded here")
    max_loaded = document.get("max_loaded")
    if max_loaded is not None and (isinstance(max_loaded, bool) or not isinstance(max_loaded, int) or max_loaded < 1):
        raise ConfigError(f"{places.where(('max_loaded',))}: max_loaded is 1 or more")
    budget = document.get("memory_budget")
    disk = document.get("prompt_cache_disk")
    if disk is not None:
        disk = 0 if disk in (0, "0") else parse_size(disk, places.where(("prompt_cache_disk",)))  # 0: keep none
    gpu_memory = document.get("gpu_memory")
    ram = document.get("cache_ram")
    if ram is not None:
        ram = 0 if ram in (0, "0") else parse_size(ram, places.where(("cache_ram",)))
    repack = document.get("cpu_repack", True)
    if not isinstance(repack, bool):
        raise ConfigError(f"{places.where(('cpu_repack',))}: cpu_repack is true or false")
    return Config(path, models, max_loaded,
                  memory_budget=parse_size(budget, places.where(("memory_budget",))) if budget is not None else None,
                  prompt_cache_disk=disk, cache_ram=ram, cpu_repack=repack,
                  gpu_memory=parse_size(gpu_memory, places.where(("gpu_memory",))) if gpu_memory is not None else None)


def _document(path: Path) -> tomlkit.TOMLDocument:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return tomlkit.document()
    return _parse(path, text)[0]


def add_model(entry: dict[str, Any], path: Path | None = None) -> Path:
    """Add a `[[models]]` table, or update the one with the same id (its other keys, such as a
    hand-set `context_size`, stay); returns the config's path. Paths under the models folder are
    written relative to it."""
    path = path or config_file()
    document = _document(path)
    models = document.get("models")
    if models is None:
        models = tomlkit.aot()
        document["models"] = models
    table = next((t for t in models if t.get("id") == entry["id"]), None)
    if table is None:
        table = tomlkit.table()
        models.append(table)
    for key, value in entry.items():
        table[key] = _relative(value, models_dir()) if isinstance(value, Path) else value
    replace_file(path, tomlkit.dumps(document))
    return path


def remove_model(model_id: str, path: Path | None = None) -> bool:
    """Drop the `[[models]]` table with this id (or alias); False when there is none."""
    path = path or config_file()
    document = _document(path)
    models = document.get("models")
    if not models:
        return False
    kept = [t for t in models if t.get("id") != model_id and model_id not in t.get("aliases", [])]
    if len(kept) == len(models):
        return False
    models.clear()
    for t in kept:
        models.append(t)
    replace_file(path, tomlkit.dumps(document))
    return True


def _relative(path: Path, base: Path) -> str:
    try:
        return path.relative_to(base).as_posix()
    except ValueError:
        return str(path)


def served_spec(entry: ModelEntry) -> ModelSpec:
    """A configured model as the registry serves it: loaded on first use, with its entry read
    again from the config file before each load."""
    from backends.embedder import Pooling
    from backends.registry import ModelSpec

    reread = functools.partial(_reread, entry.source, entry.id) if entry.source is not None else None
    return ModelSpec(entry.file, entry.id, entry.chat_template, aliases=entry.aliases, ctx_size=entry.context_size,
                     base=entry.base, lora_scale=entry.lora_scale, tensor_overrides=entry.tensor_overrides,
                     gpu_layers=entry.gpu_layers, keep_alive=entry.keep_alive, sampling=entry.sampling,
                     pooling=Pooling[entry.pooling] if entry.pooling is not None else None, mmproj=entry.mmproj,
                     cache_type=entry.cache_type, swa_full=entry.swa_full, draft=entry.draft, draft_model=entry.draft_model, rpc=entry.rpc, tensor_split=entry.tensor_split,
                     upstream=entry.upstream, eager=False, reread=reread)


class ConfigWatch:
    """The config file's models as a running server serves them (`backends.registry.ConfigSource`):
    read again when the file changed, which a stat tells."""

    def __init__(self, path: Path):
        self.path = path
        self._seen: tuple[int, int, int] | None = None

    def changed(self) -> bool:
        try:
            stat = self.path.stat()
            now = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        except OSError:
            now = (0, 0, 0)
        if now == self._seen:
            return False
        self._seen = now
        return True

    def models(self) -> list[ModelSpec]:
        return [served_spec(entry) for entry in load_config(self.path).models]


def _reread(path: Path, model_id: str) -> ModelSpec:
    """The model `model_id` as the config at `path` gives it now (ConfigError, a ValueError, when
    the file cannot be read; ModelLoadError when the model is no longer in it)."""
    from backends.llama_model import ModelLoadError

    entry = next((m for m in load_config(path).models if m.id == model_id), None)
    if entry is None:
        raise ModelLoadError(f"{model_id} is no longer in the config file {path}")
    return served_spec(entry)
