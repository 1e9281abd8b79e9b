"""`fireside serve`: load the models (the command line's, the config file's, or the embedded
default) and serve them over HTTP. Here: its options, and the refusals that need nothing loaded,
so that they come at once; `app.cli.serving` then loads the models and serves them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app.cli.defaults import DEFAULT_HOST, DEFAULT_PORT, DEFAULT_SHUTDOWN_GRACE
from app.cli.model_options import (
    AliasOption,
    ForLastModel,
    LoraAdapterOption,
    LoraScaleOption,
    ModelOption,
    lora_scale,
)
from app.cli.placement_options import add_placement_options
from app.settings import security
from app.settings.api import DEFAULT_MAX_LOGPROBS
from backends.settings import (
    CACHE_TYPES,
    DEFAULT_CACHE_TYPE,
    DEFAULT_CHECKPOINT_STEP,
    DEFAULT_CHECKPOINTS,
    DRAFT_MODES,
)

DEFAULT_PROMPT_CACHE_DISK = "1GiB"
DEFAULT_CACHE_RAM_SHARE = 0.25  # of the memory free at start-up ...
DEFAULT_CACHE_RAM_MOST = 8 << 30  # ... and at most this (llama-server's default --cache-ram)


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {number}")
    return number


def _threads(value: str) -> int | None:
    """`auto` (None): adapt per step; a number: exactly that many threads."""
    return None if value == "auto" else _positive(value)


def add_command(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser("serve", help="serve models over the Fireworks/OpenAI API")
    serve.add_argument("--model", action=ModelOption, type=Path, default=[], metavar="PATH",
                       help="a GGUF file to serve; repeat for several (default: the embedded SmolLM2-135M-Instruct)")
    serve.add_argument("--alias", action=AliasOption, default=[], metavar="NAME",
                       help="the id to serve the --model (or --lora) before it under (default: the file's stem)")
    serve.add_argument("--lora", action=LoraAdapterOption, type=Path, default=[], metavar="FILE",
                       help="a LoRA adapter GGUF for the --model before it, served as a model of its own (named by "
                            "the file's stem, or the --alias after it) on that model's weights; repeat for several")
    serve.add_argument("--lora-scale", action=LoraScaleOption, type=lora_scale, metavar="S",
                       help="how strongly the --lora before it applies (default 1.0; 0: the base model's output)")
    serve.add_argument("--host", default=DEFAULT_HOST)
    serve.add_argument("--port", type=int, default=DEFAULT_PORT)
    serve.add_argument("--ctx-size", type=int, default=0, metavar="TOKENS",
                       help="context window of each request (default: the model's, at most 4096)")
    serve.add_argument("--threads", type=_threads, default=None, metavar="auto|N",
                       help="CPU threads per decode step: auto (default) adapts between 1 and the physical "
                            "cores as other programs take CPU time; a number fixes it")
    add_placement_options(serve)
    serve.add_argument("--config", type=Path, default=None, metavar="FILE",
                       help="the model registry's config file (default: `fireside config path`)")
    serve.add_argument("--max-loaded", type=_positive, default=None, metavar="N",
                       help="models kept loaded at once; the least recently used idle one unloads first")
    serve.add_argument("--memory-budget", default=None, metavar="SIZE",
                       help="memory the loaded models may take together, e.g. 12GiB")
    serve.add_argument("--prompt-cache-disk", default=None, metavar="SIZE",
                       help="keep the slots' prompt caches on disk across restarts and unloads, at most SIZE in all "
                            f"(default {DEFAULT_PROMPT_CACHE_DISK}; 0: keep none)")
    serve.add_argument("--cache-ram", default=None, metavar="SIZE",
                       help="a prompt cache in host memory, shared by the models: a slot taken for another "
                            "conversation moves its state there, and a later prompt that extends it is restored "
                            "instead of prefilled (default: a quarter of the free memory, at most 8GiB; 0: none)")
    serve.add_argument("--swa-full", action="store_true",
                       help="sliding-window layers (Gemma, gpt-oss...) keep the whole context rather than their "
                            "window (more memory; config swa_full per model)")
    serve.add_argument("--ctx-checkpoints", type=int, default=DEFAULT_CHECKPOINTS, metavar="N",
                       help="per slot, states of the layers whose cache cannot be cut back (recurrent and "
                            "sliding-window ones) kept at points of each prompt, so a prompt that diverges inside "
                            f"a slot prefills from the latest one before it (default {DEFAULT_CHECKPOINTS}; 0: none)")
    serve.add_argument("--checkpoint-min-step", type=_positive, default=DEFAULT_CHECKPOINT_STEP, metavar="TOKENS",
                       help=f"tokens between checkpoints inside a long prompt (default {DEFAULT_CHECKPOINT_STEP})")
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
    serve.add_argument("--chat-template", action=ForLastModel, type=Path, default=[], metavar="FILE",
                       help="a Jinja chat template replacing the own template of the --model before it")
    serve.add_argument("--draft-model", action=ForLastModel, type=Path, default=[], metavar="FILE",
                       help="a smaller model of the same vocabulary that drafts tokens for the --model before it; "
                            "the model checks them in its batched step and keeps what it would have chosen anyway")
    serve.add_argument("--draft-model-always", action="store_true",
                       help="draft with every --draft-model at every step; by default the steps are timed and a "
                            "draft model rests where it makes decoding slower than without it (per number of streams)")
    serve.add_argument("--mmproj", action=ForLastModel, type=Path, default=[], metavar="FILE",
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
    serve.add_argument("--no-repack", action="store_true",
                       help="load without llama.cpp's extra CPU buffer types (weights repacked for AMX, AVX2 or NEON; "
                            "config cpu_repack = false). Without it, on a CPU with AMX each model file is first "
                            "checked in a child process and loads without them where they crash (remembered)")
    serve.add_argument("--verbose", action="store_true", help="log llama.cpp's own messages")
    serve.add_argument("--log-prompts", action="store_true",
                       help="include prompt and output text (truncated) in the request log lines")
    security.add_arguments(serve)


def run(args: argparse.Namespace) -> int:
    """The refusals first, each one line at once, with nothing loaded (a bad key file, a public
    address without a key, a port taken, a data folder not writable, a config that cannot be read:
    exit 2 for the first two, 1 for the others); then `app.cli.serving` loads and serves."""
    from app.cli.preflight import startup_problem
    from app.settings.config import ConfigError, load_config, parse_size

    try:
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
        memory_budget = parse_size(budget, "--memory-budget") if budget is not None else None
        prompt_cache_bytes = _prompt_cache_bytes(args.prompt_cache_disk, config.prompt_cache_disk)
        ram_bytes = cache_ram_bytes(args.cache_ram, config.cache_ram)
    except ConfigError as error:
        print(f"fireside: {error}", file=sys.stderr)
        return 1
    from app.cli.serving import serve_models

    return serve_models(args, config, security_settings, memory_budget, prompt_cache_bytes, ram_bytes)


def cache_ram_bytes(given: str | None, configured: int | None) -> int:
    """The RAM prompt cache's budget (0: none): `--cache-ram`, else the config's `cache_ram`, else
    a quarter of the memory free now, at most 8 GiB."""
    from app.settings.config import parse_size
    from backends.memory import available_memory

    if given is not None:
        return 0 if given.strip() == "0" else parse_size(given, "--cache-ram")
    if configured is not None:
        return configured
    free = available_memory()
    return min(DEFAULT_CACHE_RAM_MOST, int((free or 0) * DEFAULT_CACHE_RAM_SHARE))


def _prompt_cache_bytes(given: str | None, configured: int | None) -> int:
    """How much of the slots' caches is kept on disk across restarts (0: none): `--prompt-cache-disk`,
    else the config's `prompt_cache_disk`, else DEFAULT_PROMPT_CACHE_DISK."""
    from app.settings.config import parse_size

    if given is not None:
        return 0 if given.strip() == "0" else parse_size(given, "--prompt-cache-disk")
    if configured is not None:
        return configured
    return parse_size(DEFAULT_PROMPT_CACHE_DISK, "--prompt-cache-disk")
