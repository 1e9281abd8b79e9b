"""`fireside serve` once its refusals are behind it (`app.cli.serve`): load the models, then
serve them over HTTP until a signal. Everything heavy the command needs (the engine, llama.cpp,
Litestar, uvicorn) is imported here, and only once a start is not refused."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import uvicorn

from app.cli.placement_options import command_line_overrides
from app.media.policy import MediaPolicy
from app.server.app import create_app
from app.server.shutdown import Drain, DrainingServer
from app.settings.api import ApiSettings
from app.settings.config import (
    Config,
    ConfigError,
    ConfigWatch,
    ModelEntry,
    served_spec,
)
from app.settings.locations import data_dir
from app.settings.security import SecuritySettings, describe
from backends import cpu_repack
from backends.cpu_repack import REPACK_VERDICTS, RepackPolicy, RepackVerdicts, repack_fallback
from backends.checkpoints import CheckpointOptions
from backends.engine import EngineOptions
from backends.prompt_cache import RamBudget
from backends.fit_inputs import FitLimits
from backends.kv_cache import engine_kv
from backends.memory import describe_bytes
from backends.llama_model import ModelLoadError, ModelOptions
from backends.prompt_store import StoreOptions
from backends.registry import ModelRegistry, ModelSpec, ServedModel, default_model_path
from backends.rpc_endpoint import Endpoint
from backends.tensor_placement import TensorOverride
from backends.threads import physical_cores

if TYPE_CHECKING:
    from app.cli.model_options import LoraOption


def serve_models(args: argparse.Namespace, config: Config, security_settings: SecuritySettings,
                 memory_budget: int | None, prompt_cache_bytes: int, cache_ram_bytes: int = 0) -> int:
    """Load the command line's and `config`'s models, print what is served where, and serve them;
    1 when a model cannot load, else 0 once a signal stopped the server."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("fireside.llama").setLevel(logging.DEBUG if args.verbose else logging.CRITICAL)
    options = engine_options(args, prompt_cache_bytes, cache_ram_bytes)
    cpu_repack.configure(RepackPolicy(RepackVerdicts(data_dir() / REPACK_VERDICTS),
                                      enabled=not args.no_repack and config.cpu_repack))
    try:
        registry = ModelRegistry.load(
            model_specs(args.model, args.alias, args.chat_template, args.gpu_layers, config, args.mmproj, args.rpc,
                        args.tensor_split, args.lora, command_line_overrides(args), args.draft_model),
            ModelOptions(use_mmap=args.mmap), options,
            max_loaded=args.max_loaded or config.max_loaded, memory_budget=memory_budget,
            fit_limits=FitLimits(gpu_memory=gpu_memory(args, config)),
            config=ConfigWatch(config.path),
        )
    except (ModelLoadError, ConfigError) as error:
        print(f"fireside: {error}", file=sys.stderr)
        return 1
    try:
        for served in registry:
            whole, _ = engine_kv(served.engine)
            print(f"serving {served.id} from {served.path} "
                  f"({served.engine.ctx_size} tokens per request, {served.engine.request_limit} for one that needs more, "
                  f"{options.parallel} slots, "
                  f"KV cache {whole.bytes / (1 << 20):.0f} MiB {served.engine.options.cache_type}{_kinds(served)}, "
                  f"threads: {served.engine.threads.describe()}{_placement(served)})")
        for spec, served, _ in registry.specs():
            if spec.upstream is not None:
                print(f"serving {spec.id} from upstream {spec.upstream.url} (as {spec.upstream.model or spec.id})")
                continue
            adapter = f", a LoRA adapter on {spec.base} at scale {spec.lora_scale:g}" if spec.base is not None else ""
            if served is not None and spec.base is not None:
                print(f"serving {spec.id} from {spec.path} ({adapter.removeprefix(', ')})")
            if served is None:
                print(f"serving {spec.id} from {spec.path} (loads on first use{adapter}; unloads after "
                      f"{_duration(spec.keep_alive)} unused)")
                if not spec.path.is_file():
                    print(f"fireside: warning: {spec.id}: {spec.path} does not exist; requests for it get 503 "
                          "until it does (`fireside pull` downloads models)", file=sys.stderr)
        print(describe(security_settings))
        print(f"listening on http://{args.host}:{args.port} (OpenAI base URL: http://{args.host}:{args.port}/v1)",
              flush=True)
        settings = ApiSettings(max_logprobs=max(0, args.max_logprobs), security=security_settings,
                               log_prompts=args.log_prompts, media=MediaPolicy(allow_private=args.allow_private_media_urls))
        drain = Drain()
        http = uvicorn.Config(create_app(registry, settings, drain), host=args.host, port=args.port,
                              log_level="warning", timeout_graceful_shutdown=2)
        server = DrainingServer(http, drain, lambda error: [served.engine.abort(error) for served in registry],
                                grace=max(0.0, args.shutdown_grace))
        # the server drains, stops, then raises the signal again: it must end in the `finally`
        # below (the models close, their prompt caches are saved)
        for stop in (signal.SIGTERM, signal.SIGINT):
            signal.signal(stop, _stopped)
        server.run()
        return 0 if server.started else 1
    finally:
        registry.close()


