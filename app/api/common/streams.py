"""How a streamed answer is framed on the wire. OpenAI's and Fireworks' server-sent events are
one `data: {json}` event per chunk and a last `data: [DONE]`; other dialects bring their own
framing (event names, newline-delimited JSON)."""

from __future__ import annotations

from typing import Any

import msgspec

from app.pipeline.framing import Framing

_encoder = msgspec.json.Encoder()


def sse_data(chunk: Any) -> bytes:
    """One server-sent event carrying `chunk` as JSON."""
    return b"data: " + _encoder.encode(chunk) + b"\n\n"


# Proxies must neither cache nor buffer an event stream.
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
OPENAI_SSE = Framing(sse_data, b"data: [DONE]\n\n", "text/event-stream", SSE_HEADERS)
