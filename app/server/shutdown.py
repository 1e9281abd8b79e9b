"""Stopping without losing answers in flight.

On SIGTERM or SIGINT the server drains: it keeps listening, but every new request gets a 503 (in
its front door's error shape) and `/health` says `draining`; the requests already running go on
until they end or until the grace period is over, when the engines end them with an error that
says the server is shutting down (a stream gets its front door's final error chunk, never a cut
body). Then uvicorn stops as usual and the process exits 0. A second signal stops at once.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from types import FrameType

import uvicorn
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from litestar.types import ASGIApp, Receive, Scope, Send

from app.pipeline.errors import ApiError

log = logging.getLogger("fireside.server")


class ShuttingDown(ApiError):
    """The server is draining before it exits: new requests are refused, running ones end."""

    status_code = 503
    error_type = "server_error"

    def __init__(self) -> None:
        super().__init__("the server is shutting down; retry on its next start",
                         code="shutting_down", headers={"Retry-After": "5", "Connection": "close"})


class Drain:
    """Whether the server drains, and how many HTTP requests are still being answered."""

    def __init__(self) -> None:
        self.draining = False
        self.in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def wrap(self, app: ASGIApp) -> ASGIApp:
        """Count the requests `app` is answering (an answer counts until its last byte is sent)."""
        async def counted(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            self.in_flight += 1
            self._idle.clear()
            try:
                await app(scope, receive, send)
            finally:
                self.in_flight -= 1
                if self.in_flight == 0:
                    self._idle.set()
        return counted

    async def until_idle(self, timeout: float) -> bool:
        """Wait until no request is in flight; False if `timeout` passed first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def guard(self, connection: ASGIConnection, _: BaseRouteHandler) -> None:
        """The app-level guard: while draining, every route but `/health` answers 503."""
        if self.draining and connection.scope["path"] != "/health":
            raise ShuttingDown()


class DrainingServer(uvicorn.Server):
    """uvicorn's server, with a drain before its own shutdown on the first SIGTERM or SIGINT.

    `abort` ends every engine's running and queued work with `ShuttingDown` (the grace is over)."""

    def __init__(self, config: uvicorn.Config, drain: Drain, abort: Callable[[Exception], None],
                 grace: float):
        super().__init__(config)
        self.drain = drain
        self.abort = abort
        self.grace = grace
        self._loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.drain.draining or self._loop is None or not self.started:
            super().handle_exit(sig, frame)  # a second signal, or one before serving: stop now
            if self.drain.draining:
                self.force_exit = True
            return
        self._captured_signals.append(sig)  # raised again once uvicorn has stopped
        self.drain.draining = True
        log.info("%s: draining %d requests (at most %g s), refusing new ones",
                 signal.Signals(sig).name, self.drain.in_flight, self.grace)
        self._loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._drain()))

    async def _drain(self) -> None:
        if not await self.drain.until_idle(self.grace):
            log.info("grace period over: ending %d requests", self.drain.in_flight)
            self.abort(ShuttingDown())
            await self.drain.until_idle(10.0)  # their final chunks go out (a reader that stalls: not forever)
        self.should_exit = True