def model_specs(paths: list[Path], aliases: list[str | None],
                templates: list[Path | None] | None = None, gpu_layers: int | str = "auto",
                config: Config | None = None, projectors: list[Path | None] | None = None,
                rpc: tuple[Endpoint, ...] = (), tensor_split: tuple[float, ...] = (),
                loras: list[LoraOption] | None = None,
                tensor_overrides: tuple[TensorOverride, ...] = (),
                drafts: list[Path | None] | None = None) -> list[ModelSpec]:
    """The command line's models (loaded at start-up; `aliases`, `templates` and `projectors`
    hold one entry per model, None: none) and their LoRA adapters, then the config file's (loaded
    on first use). The embedded default model when there are neither (or when `loras` are for it)."""
    configured = [_configured_spec(entry) for entry in (config.models if config else ())]
    loras = loras or []
    if not paths and configured and not loras:
        return configured
    paths = paths or [default_model_path()]
    templates, projectors, drafts = templates or [], projectors or [], drafts or []
    for template in templates:
        if template is not None and not template.is_file():
            raise ModelLoadError(f"chat template not found: {template}")
    for projector in projectors:
        if projector is not None and not projector.is_file():
            raise ModelLoadError(f"projector not found: {projector}")
    for draft in drafts:
        if draft is not None and not draft.is_file():
            raise ModelLoadError(f"draft model not found: {draft}")
    given = [
        ModelSpec(path, aliases[i] if i < len(aliases) else None, templates[i] if i < len(templates) else None,
                  gpu_layers=gpu_layers, mmproj=projectors[i] if i < len(projectors) else None, rpc=rpc,
                  tensor_split=tensor_split, tensor_overrides=tensor_overrides,
                  draft_model=drafts[i] if i < len(drafts) else None)
        for i, path in enumerate(paths)
    ]
    adapters = [ModelSpec(lora.path, lora.alias, base=given[lora.model].id, lora_scale=lora.scale) for lora in loras]
    return given + adapters + configured


def _configured_spec(entry: ModelEntry) -> ModelSpec:
    if entry.chat_template is not None and not entry.chat_template.is_file():
        raise ModelLoadError(f"chat template of {entry.id} not found: {entry.chat_template}")
    return served_spec(entry)


def engine_options(args: argparse.Namespace, prompt_cache_bytes: int = 0, cache_ram_bytes: int = 0) -> EngineOptions:
    """The command line's engine settings; the slots' prompt caches kept on disk when
    `prompt_cache_bytes` is more than 0, in a RAM prompt cache when `cache_ram_bytes` is."""
    saved = StoreOptions(data_dir() / "prompt-cache", prompt_cache_bytes) if prompt_cache_bytes > 0 else None
    return EngineOptions(
        ctx_size=max(0, args.ctx_size), parallel=args.parallel, max_queue=args.max_queue,
        threads=args.threads or physical_cores(), adaptive_threads=args.threads is None, cache_type=args.cache_type,
        auto_draft=args.draft == "auto", draft_model_always=args.draft_model_always, saved_prompts=saved,
        swa_full=args.swa_full, checkpoints=CheckpointOptions(max(0, args.ctx_checkpoints), args.checkpoint_min_step),
        ram_cache=RamBudget(cache_ram_bytes) if cache_ram_bytes > 0 else None,
    )


def _placement(served: ServedModel) -> str:
    where = ""
    if served.workers is not None:
        where = f", layers on RPC workers {', '.join(map(str, served.workers.endpoints))}"
    if (draft := served.engine.draft_model) is not None:
        where += f", drafting with {draft.path.name}"
    if served.placement is not None and served.placement.devices:
        where += f", {served.placement.reason}"
    if served.model.overridden:  # what --cpu-moe, --n-cpu-moe and --override-tensor placed
        counts = Counter(served.model.overridden.values())
        where += ", tensors placed by override: " + ", ".join(f"{n} on {buffer}" for buffer, n in sorted(counts.items()))
    if (crashed := repack_fallback(served.model.path)) is not None:
        where += f", without llama.cpp's extra CPU buffers ({crashed})"
    return where


def _kinds(served: ServedModel) -> str:
    """The cache by kind of layer, where it is not all full attention: " (96 MiB full, 60 MiB sliding window)"."""
    sizes = served.engine.kv_sizes
    if not sizes.window and not sizes.recurrent:
        return ""
    parts = [f"{describe_bytes(size)} {name}" for name, size in (
        ("full attention", sizes.full), ("sliding window", sizes.window), ("recurrent state", sizes.recurrent)) if size]
    return f" ({', '.join(parts)})"


def _stopped(signum: int, _frame: object) -> None:
    raise SystemExit(0)


def _duration(seconds: float) -> str:
    if seconds == float("inf"):
        return "never"
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def gpu_memory(args: argparse.Namespace, config: Config) -> int | None:
    """`--gpu-memory`, else the config's `gpu_memory`: the most each offload device may take."""
    return args.gpu_memory if args.gpu_memory is not None else config.gpu_memory
