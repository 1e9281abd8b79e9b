"""A streamed response that always closes its iterator when the response ends.

Litestar's streaming response stops at the client's disconnect by cancelling the task that
sends; when that cancellation lands in `send` rather than inside the iterator, the iterator is
left suspended at a `yield` and closed only when the garbage collector finds it, which may be
never soon. Our iterators' `finally` blocks cancel the engine's job and release the model lease,
so that must happen as the response ends, however it ends.
"""

from __future__ import annotations

from typing import Any

from litestar.response import Stream
from litestar.response.base import ASGIResponse
from litestar.response.streaming import ASGIStreamingResponse
from litestar.types import Receive, Send


class _ClosingStreamingResponse(ASGIStreamingResponse):
    __slots__ = ()

    async def send_body(self, send: Send, receive: Receive) -> None:
        try:
            await super().send_body(send, receive)
        finally:
            close = getattr(self.iterator, "aclose", None)
            if close is not None:
                await close()  # a no-op for an iterator that ran to its end


class ClosingStream(Stream):
    """`Stream` whose iterator's `finally` runs when the response ends (see the module's note)."""

    __slots__ = ()

    def to_asgi_response(self, *args: Any, **kwargs: Any) -> ASGIResponse:
        response = super().to_asgi_response(*args, **kwargs)
        if type(response) is ASGIStreamingResponse:
            response.__class__ = _ClosingStreamingResponse  # same slots: only the behaviour changes
        return response
