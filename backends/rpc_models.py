"""Models whose layers run on RPC workers: loading them so that a worker lost mid-load fails the
load instead of hanging it, and what a lost worker leaves of a loaded model (backends/rpc.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from backends.engine import Engine
from backends.llama_model import ModelLoadError
from backends.rpc import (
    CONNECTIONS,
    Endpoint,
    RpcUnsupported,
    WorkerLost,
    WorkerUnreachable,
    local_gpus,
)


class ModelSpec(Protocol):  # backends.registry's, as far as this module reads it (the registry imports this)
    @property
    def id(self) -> str: ...
    @property
    def rpc(self) -> tuple[Endpoint, ...]: ...


class ServedModel(Protocol):
    id: str
    engine: Engine
    workers: WorkerLink | None


Served = TypeVar("Served", bound=ServedModel)
Spec = TypeVar("Spec", bound=ModelSpec)

# Models abandoned when a worker went away: their scheduler threads are blocked in llama.cpp
# for good, so nothing of them may be freed; kept referenced so that nothing is collected either.
_ABANDONED: list[ServedModel] = []


@dataclass
class WorkerLink:
    """A loaded model's hold on its workers' connections."""

    endpoints: tuple[Endpoint, ...]
    spellings: frozenset[str]
    watch: object

    def lost(self) -> str | None:
        gone = CONNECTIONS.lost(self.spellings)
        return f"RPC worker {gone} went away" if gone is not None else None


def load_on_workers(spec: Spec, load: Callable[[Spec, tuple[int, ...]], Served]) -> Served:
    """`load(spec, devices)` for a model with `rpc` workers: their devices first, then this
    machine's GPUs, as llama.cpp orders them. Watched from then on: a lost worker ends its jobs
    with a 503 at once (Engine.abandon) and marks it to load again."""
    spellings = CONNECTIONS.hold(spec.rpc)

    def connect_and_load() -> Served:
        try:
            devices = (*CONNECTIONS.devices(spec.rpc), *local_gpus())
        except (RpcUnsupported, WorkerUnreachable) as error:
            raise ModelLoadError(str(error)) from None
        return load(spec, devices)

    try:
        served = CONNECTIONS.guarded(spellings, connect_and_load, f"loading {spec.id}")
    except WorkerLost as error:
        raise ModelLoadError(str(error)) from None  # the load's thread stays blocked, holding its spellings
    except BaseException:
        CONNECTIONS.release(spellings)
        raise
    served.workers = WorkerLink(spec.rpc, spellings, CONNECTIONS.watch(spellings, served.engine.abandon))
    if CONNECTIONS.lost(spellings):  # lost between the load and the watch
        served.engine.abandon(WorkerLost(served.workers.lost() or "an RPC worker went away"))
    return served


def close_on_workers(served: Served, close: Callable[[Served], None]) -> None:
    """`close(served)` (which talks to its workers, to free what it holds there), given up if a
    worker is lost meanwhile; an abandoned model is not closed at all, only let go of."""
    link = served.workers
    assert link is not None
    CONNECTIONS.unwatch(link.watch)  # type: ignore[arg-type]
    if served.engine.abandoned is None:
        try:
            CONNECTIONS.guarded(link.spellings, lambda: close(served), f"unloading {served.id}")
        except WorkerLost:
            pass  # its closing thread waits on the dead worker for good
        else:
            CONNECTIONS.release(link.spellings)
            return
    _ABANDONED.append(served)  # its connections stay as they are, never reused
