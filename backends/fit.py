"""The fit: which of a model's tensors go to which device, decided before loading from the tensor
table and each device's free memory (`--gpu-layers auto`, the default).

A pure function of its inputs (a `ModelShape`, the offload devices as `Room`s and `FitSettings`),
so it is tested on the tensor tables of real 8B-30B models for made-up 8-24 GiB cards.

llama.cpp's placement, which the plan reproduces: with `n_gpu_layers = N` the last N "layers" of
the `n_layer + 1` (the blocks, then the output head as one more) go to the GPUs: blocks
`n_layer + 1 - N` to `n_layer - 1` and the head; the input embedding always stays on the CPU.
Offloaded layers are spread over several devices in contiguous runs by `tensor_split`. A block's KV
cache lives with it. A tensor buffer-type override (`--override-tensor`, `--cpu-moe`) sends the
tensors it matches to its own device whatever their layer.

The automatic fit, in the order the issue asks and llama-server's `--fit` ends up at:
1. everything on the GPUs if it fits;
2. else, for a mixture-of-experts model, the expert tensors of blocks 0, 1, 2, ... move to system
   memory one block at a time (the `--n-cpu-moe` form), every layer's attention, shared weights
   and cache staying on the GPU, until it fits: experts are most of a MoE model's bytes and few of
   them run per token, so the CPU's share of the work stays small;
3. else (every expert in system memory, or a dense model) whole layers move to the CPU, from the
   first block on, until it fits; at worst none is offloaded.
Of each device's free memory a margin is kept back (1 GiB, as llama.cpp's `--fit-target`), and
`--gpu-memory` caps what each may take. Several devices are filled in order, each as far as it
goes, and the plan passes that split to llama.cpp as `tensor_split`, so what loads is what was
planned.

What a device holds besides weights and cache: a compute buffer, estimated from the micro-batch
and the model's widths assuming flash attention (llama.cpp's default turns it on for GPUs): the
hidden states, Q/K/V and feed-forward activations of one micro-batch in f32, and its logits
where the output head is. The KV cache is counted at the full context for every block (models
with sliding-window layers need less: the plan errs on the safe side).
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from backends.model_shape import INPUT_TENSORS, KV_ELEMENT_BYTES, ModelShape
from backends.tensor_placement import (
    CPU,
    EXPERT_TENSORS,
    TensorOverride,
    expert_overrides,
    matches,
)

GIB = 1 << 30
MIB = 1 << 20
DEVICE_MARGIN = 1 * GIB  # kept free on each device, as llama.cpp's --fit-target defaults to
FLOAT_BYTES = 4  # activations and logits are f32
DEFAULT_UBATCH = 512  # the engine's batch size (EngineOptions.batch_size)
HOST = CPU  # the name the plan gives system memory


@dataclass(frozen=True)
class Room:
    """An offload device: its name as ggml gives it and its free bytes now."""

    name: str  # CUDA0, Metal, Vulkan0, RPC0[127.0.0.1:50052], ...
    free: int
    buffer_type: str = ""  # its buffer type's name, as --override-tensor spells it (default: the name)

    @property
    def buffer_name(self) -> str:
        return self.buffer_type or self.name


@dataclass(frozen=True)
class FitSettings:
    ctx_tokens: int  # KV cache cells: every slot's context
    parallel: int = 1  # slots: each keeps its own sliding window and recurrent state
    swa_full: bool = False  # sliding-window blocks keep every cell rather than their window
    gpu_layers: int | str = "auto"  # a number (-1: all) is taken as given; "auto" fits
    n_ubatch: int = DEFAULT_UBATCH
    kv_element_bytes: float = KV_ELEMENT_BYTES
    overrides: tuple[TensorOverride, ...] = ()  # the user's (--cpu-moe, --override-tensor): kept as given
    tensor_split: tuple[float, ...] = ()  # the user's shares per device; empty: the fit's own split
    margin: int = DEVICE_MARGIN  # left free on each device
    gpu_memory: int | None = None  # the most each device may take (--gpu-memory)
    host_free: int | None = None  # system memory available; None: unknown, not checked
    reserved: int = 0  # taken on each device by something loaded beside the model (its draft model)


@dataclass(frozen=True)
class Share:
    """What one device (or system memory, `HOST`) holds under a plan; sizes in bytes."""

    device: str
    blocks: tuple[int, ...]  # the blocks whose layer (attention, norms, shared weights, cache) is here
    output: bool  # the output head is here
    expert_blocks: tuple[int, ...]  # the blocks whose expert tensors are here
    weights: int
    kv_cache: int
    compute: int
    budget: int | None  # what it may take; None: unknown
    free: int | None

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.compute

    @property
    def fits(self) -> bool:
        return self.budget is None or self.total <= self.budget


@dataclass(frozen=True)
class Plan:
    gpu_layers: int  # llama.cpp's n_gpu_layers
    cpu_expert_blocks: int  # the experts of blocks 0 .. this - 1 moved to system memory by the fit
    tensor_split: tuple[float, ...]  # passed to llama.cpp (empty: its own, by free memory)
    devices: tuple[Share, ...]
    host: Share
    reason: str
    n_layer: int
    user_overrides: tuple[TensorOverride, ...] = ()

    @property
    def fits(self) -> bool:
        return all(share.fits for share in (*self.devices, self.host))

    @property
    def overrides(self) -> tuple[TensorOverride, ...]:
        """The user's overrides, then the fit's expert moves (llama.cpp takes the first match)."""
        if self.cpu_expert_blocks >= self.n_layer > 0:
            return (*self.user_overrides, *expert_overrides(cpu_moe=True))
        return (*self.user_overrides, *expert_overrides(n_cpu_moe=self.cpu_expert_blocks))

    def problem(self) -> str | None:
        """Why this plan cannot load, with the numbers; None when it fits."""
        over = [share for share in (*self.devices, self.host) if not share.fits]
        if not over:
            return None
        return "; ".join(f"{_where(share)} would take {_size(share.total)} ({_parts(share)}) but "
                         f"{_size(share.budget or 0)} is available" for share in over)

    def describe(self) -> list[str]:
        """The plan in lines for people: why, then what each device holds."""
        return [self.reason, *(f"{_where(share)}: {_holding(share, self.n_layer)}; {_accounting(share)}"
                               for share in (*self.devices, self.host))]


# --- the tensor table, grouped the way placement decisions take it ---------------------------

@dataclass
class _Table:
    n_layer: int
    dense: list[int]  # per block: bytes that follow the block's layer
    experts: list[int]  # per block: expert bytes that follow the layer unless the fit moves them
    kv: list[int]  # per block: KV cache bytes for the whole context
    input: int  # on the host always
    output: int  # the output head and the rest outside the blocks
    fixed: dict[str, int]  # bytes the user's overrides send to a device (HOST for CPU), by device
    fixed_experts: set[int]  # blocks whose experts the user already placed
    activations: int
    logits: int

    @property
    def movable_experts(self) -> bool:
        return any(self.experts)


def _table(shape: ModelShape, rooms: Sequence[Room], settings: FitSettings) -> _Table:
    n = shape.n_layer
    table = _Table(n, [0] * n, [0] * n, list(shape.cache_bytes(settings.ctx_tokens, settings.parallel, settings.n_ubatch,
                                                                 settings.kv_element_bytes, settings.swa_full)),
                   0, 0, {}, set(),
                   activations=FLOAT_BYTES * settings.n_ubatch * (4 * shape.n_embd + 2 * shape.n_ff),
                   logits=FLOAT_BYTES * settings.n_ubatch * shape.n_vocab)
    by_buffer = {room.buffer_name: room.name for room in rooms}
    tensors = dict(shape.tensors)
    if shape.tied_output and "token_embd.weight" in tensors:
        tensors["output.weight"] = tensors["token_embd.weight"]  # llama.cpp's copy, placed as the head
    for name, size in tensors.items():
        block = shape.block_of(name)
        expert = re.search(EXPERT_TENSORS, name) is not None
        target = matches(settings.overrides, name)
        if target is not None:
            device = HOST if target == CPU else by_buffer.get(target, HOST)
            table.fixed[device] = table.fixed.get(device, 0) + size
            if expert and block is not None:
                table.fixed_experts.add(block)
        elif block is None:
            if name.startswith(INPUT_TENSORS):
                table.input += size
            else:
                table.output += size
        elif expert:
            table.experts[block] += size
        else:
            table.dense[block] += size
    return table


# --- one layout: n_gpu_layers, moved experts and layers per device -> what each holds ----------

def _budget(room: Room, settings: FitSettings) -> int:
    budget = max(room.free - settings.margin - settings.reserved, 0)
    return min(budget, settings.gpu_memory) if settings.gpu_memory is not None else budget


def _layout(table: _Table, rooms: Sequence[Room], settings: FitSettings, n: int, k: int,
            counts: Sequence[int]) -> tuple[tuple[Share, ...], Share]:
    """The shares of each device and of the host for `n` GPU layers, the experts of blocks
    0..k-1 moved to the host and `counts[d]` of the offloaded layers on device d."""
    places = [HOST] * (table.n_layer + 1)  # where each layer is: blocks, then the output head
    start = table.n_layer + 1 - n
    owner = [room.name for room, count in zip(rooms, counts, strict=True) for _ in range(count)]
    for position, layer in enumerate(range(start, table.n_layer + 1)):
        places[layer] = owner[position]
    held: dict[str, dict] = {name: {"blocks": [], "experts": [], "weights": table.fixed.get(name, 0), "kv": 0}
                             for name in (*(room.name for room in rooms), HOST)}
    held[HOST]["weights"] += table.input
    for block in range(table.n_layer):
        here = held[places[block]]
        here["blocks"].append(block)
        here["weights"] += table.dense[block]
        here["kv"] += table.kv[block]
        if block not in table.fixed_experts and table.experts[block]:
            expert_place = held[HOST if block < k else places[block]]
            expert_place["experts"].append(block)
            expert_place["weights"] += table.experts[block]
    held[places[-1]]["weights"] += table.output
    budgets = {room.name: (_budget(room, settings), room.free) for room in rooms}

    def share(name: str) -> Share:
        parts = held[name]
        holds_output = places[-1] == name
        busy = bool(parts["blocks"]) or holds_output or name == HOST
        compute = (table.activations if busy else 0) + (table.logits if holds_output else 0)
        budget, free = budgets.get(name, (settings.host_free, settings.host_free))
        return Share(name, tuple(parts["blocks"]), holds_output, tuple(parts["experts"]), parts["weights"],
                     parts["kv"], compute, budget, free)

    return tuple(share(room.name) for room in rooms), share(HOST)


def _split_counts(shares: Sequence[float], n: int) -> list[int]:
    """How many of `n` offloaded layers each device gets for the shares `tensor_split` gives, as
    llama.cpp computes it (in float32: the same boundaries)."""
    cumulative = np.cumsum(np.asarray(shares, dtype=np.float32), dtype=np.float32)
    cumulative = cumulative / cumulative[-1]
    counts = [0] * len(shares)
    for position in range(n):
        device = bisect.bisect_right(cumulative.tolist(), float(np.float32(position) / np.float32(n)))
        counts[min(device, len(shares) - 1)] += 1
    return counts


def _layer_cost(table: _Table, layer: int, k: int) -> int:
    """Bytes a device takes for holding `layer` (a block, or `n_layer`: the output head)."""
    if layer == table.n_layer:
        return table.output
    experts = table.experts[layer] if layer >= k else 0
    return table.dense[layer] + table.kv[layer] + experts


def _fill(table: _Table, rooms: Sequence[Room], settings: FitSettings, n: int, k: int) -> list[int] | None:
    """Layers per device for `n` offloaded layers: the user's split, or each device in order
    taking as many as its budget holds. None when they do not fit."""
    start = table.n_layer + 1 - n
    if settings.tensor_split:
        counts = _split_counts(settings.tensor_split, n)
        devices, _ = _layout(table, rooms, settings, n, k, counts)
        return counts if all(share.fits for share in devices) else None
    counts = [0] * len(rooms)
    layer = start
    for index, room in enumerate(rooms):
        budget = _budget(room, settings)
        used = table.fixed.get(room.name, 0) + table.activations
        while layer <= table.n_layer:
            cost = _layer_cost(table, layer, k) + (table.logits if layer == table.n_layer else 0)
            if used + cost > budget:
                break
            used += cost
            counts[index] += 1
            layer += 1
    return counts if layer > table.n_layer else None


def _proportional_counts(rooms: Sequence[Room], settings: FitSettings, n: int) -> list[int]:
    """llama.cpp's own split of `n` layers when none is given: the user's shares, else by free memory."""
    shares = settings.tensor_split or tuple(float(max(room.free, 1)) for room in rooms)
    return _split_counts(shares, n)


def plan(shape: ModelShape, rooms: Sequence[Room], settings: FitSettings) -> Plan:
    """Where each of `shape`'s tensors goes on `rooms` (the offload devices, in llama.cpp's
    order) and system memory; see the module's docstring for the order of the fit."""
    table = _table(shape, rooms, settings)
    full = shape.n_layer + 1

    def made(n: int, k: int, counts: Sequence[int], reason: str, given: FitSettings = settings) -> Plan:
        devices, host = _layout(table, rooms, given, n, k, counts)
        split = tuple(float(c) for c in counts) if len(rooms) > 1 and n else ()
        return Plan(n, k, split, devices, host, reason, shape.n_layer, settings.overrides)

    if not rooms:
        return made(0, 0, [], "no GPU to offload to: everything in system memory")
    if isinstance(settings.gpu_layers, int):
        n = full if settings.gpu_layers < 0 else min(settings.gpu_layers, full)
        # a number the user chose may use the margin; only more than the free memory is refused
        return made(n, 0, _proportional_counts(rooms, settings, n) if n else [0] * len(rooms),
                    f"--gpu-layers {settings.gpu_layers}: {_layers(n, full)} on the GPU, as given",
                    dataclasses.replace(settings, margin=0))
    counts = _fill(table, rooms, settings, full, 0)
    if counts is not None:
        return made(full, 0, counts, f"everything fits on the GPU: {_layers(full, full)}")
    k = 0
    if table.movable_experts:
        for k in range(1, shape.n_layer + 1):
            counts = _fill(table, rooms, settings, full, k)
            if counts is not None:
                return made(full, k, counts, f"the expert tensors of {_blocks(range(k), shape.n_layer)} stay in "
                                             "system memory; everything else is on the GPU")
    for n in range(shape.n_layer, 0, -1):
        counts = _fill(table, rooms, settings, n, k)
        if counts is not None:
            experts = " (every block's experts in system memory)" if k else ""
            return made(n, k, counts, f"{_layers(n, full)} on the GPU{experts}, the first "
                                      f"{full - n} in system memory: no more fit")
    return made(0, 0, [0] * len(rooms), "not even one layer fits on the GPU: everything in system memory")


