"""How a streamed answer is framed on the wire. OpenAI's and Fireworks' server-sent events are
one `data: {json}` event per chunk and a last `data: [DONE]`; other dialects bring their own
framing (event names, newline-delimited JSON)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

_encoder = msgspec.json.Encoder()


def sse_data(chunk: Any) -> bytes:
    """One server-sent event carrying `chunk` as JSON."""
    return b"data: " + _encoder.encode(chunk) + b"\n\n"


@dataclass(frozen=True)
class Framing:
    frame: Callable[[Any], bytes]  # one chunk as it goes out
    end: bytes  # after the last chunk of a stream that ran to its end (or failed); b"": nothing
    media_type: str
    headers: dict[str, str] = field(default_factory=dict)


# Proxies must neither cache nor buffer an event stream.
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
OPENAI_SSE = Framing(sse_data, b"data: [DONE]\n\n", "text/event-stream", SSE_HEADERS)
