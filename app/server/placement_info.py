"""A model's placement (the fit's plan, `backends/fit.py`) as `/health` and `fireside doctor
--model` show it. Apart from the health route so that the command line reads it without loading
llama.cpp or the web framework."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from backends.fit import Plan, Share


class PlacedShare(msgspec.Struct):
    """What one device, or system memory ("CPU"), holds of a model; sizes in bytes."""

    device: str
    blocks: list[int]  # the blocks whose layer (attention, shared weights, KV cache) is here
    output: bool  # the output head is here
    expert_blocks: list[int]  # the blocks whose expert tensors are here
    weights_bytes: int
    kv_cache_bytes: int
    compute_bytes: int  # the fit's estimate of the compute buffer
    total_bytes: int
    budget_bytes: int | None  # what the fit allowed it (free memory less the margin, --gpu-memory)


class Placement(msgspec.Struct):
    """The fit's plan the model loaded with (backends/fit.py)."""

    gpu_layers: int
    cpu_expert_blocks: int  # the experts of blocks 0 .. this - 1 moved to system memory by the fit
    tensor_split: list[float]
    reason: str
    devices: list[PlacedShare]
    host: PlacedShare


def _share(share: Share) -> PlacedShare:
    return PlacedShare(share.device, list(share.blocks), share.output, list(share.expert_blocks), share.weights,
                       share.kv_cache, share.compute, share.total, share.budget)


def placement_info(plan: Plan | None) -> Placement | None:
    if plan is None:
        return None
    return Placement(plan.gpu_layers, plan.cpu_expert_blocks, list(plan.tensor_split), plan.reason,
                     [_share(share) for share in plan.devices], _share(plan.host))
