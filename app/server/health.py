"""`GET /health`: the server answers, and each loaded model's slots and queue (open without a key)."""

from __future__ import annotations

import dataclasses
from collections import Counter

import msgspec
from litestar import Request, Response, get

from app.api.common.context import registry
from app.server.placement_info import Placement, placement_info
from backends.cpu_repack import repack_fallback
from backends.registry import ServedModel
from backends.slot_states import StateStats


class CacheHealth(msgspec.Struct):
    """What the model's slots can be brought back to, and what its caches take."""

    kv_bytes: dict[str, int]  # allocated by kind of layer: full (attention), window (sliding), recurrent
    checkpoints: int  # context checkpoints the slots hold (caches that cannot be cut back)
    checkpoint_bytes: int
    ram_entries: int  # prompts kept in the RAM prompt cache (--cache-ram)
    ram_bytes: int
    ram_hits: int  # prompts restored from it (from disk through it, after a restart)
    ram_lookups: int  # prompts for which no slot held as much as an entry might
    ram_hit_rate: float | None  # hits / lookups; None before the first lookup
    reused_tokens: dict[str, int]  # cached prompt tokens since start by where they came from


class ModelHealth(msgspec.Struct):
    id: str
    slots: int
    busy_slots: int
    queued_choices: int  # choices waiting for a free slot
    queued_requests: int  # requests none of whose choices started (bounded by --max-queue)
    kv_used: int  # cache positions the slots hold (running requests and prefixes kept for reuse)
    held_slots: int  # slots holding a cached prompt (or running)
    queued_embeddings: int  # inputs of embedding and rerank requests not embedded yet
    # how many tensors --cpu-moe, --n-cpu-moe and --override-tensor placed on each buffer type
    # (llama.cpp's own account at load); empty without overrides
    tensors_by_override: dict[str, int] = msgspec.field(default_factory=dict)
    placement: Placement | None = None  # where the fit put its tensors; None: no GPU or RPC device
    # false: loaded without llama.cpp's extra CPU buffer types (--no-repack, or they crash on this CPU)
    cpu_repack: bool = True
    cpu_repack_off_because: str | None = None  # why, where they crashed: "SIGSEGV in a canary decode"
    prompt_cache: CacheHealth | None = None


class Health(msgspec.Struct):
    status: str
    models: list[ModelHealth]


def _model_health(served: ServedModel) -> ModelHealth:
    load = served.engine.load()
    fields = {key: value for key, value in dataclasses.asdict(load).items() if key != "states"}
    return ModelHealth(served.id, **fields, tensors_by_override=dict(Counter(served.model.overridden.values())),
                       placement=placement_info(served.placement), cpu_repack=served.model.cpu_repack,
                       cpu_repack_off_because=repack_fallback(served.model.path),
                       prompt_cache=_cache_health(served, load.states))


def _cache_health(served: ServedModel, states: StateStats | None) -> CacheHealth | None:
    if states is None:
        return None
    sizes = served.engine.kv_sizes
    return CacheHealth({"full": sizes.full, "window": sizes.window, "recurrent": sizes.recurrent},
                       states.checkpoints, states.checkpoint_bytes, states.ram_entries, states.ram_bytes,
                       states.ram_hits, states.ram_lookups,
                       states.ram_hits / states.ram_lookups if states.ram_lookups else None, states.reused)


@get("/health")
async def health(request: Request) -> Response[Health]:
    """200 `ok` while serving; 503 `draining` once the server is stopping (see app.server.shutdown)."""
    draining = request.app.state.drain.draining
    models = [_model_health(served) for served in registry(request)]
    return Response(Health("draining" if draining else "ok", models), status_code=503 if draining else 200)