# --- words ----------------------------------------------------------------------------------

def _size(n: int) -> str:
    return f"{n / GIB:.2f} GiB" if n >= GIB else f"{n / MIB:.0f} MiB"


def _layers(n: int, full: int) -> str:
    return f"{n} of {full} layers" if n < full else f"all {full} layers (every block and the output head)"


def _ranges(blocks: Sequence[int]) -> str:
    """(0, 1, 2, 5) -> "0-2, 5"."""
    runs: list[list[int]] = []
    for block in blocks:
        if runs and block == runs[-1][1] + 1:
            runs[-1][1] = block
        else:
            runs.append([block, block])
    return ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in runs)


def _blocks(blocks: Sequence[int], n_layer: int) -> str:
    blocks = list(blocks)
    if len(blocks) == n_layer:
        return f"every block (0-{n_layer - 1})"
    return f"block {blocks[0]}" if len(blocks) == 1 else f"blocks {_ranges(blocks)}"


def _where(share: Share) -> str:
    return "system memory" if share.device == HOST else share.device


def _holding(share: Share, n_layer: int) -> str:
    held = []
    if share.blocks:
        held.append(f"the layers of {_blocks(share.blocks, n_layer)}")
    if share.expert_blocks:
        held.append(f"the experts of {_blocks(share.expert_blocks, n_layer)}")
    if share.output:
        held.append("the output head")
    if share.device == HOST:
        held.append("the token embedding")
    return ", ".join(held) or "nothing"


def _parts(share: Share) -> str:
    return f"{_size(share.weights)} weights, {_size(share.kv_cache)} KV cache, {_size(share.compute)} compute"


def _accounting(share: Share) -> str:
    if share.budget is None:
        return f"{_size(share.total)} ({_parts(share)})"
    return f"{_size(share.total)} ({_parts(share)}) of {_size(share.budget)} usable"
