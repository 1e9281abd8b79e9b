"""The engine's events on their way to the event loops that wait for them.

The scheduler thread emits events into the outbox as it samples; `flush` hands each step's due
events, in one batch, to a notifier thread right before the next decode, and the notifier wakes
each event loop with `loop.call_soon_threadsafe`. A wake-up makes the loop's thread take the GIL,
which the scheduler thread would otherwise wait out between two decodes. Whole-answer jobs are
due only when something other than text arrives (a choice ends, a failure).
"""

from __future__ import annotations

import asyncio
import queue
import threading

from backends.jobs import Event, JobHandle, TextDelta


class Outbox:
    def __init__(self) -> None:
        self._events: dict[JobHandle, list[Event]] = {}
        self._due: set[JobHandle] = set()  # handles whose events go out at the next flush
        self._notices: queue.SimpleQueue[dict | None] = queue.SimpleQueue()
        self._notifier = threading.Thread(target=self._notify, name="engine-notify", daemon=True)
        self._notifier.start()

    def emit(self, handle: JobHandle, event: Event) -> None:
        self._events.setdefault(handle, []).append(event)
        if handle.job.stream or not isinstance(event, TextDelta):
            self._due.add(handle)

    def drop(self, handle: JobHandle) -> None:
        """Forget a cancelled job's undelivered events."""
        self._events.pop(handle, None)

    def flush(self) -> None:
        if not self._due:
            return
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[JobHandle, list[Event]]]] = {}
        for handle in self._due:
            events = self._events.pop(handle, None)
            if events and not handle.cancelled:
                by_loop.setdefault(handle.loop, []).append((handle, events))
        self._due.clear()
        self._notices.put(by_loop)

    def close(self) -> None:
        self._notices.put(None)
        self._notifier.join()

    def _notify(self) -> None:
        while (by_loop := self._notices.get()) is not None:
            for loop, deliveries in by_loop.items():
                try:
                    loop.call_soon_threadsafe(_deliver, deliveries)
                except RuntimeError:  # the loop closed (server shutting down)
                    pass


def _deliver(deliveries: list[tuple[JobHandle, list[Event]]]) -> None:
    for handle, events in deliveries:
        handle.deliver(events)
