"""A streamed answer's iterator is closed when the client leaves, even when Litestar's
cancellation lands in `send` rather than in the iterator (seen under load in CI: the engine
job of a stream whose client had left ran on to its last token, the lease held all along).

Driven at the ASGI level so that where the cancellation lands is fixed, not left to timing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from litestar import Litestar, get
from litestar.response import Stream

from app.pipeline.closing_stream import ClosingStream


async def _serve_one(stream_class: type[Stream]) -> list[str]:
    closed: list[str] = []

    async def frames() -> AsyncIterator[bytes]:
        try:
            while True:
                yield b"data: x\n\n"
        finally:
            closed.append("closed")

    @get("/stream")
    async def route() -> Stream:
        return stream_class(frames(), media_type="text/event-stream")

    app = Litestar([route])
    first_body = asyncio.Event()

    async def receive() -> dict:
        await first_body.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.body":
            first_body.set()
            await asyncio.sleep(3600)  # a slow client: the disconnect's cancellation lands here

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": "/stream", "raw_path": b"/stream", "query_string": b"", "root_path": "",
             "headers": [], "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80), "state": {}}
    await asyncio.wait_for(app(scope, receive, send), timeout=10)
    return list(closed)  # as the response ends, before the loop runs any finalizer it scheduled


def test_the_iterator_is_closed_when_the_client_leaves_during_a_send() -> None:
    assert asyncio.run(_serve_one(ClosingStream)) == ["closed"]


def test_litestar_s_own_stream_leaves_it_suspended() -> None:
    """The reason for ClosingStream: if Litestar starts closing it, ClosingStream can go. (Here
    the garbage collector finalizes the iterator soon after; in the server a reference cycle
    kept it alive for longer than a 900-token answer.)"""
    closed = asyncio.run(_serve_one(Stream))
    if closed:
        pytest.fail("Litestar's Stream now closes its iterator at a disconnect: use it and drop ClosingStream")
