"""`GET /health`: the server answers, and each loaded model's slots and queue (open without a key)."""

from __future__ import annotations

import dataclasses

import msgspec
from litestar import Request, get

from app.server.state import registry


class ModelHealth(msgspec.Struct):
    id: str
    slots: int
    busy_slots: int
    queued_choices: int  # choices waiting for a free slot
    queued_requests: int  # requests none of whose choices started (bounded by --max-queue)
    kv_used: int  # cache positions the slots hold (running requests and prefixes kept for reuse)


class Health(msgspec.Struct):
    status: str
    models: list[ModelHealth]


@get("/health")
async def health(request: Request) -> Health:
    return Health("ok", [ModelHealth(served.id, **dataclasses.asdict(served.engine.load())) for served in registry(request)])
