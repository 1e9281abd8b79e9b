"""Where a model's tensors go, as `fireside serve` and `fireside doctor --model` take it: the
GPU layers (the fit by default), the expert and tensor overrides, the RPC workers and the split
over devices, and the most each device may take."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

from app.settings.sizes import parse_size
from backends.rpc_endpoint import parse_endpoints
from backends.settings import parse_gpu_layers_option, parse_tensor_split
from backends.tensor_placement import TensorOverride, parse_overrides

T = TypeVar("T")


def _argument(parse: Callable[[str], T]) -> Callable[[str], T]:
    """A parser that raises ValueError as an argparse `type=` (its message shown as the error)."""
    def parsed(value: str) -> T:
        try:
            return parse(value)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    parsed.__name__ = parse.__name__
    return parsed


def not_negative(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {number}")
    return number


def add_placement_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpu-layers", type=parse_gpu_layers_option, default="auto", metavar="N|auto",
                        help="layers of each --model to offload to the GPU (-1: all; auto, the default: what fits, "
                             "a mixture-of-experts model's experts moving to system memory before whole layers)")
    parser.add_argument("--gpu-memory", type=_argument(parse_size), default=None, metavar="SIZE",
                        help="the most each GPU (or RPC worker's device) may take for a model, e.g. 6GiB "
                             "(default: its free memory less 1 GiB)")
    parser.add_argument("--cpu-moe", action="store_true",
                        help="keep every expert tensor of a mixture-of-experts --model in system memory (the "
                             "attention, shared weights and KV cache go to the GPU)")
    parser.add_argument("--n-cpu-moe", type=not_negative, default=0, metavar="N",
                        help="keep the expert tensors of the first N blocks in system memory")
    parser.add_argument("--override-tensor", action="append", type=_argument(parse_overrides), default=[],
                        metavar="REGEX=DEVICE,...",
                        help="put the tensors whose names match REGEX on DEVICE's buffer type (CPU, CUDA0, Metal, "
                             "RPC0[host:port]...), as llama-server's -ot; repeatable")
    parser.add_argument("--rpc", type=_argument(parse_endpoints), default=(), metavar="HOST:PORT[,HOST:PORT...]",
                        help="`fireside worker`s (or llama.cpp rpc-servers) whose devices take the layers of the "
                             "command line's models (see --tensor-split)")
    parser.add_argument("--tensor-split", type=_argument(parse_tensor_split), default=(), metavar="A,B,...",
                        help="each device's share of the offloaded layers, the RPC workers' first, then local GPUs "
                             "(default: each filled in turn as far as it goes)")


def command_line_overrides(args: argparse.Namespace) -> tuple[TensorOverride, ...]:
    """The tensor placement of the command line's models: the experts kept on the CPU first, then
    `--override-tensor`s in their order (llama.cpp applies the first pattern that matches)."""
    from backends.tensor_placement import expert_overrides

    given = tuple(override for group in args.override_tensor for override in group)
    return expert_overrides(args.cpu_moe, args.n_cpu_moe) + given

