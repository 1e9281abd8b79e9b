"""`GET /health`: the server answers, and each loaded model's slots and queue (open without a key)."""

from __future__ import annotations

import dataclasses
from collections import Counter

import msgspec
from litestar import Request, Response, get

from app.api.common.context import registry
from app.server.placement_info import Placement, placement_info
from backends.cpu_repack import repack_fallback


class ModelHealth(msgspec.Struct):
    id: str
    slots: int
    busy_slots: int
    queued_choices: int  # choices waiting for a free slot
    queued_requests: int  # requests none of whose choices started (bounded by --max-queue)
    kv_used: int  # cache positions the slots hold (running requests and prefixes kept for reuse)
    queued_embeddings: int  # inputs of embedding and rerank requests not embedded yet
    # how many tensors --cpu-moe, --n-cpu-moe and --override-tensor placed on each buffer type
    # (llama.cpp's own account at load); empty without overrides
    tensors_by_override: dict[str, int] = msgspec.field(default_factory=dict)
    placement: Placement | None = None  # where the fit put its tensors; None: no GPU or RPC device
    # false: loaded without llama.cpp's extra CPU buffer types (--no-repack, or they crash on this CPU)
    cpu_repack: bool = True
    cpu_repack_off_because: str | None = None  # why, where they crashed: "SIGSEGV in a canary decode"


class Health(msgspec.Struct):
    status: str
    models: list[ModelHealth]


@get("/health")
async def health(request: Request) -> Response[Health]:
    """200 `ok` while serving; 503 `draining` once the server is stopping (see app.server.shutdown)."""
    draining = request.app.state.drain.draining
    models = [ModelHealth(served.id, **dataclasses.asdict(served.engine.load()),
                          tensors_by_override=dict(Counter(served.model.overridden.values())),
                          placement=placement_info(served.placement), cpu_repack=served.model.cpu_repack,
                          cpu_repack_off_because=repack_fallback(served.model.path))
              for served in registry(request)]
    return Response(Health("draining" if draining else "ok", models), status_code=503 if draining else 200)
