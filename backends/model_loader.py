"""Loading one served model: where its tensors go (the fit's plan on this machine's or the RPC
workers' devices), the model, its projector, draft model and engine as one `ServedModel`, and the
memory a model would take, read from its GGUF before any load."""

from __future__ import annotations

import dataclasses
import logging

from backends.draft_model import load_draft
from backends.engine import Engine, EngineOptions
from backends.fit import Plan
from backends.fit_inputs import FitLimits, offload_rooms, plan_load
from backends.ggml_native import GgufError, NativeFunctionMissing
from backends.grammar import GrammarCache
from backends.llama_model import LlamaModel, ModelLoadError, ModelOptions
from backends.model_file import gguf_parts
from backends.model_shape import read_model_shape
from backends.served import DEFAULT_CTX, MemoryNeed, ModelSpec, ServedModel
from backends.settings import CACHE_TYPES
from backends.tensor_placement import EXPERT_TENSORS

log = logging.getLogger("fireside.registry")


class ModelLoader:
    """The registry's loads, with the server's model and engine options and the fit's limits."""

    def __init__(self, model_options: ModelOptions, engine_options: EngineOptions, fit_limits: FitLimits):
        self.model_options = model_options
        self.engine_options = engine_options
        self.fit_limits = fit_limits

    def placement(self, spec: ModelSpec, devices: tuple[int, ...] = (), *, cpu_only: bool = False) -> Plan | None:
        """Where `spec`'s tensors would go on the offload devices (`devices`, or this machine's
        GPUs) as they are now; None when there is no device to offload to (unless `cpu_only`
        asks for the plan of system memory alone) or the file cannot be read (the load then says
        what is wrong with it)."""
        rooms = offload_rooms(devices)
        if not rooms and not cpu_only:
            return None
        setting = -1 if spec.rpc and spec.gpu_layers == 0 else spec.gpu_layers  # the workers are the point
        try:
            return plan_load(spec.path, rooms, gpu_layers=setting, ctx_size=spec.ctx_size or self.engine_options.ctx_size,
                             parallel=self.engine_options.parallel,
                             cache_type=spec.cache_type or self.engine_options.cache_type,
                             overrides=spec.tensor_overrides, tensor_split=spec.tensor_split,
                             n_ubatch=self.engine_options.batch_size, limits=self.fit_limits, draft=spec.draft_model,
                             swa_full=self._swa_full(spec))
        except (GgufError, NativeFunctionMissing, OSError, ValueError) as error:
            log.warning("cannot plan where %s goes (%s): %s", spec.id, error,
                        "it loads in system memory" if spec.gpu_layers == "auto" else "loading it as configured")
            return None

    def load(self, spec: ModelSpec, devices: tuple[int, ...] = ()) -> ServedModel:
        plan = self.placement(spec, devices)
        if plan is not None and (problem := plan.problem()):
            raise ModelLoadError(f"{spec.id} does not fit: {problem} ({plan.reason}); try --gpu-layers auto, "
                                 f"--cpu-moe or a smaller --ctx-size")
        if plan is not None:
            gpu_layers, overrides, split = plan.gpu_layers, plan.overrides, plan.tensor_split or spec.tensor_split
        else:
            gpu_layers = spec.gpu_layers if isinstance(spec.gpu_layers, int) else 0
            gpu_layers = -1 if spec.rpc and gpu_layers == 0 else gpu_layers
            overrides, split = spec.tensor_overrides, spec.tensor_split
        model = LlamaModel(spec.path, dataclasses.replace(self.model_options, gpu_layers=gpu_layers, devices=devices,
                                                          tensor_split=split, tensor_overrides=overrides))
        if spec.tensor_overrides and not model.expert_count and any(EXPERT_TENSORS in o.pattern
                                                                    for o in spec.tensor_overrides):
            log.warning("%s is not a mixture-of-experts model: --cpu-moe and --n-cpu-moe move nothing", spec.id)
        try:
            # 0 means: the model's training context, at most DEFAULT_CTX tokens per sequence.
            ctx_size = spec.ctx_size or self.engine_options.ctx_size or min(model.n_ctx_train or DEFAULT_CTX,
                                                                            DEFAULT_CTX)
            options = dataclasses.replace(self.engine_options, ctx_size=ctx_size)
            if spec.cache_type is not None:
                options = dataclasses.replace(options, cache_type=spec.cache_type)
            if spec.swa_full is not None:
                options = dataclasses.replace(options, swa_full=spec.swa_full)
            if spec.draft is not None:
                options = dataclasses.replace(options, auto_draft=spec.draft == "auto")
            if spec.pooling is not None:
                options = dataclasses.replace(options, embedding=dataclasses.replace(options.embedding,
                                                                                     pooling=spec.pooling))
            projector = None
            if spec.mmproj:
                from backends.vision import (
                    Projector,  # libmtmd loads only for a model with a projector
                )

                projector = Projector(model, spec.mmproj, threads=options.threads)
            draft = None
            try:
                if spec.draft_model is not None:  # on the GPUs when the model is
                    draft = load_draft(model, spec.draft_model, dataclasses.replace(
                        self.model_options, gpu_layers=-1 if gpu_layers else 0, devices=devices))
                engine = Engine(model, options, draft)
            except BaseException:
                for part in (projector, draft):
                    if part is not None:
                        part.close()
                raise
        except BaseException:
            model.close()
            raise
        template = spec.chat_template.read_text(encoding="utf-8") if spec.chat_template else None
        return ServedModel(spec.id, spec.path, model, engine, GrammarCache(model.vocab), template,
                           dict(spec.sampling), projector=projector, placement=plan)

    def estimate(self, spec: ModelSpec) -> MemoryNeed:
        """Memory a model takes when loaded: its weights (the GGUF files) and its KV cache (every
        slot's context, in its cache type), from the GGUF's metadata (ggml's reader: no vocabulary
        is built, tens of milliseconds where a vocab-only load takes a second on a large vocabulary)."""
        if spec.base is not None:  # an adapter: its own tensors, on its base's KV cache
            return MemoryNeed(spec.path.stat().st_size, 0, 0)
        weights = sum(p.stat().st_size for p in gguf_parts(spec.path))
        try:
            shape = read_model_shape(spec.path)
        except (GgufError, NativeFunctionMissing, OSError, ValueError):
            return MemoryNeed(weights, 0, 0)
        parallel = self.engine_options.parallel
        tokens = (spec.ctx_size or self.engine_options.ctx_size or min(shape.n_ctx_train or DEFAULT_CTX, DEFAULT_CTX)) * parallel
        element = CACHE_TYPES[spec.cache_type or self.engine_options.cache_type]
        kv_cache = sum(shape.cache_bytes(tokens, parallel, self.engine_options.batch_size, element, self._swa_full(spec)))
        return MemoryNeed(weights, int(kv_cache), tokens)

    def _swa_full(self, spec: ModelSpec) -> bool:
        return self.engine_options.swa_full if spec.swa_full is None else spec.swa_full

