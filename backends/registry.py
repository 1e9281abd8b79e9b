"""Served models: which models this server knows, which are loaded, and the lookup of a
request's `model` field.

Models given on the command line load at start-up; models from the config file load on their
first request. A request holds a lease on its model until its answer is done; a model with no
lease is unloaded after its keep-alive, or earlier when another model needs room (`max_loaded`,
`memory_budget`), least recently used first. A request whose model has no room waits for a
lease to end rather than failing, and never lands on a model that is being unloaded: it waits
for the unload and loads the model again. One task makes room for a model and loads it, however
many requests wait for it, and a request that leaves does not stop it.

Before a load: a config model's settings are read again from the config file (an edit applies at
its next load; a file that cannot be read leaves them as they were), its file must exist, and its
estimated memory must fit the memory budget and the system's available memory, or the load is
refused with the numbers (a 503 for its requests; at start-up, for a command-line model, the
start fails). At each request: a loaded model whose file was deleted, truncated, rewritten or
replaced since it loaded is unloaded once its running requests are done, and loads again from
the file as it is now (as Ollama loads a re-pulled model anew): a good new file serves, a broken
or missing one is a 503 saying what happened to it. The weights are read into memory, not
mapped (`ModelOptions.use_mmap`), so requests still running on the old copy finish safely.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from backends.engine import EngineOptions
from backends.fit import Plan
from backends.fit_inputs import FitLimits, offload_rooms
from backends.llama_model import ModelLoadError, ModelOptions
from backends.memory import available_memory, describe_bytes
from backends.model_file import FileStamp, first_change, gguf_parts, stamp_files
from backends.model_loader import ModelLoader
from backends.rpc_models import close_on_workers, load_on_workers
from backends.served import (
    DEFAULT_CTX,
    DEFAULT_MODEL_DISTRIBUTION,
    FOREVER,
    MemoryNeed,
    ModelSpec,
    ServedModel,
    default_model_path,
)

__all__ = ["DEFAULT_CTX", "DEFAULT_MODEL_DISTRIBUTION", "FOREVER", "Lease", "MemoryNeed", "ModelRegistry",
           "ModelSpec", "ServedModel", "default_model_path"]

log = logging.getLogger("fireside.registry")

REAP_EVERY = 1.0  # seconds between keep-alive checks


class _Entry:
    """One known model and its state on the event loop."""

    def __init__(self, spec: ModelSpec):
        self.spec = spec
        self.served: ServedModel | None = None
        self.users = 0  # leases held
        self.waiting = 0  # requests waiting for it to load or unload
        self.last_used = 0.0
        self.busy: asyncio.Future[None] | None = None  # its load or unload thread is running
        self.loading: asyncio.Task[None] | None = None  # making room for it, then loading it
        self._need: MemoryNeed | None = None
        self.stamps: tuple[FileStamp, ...] = ()  # its files as they were when the loaded copy was read
        self.changed: str | None = None  # what happened to its file since then, until a load succeeds
        self.created = int(time.time())
        self.keep_alive = spec.keep_alive  # a request may change it until the model unloads (Ollama's keep_alive)

    @property
    def loaded(self) -> bool:
        return self.served is not None

    @property
    def idle(self) -> bool:
        """Loaded, and neither in use nor wanted: it may be unloaded. A model whose load just ended
        is still wanted until its waiting requests take their leases."""
        return self.served is not None and self.users == 0 and self.waiting == 0 and self.busy is None

    def need(self, estimate: Callable[[ModelSpec], MemoryNeed]) -> MemoryNeed:
        """Its memory, estimated once per load (its file or settings may change while it is unloaded)."""
        if self._need is None:
            self._need = estimate(self.spec)
        return self._need


class Lease:
    """A request's hold on its model; `release` once its answer is done (idempotent). An adapter
    model's lease holds its base's lease too: the base stays loaded while the adapter is in use."""

    def __init__(self, registry: ModelRegistry, entry: _Entry, base: Lease | None = None):
        self._registry, self._entry, self._base = registry, entry, base
        self.served: ServedModel = entry.served  # type: ignore[assignment]
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._registry._release(self._entry)
            if self._base is not None:
                self._base.release()


class ModelRegistry:
    def __init__(self, specs: list[ModelSpec], model_options: ModelOptions, engine_options: EngineOptions, *,
                 max_loaded: int | None = None, memory_budget: int | None = None,
                 fit_limits: FitLimits | None = None,
                 clock: Callable[[], float] = time.monotonic, config: ConfigSource | None = None):
        self._entries: dict[str, _Entry] = {}
        self._by_name: dict[str, _Entry] = {}
        for spec in specs:
            for name in spec.names:
                if name in self._by_name:
                    raise ModelLoadError(f"two models would be served as {name!r}: give each another id or --alias")
            entry = self._entries[spec.id] = _Entry(spec)
            for name in spec.names:
                self._by_name[name] = entry
        self.max_loaded = max_loaded
        self.memory_budget = memory_budget
        self.fit_limits = fit_limits or FitLimits()
        self._loader = ModelLoader(model_options, engine_options, self.fit_limits)
        self._clock = clock
        self._waiters: list[asyncio.Future[None]] = []
        self._reaper: asyncio.Task[None] | None = None
        self._config = config

    @classmethod
    def load(cls, specs: list[ModelSpec], model_options: ModelOptions, engine_options: EngineOptions,
             **options: Any) -> ModelRegistry:
        """A registry with its eager models loaded (the command line's, before serving)."""
        registry = cls(specs, model_options, engine_options, **options)
        try:
            for entry in registry._entries.values():
                if entry.spec.eager and entry.spec.base is not None:  # its base, given before it, is loaded
                    registry._check_file(entry.spec)
                    base = registry._find(entry.spec.base)
                    assert base is not None and base.served is not None
                    entry.stamps = stamp_files([entry.spec.path])
                    entry.served = _attach(entry.spec, base.served)
                elif entry.spec.eager:
                    registry._check_file(entry.spec)
                    registry._check_budget(entry)
                    registry._check_free_memory(entry, reclaimable=[])
                    stamps = stamp_files(model_files(entry.spec))
                    entry.served = registry._load(entry.spec)
                    entry.stamps = stamps
                    entry.last_used = registry._clock()
        except BaseException:
            registry.close()
            raise
        return registry

    # ---- lookups ----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[ServedModel]:
        """The loaded models (not the adapter models served on their weights)."""
        return iter([entry.served for entry in self._entries.values()
                     if entry.served is not None and entry.spec.base is None])

    def specs(self) -> list[tuple[ModelSpec, ServedModel | None, int]]:
        """Every known model: its spec, its served model when loaded, when it became known."""
        self._sync_config()
        return [(entry.spec, entry.served, entry.created) for entry in self._entries.values()]

    def _find(self, name: str) -> _Entry | None:
        """By id or alias, by Fireworks-style `accounts/<account>/models/<id>`, or by the file's path."""
        entry = self._by_name.get(name)
        if entry is not None:
            return entry
        if self._sync_config():
            entry = self._by_name.get(name)
            if entry is not None:
                return entry
        parts = name.split("/")
        if len(parts) == 4 and parts[0] == "accounts" and parts[2] == "models":
            return self._by_name.get(parts[3])
        for entry in self._entries.values():
            if name == str(entry.spec.path):
                return entry
        return None

    def knows(self, name: str) -> ModelSpec | None:
        entry = self._find(name)
        return entry.spec if entry is not None else None

    # ---- leases -----------------------------------------------------------------------------

    async def acquire(self, name: str) -> Lease | None:
        """A lease on the model `name`, loading it first when needed (None: unknown model)."""
        entry = self._find(name)
        if entry is None:
            return None
        if entry.spec.base is not None:
            return await self._acquire_adapter(entry)
        entry.waiting += 1
        try:
            while True:
                pending = entry.loading or entry.busy
                if pending is not None:  # loading or unloading: wait, then look again
                    await asyncio.shield(pending)
                    continue
                if entry.served is not None and self._file_changed(entry):
                    if entry.users == 0:  # nothing runs on the old copy any more
                        unload = asyncio.get_running_loop().create_task(self._unload(entry, stale=True))
                        unload.add_done_callback(_retrieve_error)
                        await asyncio.shield(unload)  # a request that leaves does not cut it off
                    else:
                        await self._wait()
                    continue
                if entry.served is not None:
                    entry.users += 1
                    entry.last_used = self._clock()
                    return Lease(self, entry)
                entry.loading = asyncio.get_running_loop().create_task(self._make_room_and_load(entry))
                entry.loading.add_done_callback(_retrieve_error)
        finally:
            entry.waiting -= 1
            if entry.idle:  # left without a lease (a failed load, a request that went away)
                self._after_use(entry)

    async def _make_room_and_load(self, entry: _Entry) -> None:
        """The one task that makes room for `entry` and loads it; every request for it waits on
        this task, and a request that leaves meanwhile does not stop it (a load cut off halfway
        would leak the model its thread goes on loading)."""
        entry._need = None
        try:
            await self._refresh_spec(entry)
            self._check_file(entry.spec)
            self._check_budget(entry)
            await self._make_room(entry)
            await self._make_free_memory(entry)
            await self._load_entry(entry)
        except ModelLoadError as error:
            raise _after_change(entry, error) from None
        finally:
            entry.loading = None

    # ---- LoRA adapters: models served on another model's weights ----------------------------

    async def _acquire_adapter(self, entry: _Entry) -> Lease:
        """A lease on an adapter model: its base's lease (the base loading first when needed), with
        the adapter loaded onto the base's weights (once, however many requests wait for it)."""
        entry.waiting += 1
        try:
            while True:
                pending = entry.loading or entry.busy
                if pending is not None:
                    await asyncio.shield(pending)
                    continue
                if entry.served is None:
                    await self._refresh_spec(entry)  # read again before each load, as a model's entry is
                base = await self._lease_base(entry)
                try:
                    ready = await self._adapter_on(entry, base.served)
                except BaseException:
                    base.release()
                    raise
                if ready:
                    entry.users += 1
                    entry.last_used = self._clock()
                    return Lease(self, entry, base)
                base.release()
                await self._wait()  # its file changed under running requests: they end first
        finally:
            entry.waiting -= 1
            if entry.idle:
                self._after_use(entry)

    async def _lease_base(self, entry: _Entry) -> Lease:
        name = entry.spec.base
        assert name is not None
        base = self._find(name)
        if base is None:
            raise ModelLoadError(f"{entry.spec.id} is a LoRA adapter on {name!r}, a model this server does not serve")
        if base.spec.base is not None or base.spec.upstream is not None:
            where = "another adapter" if base.spec.base is not None else "a model that runs upstream"
            raise ModelLoadError(f"{entry.spec.id} is a LoRA adapter on {name!r}, which is {where}: an adapter "
                                 "applies to a model loaded here")
        lease = await self.acquire(name)
        assert lease is not None
        return lease

    async def _adapter_on(self, entry: _Entry, base: ServedModel) -> bool:
        """Whether `entry`'s adapter is loaded onto `base` (whose lease the caller holds), loading it
        when it is not; False when its file changed and requests still run on the loaded copy."""
        while True:
            pending = entry.loading or entry.busy
            if pending is not None:
                await asyncio.shield(pending)
                continue
            view = entry.served
            if view is None:
                entry.loading = asyncio.get_running_loop().create_task(self._load_adapter(entry, base))
                entry.loading.add_done_callback(_retrieve_error)
                continue
            if view.model is not base.model:  # loaded onto a copy of the base that has unloaded since
                entry.served = None
                continue
            if not self._file_changed(entry):
                return True
            if entry.users:
                return False
            unload = asyncio.get_running_loop().create_task(self._unload(entry, stale=True))
            unload.add_done_callback(_retrieve_error)
            await asyncio.shield(unload)

    async def _load_adapter(self, entry: _Entry, base: ServedModel) -> None:
        """The one task that loads `entry`'s adapter onto `base`'s weights (the base is not reloaded)."""
        try:
            self._check_file(entry.spec)
            log.info("loading LoRA adapter %s from %s onto %s", entry.spec.id, entry.spec.path, base.id)
            stamps = stamp_files([entry.spec.path])
            entry.served = await asyncio.to_thread(_attach, entry.spec, base)
            entry.stamps, entry.changed = stamps, None
            entry.last_used = self._clock()
        except ModelLoadError as error:
            raise _after_change(entry, error) from None
        finally:
            entry.loading = None
            self._wake()

    def _release(self, entry: _Entry) -> None:
        entry.users -= 1
        entry.last_used = self._clock()
        self._after_use(entry)

    def _after_use(self, entry: _Entry) -> None:
        if entry.idle and entry.keep_alive <= 0:
            self._start_unload(entry)
        self._wake()

    async def _load_entry(self, entry: _Entry) -> None:
        busy = entry.busy = asyncio.get_running_loop().create_future()
        try:
            log.info("loading %s from %s", entry.spec.id, entry.spec.path)
            stamps = stamp_files(model_files(entry.spec))  # before reading: a change while it loads shows
            entry.served = await asyncio.to_thread(self._load, entry.spec)
            entry.stamps, entry.changed = stamps, None
            entry.last_used = self._clock()
        finally:
            busy.set_result(None)  # a failure reaches the waiting requests through `entry.loading`
            entry.busy = None
            self._wake()

    # ---- room: max_loaded and memory_budget ---------------------------------------------------

    def _over_limits(self, adding: _Entry) -> bool:
        resident = [e for e in self._entries.values()
                    if (e.loaded or e.busy is not None) and e is not adding and e.spec.base is None]
        if self.max_loaded is not None and len(resident) + 1 > self.max_loaded:
            return True
        if self.memory_budget is not None and resident:
            used = sum(e.need(self.estimate).total for e in resident)
            return used + adding.need(self.estimate).total > self.memory_budget
        return False

    def _check_budget(self, entry: _Entry) -> None:
        """A model that alone takes more than the budget never fits: refused, not waited for."""
        need = entry.need(self.estimate)
        if self.memory_budget is not None and need.total > self.memory_budget:
            raise ModelLoadError(f"{entry.spec.id} needs {need}, more than the memory budget of "
                                 f"{describe_bytes(self.memory_budget)} (--memory-budget or memory_budget)")

    def _check_free_memory(self, entry: _Entry, reclaimable: list[_Entry]) -> int | None:
        """Refuses a model larger than the available memory and what unloading `reclaimable` would
        free; returns the available memory (None: unknown, or the model goes to a GPU)."""
        if entry.spec.rpc or (entry.spec.gpu_layers != 0 and offload_rooms()):
            return None  # the fit checks what goes to a GPU or a worker, and what stays here
        available = available_memory()
        if available is None:
            return None
        need = entry.need(self.estimate)
        freeable = sum(e.need(self.estimate).total for e in reclaimable)
        if need.total > available + freeable:
            idle = f", and {describe_bytes(freeable)} more held by idle models" if freeable else ""
            raise ModelLoadError(f"{entry.spec.id} needs {need}, more than the free memory: "
                                 f"{describe_bytes(available)} available{idle}")
        return available

    async def _make_free_memory(self, adding: _Entry) -> None:
        """Unload idle models, least recently used first, while `adding` does not fit in the
        available memory; refuse it when unloading them all would not make it fit."""
        idle = sorted((e for e in self._entries.values() if e.idle and e is not adding and e.spec.base is None),
                      key=lambda e: e.last_used)
        available = self._check_free_memory(adding, idle)
        if available is None:
            return
        for victim in idle:
            if adding.need(self.estimate).total <= available:
                return
            if victim.idle:
                log.info("unloading %s to free memory for %s", victim.spec.id, adding.spec.id)
                await self._unload(victim)
                available += victim.need(self.estimate).total

    async def _make_room(self, adding: _Entry) -> None:
        """Unload idle models, least recently used first, until `adding` fits; wait for a lease to
        end when every loaded model is in use."""
        while self._over_limits(adding):
            idle = [e for e in self._entries.values() if e.idle and e is not adding and e.spec.base is None]
            if idle:
                victim = min(idle, key=lambda e: e.last_used)
                log.info("unloading %s to make room for %s", victim.spec.id, adding.spec.id)
                await self._unload(victim)
            else:
                await self._wait()

    async def _wait(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        await waiter

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # ---- unloading ----------------------------------------------------------------------------

    def _start_unload(self, entry: _Entry) -> None:
        if entry.idle:
            asyncio.get_running_loop().create_task(self._unload(entry))

    async def _unload(self, entry: _Entry, *, stale: bool = False) -> None:
        """Unload `entry` if it is idle; `stale`: also while requests wait for it (to load it anew)."""
        served = entry.served
        unused = served is not None and entry.users == 0 and entry.busy is None
        if not (entry.idle or (stale and unused)):
            return
        busy = entry.busy = asyncio.get_running_loop().create_future()
        entry.served = None  # from here on it is closing, even if this task is cancelled mid-way
        entry.keep_alive = entry.spec.keep_alive  # a request's keep-alive lasted as long as this load
        try:
            await asyncio.to_thread(_close, served)
            log.info("unloaded %s", entry.spec.id)
            if entry.spec.base is None:  # a model: the adapters loaded onto it went with it
                for other in self._entries.values():
                    if other.spec.base is not None and other.served is not None and other.served.model is served.model:
                        other.served = None
        finally:
            busy.set_result(None)
            entry.busy = None
            self._wake()

    async def _reap(self) -> None:
        """Unload models whose keep-alive ran out; serve what the config file gained since."""
        while True:
            await asyncio.sleep(REAP_EVERY)
            self._sync_config()
            now = self._clock()
            for entry in list(self._entries.values()):
                if entry.idle and now - entry.last_used >= entry.keep_alive:
                    await self._unload(entry)

    async def start(self) -> None:
        """Start the keep-alive reaper (on the serving event loop)."""
        if self._reaper is None and (self._config is not None
                                     or any(e.spec.keep_alive < FOREVER for e in self._entries.values())):
            self._reaper = asyncio.get_running_loop().create_task(self._reap())

    async def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None

    # ---- keep-alive, unloading and registering at run time (Ollama's API) ---------------------

    def keep_alive(self, name: str, seconds: float) -> None:
        """Keep `name` loaded for `seconds` after its last use, until it next unloads (0: unload as
        soon as no request uses it; FOREVER: never)."""
        entry = self._find(name)
        if entry is None:
            return
        entry.keep_alive = seconds
        if seconds < FOREVER:
            self._start_reaper()
        self._after_use(entry)

    def _start_reaper(self) -> None:
        if self._reaper is None:
            self._reaper = asyncio.get_running_loop().create_task(self._reap())

    async def unload(self, name: str) -> None:
        """Unload `name` now if no request uses it (else it unloads after them, by its keep-alive)."""
        entry = self._find(name)
        if entry is None:
            return
        if entry.busy is not None:
            await asyncio.shield(entry.busy)
        if entry.idle:
            await self._unload(entry)
        elif entry.served is not None:
            entry.keep_alive = 0  # it unloads when its requests are done

    def expires_at(self, name: str) -> float | None:
        """When (on this registry's clock) `name` unloads if nobody uses it; None: never, or not loaded."""
        entry = self._find(name)
        if entry is None or entry.served is None or entry.keep_alive >= FOREVER:
            return None
        return entry.last_used + entry.keep_alive

    def add(self, spec: ModelSpec) -> None:
        """Serve another model (loaded on first use); a model of the same id that is not loaded is
        replaced (a pull that updates it)."""
        old = self._entries.get(spec.id)
        if old is not None and old.spec == spec:
            return  # already served as it is
        if old is not None and (old.loaded or old.busy is not None or old.users):
            raise ModelLoadError(f"{spec.id} is loaded; unload it before replacing it")
        for name in spec.names:
            other = self._by_name.get(name)
            if other is not None and other is not old:
                raise ModelLoadError(f"two models would be served as {name!r}: give each another id or alias")
        if old is not None:
            self._forget(old)
        entry = self._entries[spec.id] = _Entry(spec)
        for name in spec.names:
            self._by_name[name] = entry
        if spec.keep_alive < FOREVER:
            self._start_reaper()

    async def remove(self, name: str) -> ModelSpec | None:
        """Stop serving `name` (unloading it first; None: unknown). A model in use is refused."""
        entry = self._find(name)
        if entry is None:
            return None
        if entry.users or entry.waiting or entry.loading is not None:
            raise ModelLoadError(f"{entry.spec.id} is in use; try again when its requests are done")
        if entry.busy is not None:
            await asyncio.shield(entry.busy)
        await self._unload(entry)
        self._forget(entry)
        return entry.spec

    def _sync_config(self) -> bool:
        """Whether the config file changed since it was last read; its new models are then served
        (loaded on their first request), and a LoRA adapter gone from it unloads its tensors once
        its requests are done (its base stays). A model gone from it is refused at its next load."""
        if self._config is None or not self._config.changed():
            return False
        try:
            configured = {spec.id: spec for spec in self._config.models()}
        except (ValueError, OSError) as error:
            log.warning("the config file cannot be read, its models are served as they were: %s", error)
            return True
        for spec in configured.values():
            if spec.id not in self._entries:
                try:
                    self.add(spec)
                    log.info("%s: added to the config, served from its first request", spec.id)
                except ModelLoadError as error:
                    log.warning("%s: in the config but not served: %s", spec.id, error)
        for entry in self._entries.values():
            if entry.spec.base is not None and entry.spec.reread is not None and entry.spec.id not in configured:
                entry.keep_alive = 0
                if entry.idle:
                    with contextlib.suppress(RuntimeError):  # no event loop: nothing is loaded yet either
                        self._start_unload(entry)
        return True

    def _forget(self, entry: _Entry) -> None:
        del self._entries[entry.spec.id]
        for name in [n for n, e in self._by_name.items() if e is entry]:
            del self._by_name[name]

    # ---- what changed since a model was configured or loaded ----------------------------------

    def _file_changed(self, entry: _Entry) -> bool:
        """Whether the loaded copy of `entry` is no longer its file (noted once, in the log)."""
        if entry.changed is None:
            workers = entry.served.workers if entry.served is not None else None
            entry.changed = first_change(entry.stamps) or (workers.lost() if workers is not None else None)
            if entry.changed is None:
                return False
            log.warning("%s: %s; it loads again from the file once its running requests are done",
                        entry.spec.id, entry.changed)
        return True

    async def _refresh_spec(self, entry: _Entry) -> None:
        """The model's settings as its config file gives them now (kept as they were when the
        file cannot be read: an edit half saved, a syntax error)."""
        if entry.spec.reread is None:
            return
        try:
            fresh = await asyncio.to_thread(entry.spec.reread)
        except (ValueError, OSError) as error:
            log.warning("%s: keeping the settings it had, the config cannot be read: %s", entry.spec.id, error)
            return
        if fresh == entry.spec:
            return
        for name in fresh.names:
            other = self._by_name.get(name)
            if other is not None and other is not entry:
                raise ModelLoadError(f"the config now names {fresh.id} {name!r}, which {other.spec.id} is served as")
        log.info("%s: loading with its settings as the config now gives them", fresh.id)
        for name in entry.spec.names:
            del self._by_name[name]
        for name in fresh.names:
            self._by_name[name] = entry
        entry.spec, entry._need, entry.keep_alive = fresh, None, fresh.keep_alive
        if fresh.keep_alive < FOREVER:
            self._start_reaper()

    @staticmethod
    def _check_file(spec: ModelSpec) -> None:
        for path, what in ((spec.path, "LoRA adapter file" if spec.base is not None else "model file"),
                           (spec.mmproj, "projector file"), (spec.draft_model, "draft model file"),
                           (spec.chat_template, "chat template")):
            if path is not None and not path.is_file():
                raise ModelLoadError(f"{what} of {spec.id} not found: {path}")

    # ---- loading ------------------------------------------------------------------------------

    def _load(self, spec: ModelSpec) -> ServedModel:
        return load_on_workers(spec, self._loader.load) if spec.rpc else self._loader.load(spec)

    def placement(self, spec: ModelSpec, devices: tuple[int, ...] = (), *, cpu_only: bool = False) -> Plan | None:
        return self._loader.placement(spec, devices, cpu_only=cpu_only)

    def estimate_bytes(self, spec: ModelSpec) -> int:
        return self._loader.estimate(spec).total

    def estimate(self, spec: ModelSpec) -> MemoryNeed:
        return self._loader.estimate(spec)

    def close(self) -> None:
        for entry in self._entries.values():
            if entry.served is not None and entry.spec.base is None:
                _close(entry.served)  # with the adapters loaded onto it
        for entry in self._entries.values():
            entry.served = None


class ConfigSource(Protocol):
    """The config file the registry serves models from (`app.settings.config.ConfigWatch`)."""

    def changed(self) -> bool:
        """Whether the file changed since this was last asked (true the first time)."""

    def models(self) -> list[ModelSpec]:
        """Its models as they are now (ValueError or OSError when it cannot be read)."""


def _after_change(entry: _Entry, error: ModelLoadError) -> ModelLoadError:
    """A failed load's error, saying what happened to the files when a change made it load again."""
    if entry.changed is None:
        return error
    return ModelLoadError(f"{entry.changed} while {entry.spec.id} was loaded, and loading it again failed: {error}")


def _retrieve_error(task: asyncio.Task[None]) -> None:
    """Marks a load's failure as seen when every request that waited for it has left."""
    if not task.cancelled():
        task.exception()


def _attach(spec: ModelSpec, base: ServedModel) -> ServedModel:
    """Load the adapter model `spec` onto `base`'s weights: its view of the base (the same engine,
    decoding under the adapter), with the adapter's chat template and sampling defaults over the base's.
    At scale 0 its set is empty: its requests batch with the base's and share its cached prompts."""
    from backends.adapters import AdapterError, AdapterSet, LoraAdapter

    try:
        adapter = LoraAdapter(base.model, spec.path)
    except AdapterError as error:
        raise ModelLoadError(f"{spec.id}: {error}") from None
    template = spec.chat_template.read_text(encoding="utf-8") if spec.chat_template else base.chat_template
    base.loras[spec.id] = adapter
    return dataclasses.replace(base, id=spec.id, path=spec.path, chat_template=template,
                               defaults={**base.defaults, **spec.sampling}, base=base.id,
                               adapters=AdapterSet(((adapter, spec.lora_scale),) if spec.lora_scale else ()),
                               created=int(time.time()))


def _close(served: ServedModel) -> None:
    if served.adapters is not None:  # an adapter model: its own tensors only, the base stays
        # (left in the base's `loras`, closed: the base's own unload may be closing them in another
        # thread, and closing one twice is nothing; its next load takes the place)
        adapter = served.loras.get(served.id)  # its adapter, also at scale 0 (an empty set)
        if adapter is not None:
            adapter.close()
        return
    if served.workers is not None:
        close_on_workers(served, _free)
    else:
        _free(served)


def _free(served: ServedModel) -> None:
    served.engine.close()
    if served.projector is not None:
        served.projector.close()
    for adapter in list(served.loras.values()):  # before the weights they were made for
        adapter.close()
    served.model.close()


def model_files(spec: ModelSpec) -> list[Path]:
    """The files a load reads: the GGUF's parts and the projector."""
    return [*gguf_parts(spec.path), *(path for path in (spec.mmproj, spec.draft_model) if path is not None)]
