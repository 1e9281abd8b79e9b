"""`fireside doctor --model FILE`: where that model's tensors would go if `fireside serve` loaded
it now with the same placement options, context, slots and cache type: the fit's plan (which
tensors land on each device, how much memory each takes and why), without loading anything."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from app.cli.placement_options import add_placement_options, command_line_overrides
from app.server.placement_info import Placement, placement_info
from backends.settings import CACHE_TYPES, DEFAULT_CACHE_TYPE

if TYPE_CHECKING:
    from backends.engine import EngineOptions


class ModelPlan(msgspec.Struct):
    model: str
    devices: list[str]  # the offload devices the plan used, with their free memory
    placement: Placement | None = None  # None: the file could not be read (error says why)
    lines: list[str] = []  # the plan for people
    error: str | None = None


def add_options(doctor: argparse.ArgumentParser) -> None:
    doctor.add_argument("--model", type=Path, default=None, metavar="FILE",
                        help="print where this GGUF's tensors would go on this machine's devices (and --rpc workers')")
    add_placement_options(doctor)
    doctor.add_argument("--ctx-size", type=int, default=0, metavar="TOKENS",
                        help="context window of each request, as serve's (default: the model's, at most 4096)")
    doctor.add_argument("--parallel", type=int, default=4, metavar="N", help="slots, as serve's")
    doctor.add_argument("--cache-type", choices=list(CACHE_TYPES), default=DEFAULT_CACHE_TYPE,
                        help="the KV cache's element type, as serve's")
    doctor.add_argument("--swa-full", action="store_true",
                        help="sliding-window layers keep the whole context, as serve's --swa-full")


def model_plan(args: argparse.Namespace, gpu_memory: int | None) -> ModelPlan:
    """The plan for `args.model`, as `fireside serve --model` with these options would make it."""
    from app.cli.serving import model_specs
    from backends import rpc
    from backends.engine import EngineOptions
    from backends.fit import GIB
    from backends.fit_inputs import FitLimits, offload_rooms
    from backends.llama_model import ModelLoadError, ModelOptions
    from backends.registry import ModelRegistry

    path: Path = args.model
    if not path.is_file():
        return ModelPlan(str(path), [], error=f"model file not found: {path}")
    try:
        devices = (*rpc.CONNECTIONS.devices(args.rpc), *rpc.local_gpus()) if args.rpc else ()
    except (rpc.WorkerUnreachable, rpc.RpcUnsupported) as error:
        return ModelPlan(str(path), [], error=str(error))
    rooms = offload_rooms(devices)
    spec = model_specs([path], [None], gpu_layers=args.gpu_layers, rpc=args.rpc, tensor_split=args.tensor_split,
                       tensor_overrides=command_line_overrides(args))[0]
    options = EngineOptions(ctx_size=max(0, args.ctx_size), parallel=args.parallel, cache_type=args.cache_type,
                            swa_full=args.swa_full)
    registry = ModelRegistry([], ModelOptions(), options, fit_limits=FitLimits(gpu_memory=gpu_memory))
    named = [f"{room.name} ({room.free / GIB:.1f} GiB free)" for room in rooms]
    try:
        plan = registry.placement(spec, devices, cpu_only=True)
    except ModelLoadError as error:
        return ModelPlan(str(path), named, error=str(error))
    if plan is None:
        return ModelPlan(str(path), named, error=f"cannot read the tensor table of {path} (is it a GGUF file?)")
    lines = [*plan.describe(), cache_line(path, options)]
    if problem := plan.problem():
        lines.append(f"it does not fit: {problem}")
    return ModelPlan(str(path), named, placement_info(plan), lines)


def cache_line(path: Path, options: EngineOptions) -> str:
    """The caches a load with these engine options makes, by kind of layer (as llama.cpp sizes them)."""
    from backends.fit_inputs import context_tokens
    from backends.memory import describe_bytes
    from backends.model_shape import read_model_shape

    shape = read_model_shape(path)
    tokens = context_tokens(shape, options.ctx_size, options.parallel)
    kinds = shape.cache_by_kind(tokens, options.parallel, options.batch_size, CACHE_TYPES[options.cache_type],
                                options.swa_full)
    names = {"full": "full attention", "window": f"sliding window of {shape.n_swa} tokens", "recurrent": "recurrent state"}
    parts = [f"{names[kind]} {describe_bytes(size)} ({blocks} blocks)" for kind, (size, blocks) in kinds.items()]
    return f"cache for {tokens} tokens over {options.parallel} slots: " + ", ".join(parts)


def render(plan: ModelPlan) -> list[str]:
    lines = [f"plan for {plan.model} on {', '.join(plan.devices) or 'the CPU alone'}:"]
    if plan.error:
        return [*lines, f"  cannot plan: {plan.error}"]
    return [*lines, *(f"  {line}" for line in plan.lines)]
