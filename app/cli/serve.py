"""`fireside serve`: load the models (the command line's, the config file's, or the embedded
default) and serve them over HTTP."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import signal
import sys
from pathlib import Path

from app.cli.defaults import DEFAULT_HOST, DEFAULT_PORT, DEFAULT_SHUTDOWN_GRACE
from app.config import (
    DRAFT_MODES,
    Config,
    ConfigError,
    ModelEntry,
    load_config,
    parse_size,
    served_spec,
)
from app.locations import data_dir
from app.media import MediaPolicy
from app.server import security
from app.server.settings import DEFAULT_MAX_LOGPROBS, ApiSettings
from backends.engine import EngineOptions
from backends.gpu_layers import (
    parse_gpu_layers_option,
    parse_tensor_split,
    resolve_gpu_layers,
)
from backends.kv_cache import CACHE_TYPES, DEFAULT_CACHE_TYPE, engine_kv
from backends.llama_model import ModelLoadError, ModelOptions
from backends.prompt_store import StoreOptions
from backends.registry import ModelRegistry, ModelSpec, ServedModel, default_model_path
from backends.rpc import Endpoint, parse_endpoints
from backends.threads import physical_cores

DEFAULT_PROMPT_CACHE_DISK = "1GiB"


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {number}")
    return number


def _threads(value: str) -> int | None:
    """`auto` (None): adapt per step; a number: exactly that many threads."""
    return None if value == "auto" else _positive(value)


def _endpoints(value: str) -> tuple[Endpoint, ...]:
    try:
        return parse_endpoints(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _tensor_split(value: str) -> tuple[float, ...]:
    try:
        return parse_tensor_split(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


class _ForLastModel(argparse.Action):
    """An option of the `--model` given before it (of the first model when none was): a list
    with one entry per model, None where a model has none."""

    def __call__(self, parser, namespace, value, option_string=None):
        index = max(len(namespace.model) - 1, 0)
        values = list(getattr(namespace, self.dest) or [])
        values.extend([None] * (index + 1 - len(values)))
        if values[index] is not None:
            parser.error(f"{option_string} given twice for one --model")
        values[index] = value
        setattr(namespace, self.dest, values)


def add_command(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser("serve", help="serve models over the Fireworks/OpenAI API")
    serve.add_argument("--model", action="append", type=Path, default=[], metavar="PATH",
                       help="a GGUF file to serve; repeat for several (default: the embedded SmolLM2-135M-Instruct)")
    serve.add_argument("--alias", action=_ForLastModel, default=[], metavar="NAME",
                       help="the id to serve the --model before it under (default: the file's stem)")
    serve.add_argument("--host", default=DEFAULT_HOST)
    serve.add_argument("--port", type=int, default=DEFAULT_PORT)
    serve.add_argument("--ctx-size", type=int, default=0, metavar="TOKENS",
                       help="context window of each request (default: the model's, at most 4096)")
    serve.add_argument("--threads", type=_threads, default=None, metavar="auto|N",
                       help="CPU threads per decode step: auto (default) adapts between 1 and the physical "
                            "cores as other programs take CPU time; a number fixes it")
    serve.add_argument("--gpu-layers", type=parse_gpu_layers_option, default=0, metavar="N|auto",
                       help="layers of each --model to offload to the GPU (-1: all; auto: as many as fit)")
    serve.add_argument("--rpc", type=_endpoints, default=(), metavar="HOST:PORT[,HOST:PORT...]",
                       help="`fireside worker`s (or llama.cpp rpc-servers) whose devices take the layers of the "
                            "command line's models, split by their free memory (see --tensor-split)")
    serve.add_argument("--tensor-split", type=_tensor_split, default=(), metavar="A,B,...",
                       help="each device's share of the offloaded layers, the RPC workers' first, then local GPUs")
    serve.add_argument("--config", type=Path, default=None, metavar="FILE",
                       help="the model registry's config file (default: `fireside config path`)")
    serve.add_argument("--max-loaded", type=_positive, default=None, metavar="N",
                       help="models kept loaded at once; the least recently used idle one unloads first")
    serve.add_argument("--memory-budget", default=None, metavar="SIZE",
                       help="memory the loaded models may take together, e.g. 12GiB")
    serve.add_argument("--prompt-cache-disk", default=None, metavar="SIZE",
                       help="keep the slots' prompt caches on disk across restarts and unloads, at most SIZE in all "
                            f"(default {DEFAULT_PROMPT_CACHE_DISK}; 0: keep none)")
    serve.add_argument("--cache-type", choices=list(CACHE_TYPES), default=DEFAULT_CACHE_TYPE,
                       help="the KV cache's element type: q8_0 takes about half of f16's memory, q4_0 about a "
                            "quarter, each with a small loss of quality (see tests/bench/bench_kv_cache.py)")
    serve.add_argument("--draft", choices=DRAFT_MODES, default="auto",
                       help="auto: draft tokens by prompt lookup (where the answer repeats the prompt or itself) and "
                            "check them in one batch, the output unchanged; off: decode one token at a time "
                            "unless a request gives a prediction")
    serve.add_argument("--parallel", type=_positive, default=4, metavar="N",
                       help="sequences decoded together (slots)")
    serve.add_argument("--max-queue", type=_positive, default=64, metavar="N",
                       help="requests that may wait for a slot; beyond it: 429 with Retry-After")
    serve.add_argument("--max-logprobs", type=int, default=DEFAULT_MAX_LOGPROBS, metavar="N",
                       help="most alternatives per token that logprobs / top_logprobs may ask for")
    serve.add_argument("--chat-template", action=_ForLastModel, type=Path, default=[], metavar="FILE",
                       help="a Jinja chat template replacing the own template of the --model before it")
    serve.add_argument("--mmproj", action=_ForLastModel, type=Path, default=[], metavar="FILE",
                       help="the multimodal projector (mmproj GGUF) of the --model before it: it reads images")
    serve.add_argument("--allow-private-media-urls", action="store_true",
                       help="fetch image URLs on loopback, private and link-local addresses too (refused by default)")
    serve.add_argument("--shutdown-grace", type=float, default=DEFAULT_SHUTDOWN_GRACE, metavar="SECONDS",
                       help="on SIGTERM or SIGINT, how long running requests may go on to their end while new ones "
                            "get 503; then they end with an error chunk and the server exits 0 (a second signal: at once; "
                            f"default {DEFAULT_SHUTDOWN_GRACE:g})")
    serve.add_argument("--mmap", action="store_true",
                       help="map model files instead of reading them into memory (shared page cache, but a file "
                            "truncated or rewritten under a loaded model then kills the server with SIGBUS)")
    serve.add_argument("--verbose", action="store_true", help="log llama.cpp's own messages")
    serve.add_argument("--log-prompts", action="store_true",
                       help="include prompt and output text (truncated) in the request log lines")
    security.add_arguments(serve)


def model_specs(paths: list[Path], aliases: list[str | None],
                templates: list[Path | None] | None = None, gpu_layers: int | str = 0,
                config: Config | None = None, projectors: list[Path | None] | None = None,
                rpc: tuple[Endpoint, ...] = (), tensor_split: tuple[float, ...] = ()) -> list[ModelSpec]:
    """The command line's models (loaded at start-up; `aliases`, `templates` and `projectors`
    hold one entry per model, None: none), then the config file's (loaded on first use). The
    embedded default model when there are neither."""
    configured = [_configured_spec(entry) for entry in (config.models if config else ())]
    if not paths and configured:
        return configured
    paths = paths or [default_model_path()]
    templates, projectors = templates or [], projectors or []
    for template in templates:
        if template is not None and not template.is_file():
            raise ModelLoadError(f"chat template not found: {template}")
    for projector in projectors:
        if projector is not None and not projector.is_file():
            raise ModelLoadError(f"projector not found: {projector}")
    given = [
        ModelSpec(path, aliases[i] if i < len(aliases) else None, templates[i] if i < len(templates) else None,
                  gpu_layers=gpu_layers, mmproj=projectors[i] if i < len(projectors) else None, rpc=rpc,
                  tensor_split=tensor_split)
        for i, path in enumerate(paths)
    ]
    return given + configured


def _configured_spec(entry: ModelEntry) -> ModelSpec:
    if entry.chat_template is not None and not entry.chat_template.is_file():
        raise ModelLoadError(f"chat template of {entry.id} not found: {entry.chat_template}")
    return served_spec(entry)


def engine_options(args: argparse.Namespace) -> EngineOptions:
    return EngineOptions(
        ctx_size=max(0, args.ctx_size), parallel=args.parallel, max_queue=args.max_queue,
        threads=args.threads or physical_cores(), adaptive_threads=args.threads is None, cache_type=args.cache_type,
        auto_draft=args.draft == "auto",
    )


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from app.cli.preflight import startup_problem
    from app.server.app import create_app
    from app.server.shutdown import Drain, DrainingServer

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("fireside.llama").setLevel(logging.DEBUG if args.verbose else logging.CRITICAL)
    options = engine_options(args)
    try:  # before loading anything: a refused start must be quick
        security_settings = security.settings_from_args(args)
        bind_warning = security.check_bind(args.host, security_settings, args.insecure)
    except security.SecurityConfigError as error:
        print(f"fireside: {error}", file=sys.stderr)
        return 2
    if problem := startup_problem(args.host, args.port):  # a port taken, a data folder not writable
        print(f"fireside: {problem}", file=sys.stderr)
        return 1
    if bind_warning:
        print(f"fireside: {bind_warning}", file=sys.stderr, flush=True)
    try:
        config = load_config(args.config)
        budget = args.memory_budget if args.memory_budget is not None else config.memory_budget
        options = dataclasses.replace(options, saved_prompts=_saved_prompts(args.prompt_cache_disk, config))
        registry = ModelRegistry.load(
            model_specs(args.model, args.alias, args.chat_template, args.gpu_layers, config, args.mmproj, args.rpc,
                        args.tensor_split),
            ModelOptions(use_mmap=args.mmap), options,
            max_loaded=args.max_loaded or config.max_loaded,
            memory_budget=parse_size(budget, "--memory-budget") if budget is not None else None,
            gpu_layers=auto_gpu_layers(options.parallel, options.batch_size),
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
                  f"KV cache {whole.bytes / (1 << 20):.0f} MiB {served.engine.options.cache_type}, "
                  f"threads: {served.engine.threads.describe()}{_placement(served)})")
        for spec, served, _ in registry.specs():
            if spec.upstream is not None:
                print(f"serving {spec.id} from upstream {spec.upstream.url} (as {spec.upstream.model or spec.id})")
                continue
            if served is None:
                print(f"serving {spec.id} from {spec.path} (loads on first use; unloads after "
                      f"{_duration(spec.keep_alive)} unused)")
                if not spec.path.is_file():
                    print(f"fireside: warning: {spec.id}: {spec.path} does not exist; requests for it get 503 "
                          "until it does (`fireside pull` downloads models)", file=sys.stderr)
        print(security.describe(security_settings))
        print(f"listening on http://{args.host}:{args.port} (OpenAI base URL: http://{args.host}:{args.port}/v1)",
              flush=True)
        settings = ApiSettings(max_logprobs=max(0, args.max_logprobs), security=security_settings,
                               log_prompts=args.log_prompts, media=MediaPolicy(allow_private=args.allow_private_media_urls))
        drain = Drain()
        config = uvicorn.Config(create_app(registry, settings, drain), host=args.host, port=args.port,
                                log_level="warning", timeout_graceful_shutdown=2)
        server = DrainingServer(config, drain, lambda error: [served.engine.abort(error) for served in registry],
                                grace=max(0.0, args.shutdown_grace))
        # the server drains, stops, then raises the signal again: it must end in the `finally`
        # below (the models close, their prompt caches are saved)
        for stop in (signal.SIGTERM, signal.SIGINT):
            signal.signal(stop, _stopped)
        server.run()
        return 0 if server.started else 1
    finally:
        registry.close()


def _placement(served: ServedModel) -> str:
    if served.workers is None:
        return ""
    return f", layers on RPC workers {', '.join(map(str, served.workers.endpoints))}"


def _stopped(signum: int, _frame: object) -> None:
    raise SystemExit(0)


def _saved_prompts(given: str | None, config: Config) -> StoreOptions | None:
    """Where the slots' caches are kept across restarts, and how much of them (None: nowhere)."""
    if given is not None:
        size = 0 if given.strip() == "0" else parse_size(given, "--prompt-cache-disk")
    elif config.prompt_cache_disk is not None:
        size = config.prompt_cache_disk
    else:
        size = parse_size(DEFAULT_PROMPT_CACHE_DISK, "--prompt-cache-disk")
    return StoreOptions(data_dir() / "prompt-cache", size) if size > 0 else None


def _duration(seconds: float) -> str:
    if seconds == float("inf"):
        return "never"
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def auto_gpu_layers(parallel: int, batch_size: int):
    """`gpu_layers = "auto"`: as many layers as the GPU's free memory holds, with every slot's cache."""
    def resolve(spec: ModelSpec, ctx_size: int) -> int:
        return resolve_gpu_layers("auto", spec.path, ctx_size, parallel=parallel, n_ubatch=batch_size)
    return resolve
