"""Every door's stream framing, in one place: how each API writes its stream's chunks on the wire
and ends it (`app.pipeline.framing.Framing`, which `app.pipeline.run.stream` writes with).

- OpenAI's and Fireworks' server-sent events: one `data: {json}` event per chunk, then `data: [DONE]`;
- TGI's and OpenAI audio's (`transcript.text.*`): the same `data:` events with no end marker;
- Anthropic's and OpenAI Responses': each event named by its payload's type (`event: name`), the
  last event ends the stream (no marker);
- Ollama's: newline-delimited JSON objects, the last one with `done: true`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from app.pipeline.framing import Framing

_encoder = msgspec.json.Encoder()


def sse_data(chunk: Any) -> bytes:
    """One server-sent event carrying `chunk` as JSON."""
    return b"data: " + _encoder.encode(chunk) + b"\n\n"


def sse_named(event: msgspec.Struct | None) -> bytes:
    """One server-sent event named by its payload's type: its `type` field (Responses), or the
    tag msgspec writes as `type` (Anthropic); None writes nothing."""
    if event is None:
        return b""
    name = getattr(event, "type", None) or type(event).__struct_config__.tag
    return b"event: " + str(name).encode() + b"\ndata: " + _encoder.encode(event) + b"\n\n"


def json_line(chunk: Any) -> bytes:
    return _encoder.encode(chunk) + b"\n"


# Proxies must neither cache nor buffer an event stream.
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
OPENAI_SSE = Framing(sse_data, b"data: [DONE]\n\n", "text/event-stream", SSE_HEADERS)
TGI_SSE = Framing(sse_data, b"", "text/event-stream", SSE_HEADERS)
AUDIO_SSE = Framing(sse_data, b"", "text/event-stream", SSE_HEADERS)  # transcript.text.done ends it
ANTHROPIC_SSE = Framing(sse_named, b"", "text/event-stream", SSE_HEADERS)  # message_stop ends it
RESPONSES_SSE = Framing(sse_named, b"", "text/event-stream", SSE_HEADERS)  # the last event ends it
NDJSON = Framing(json_line, b"", "application/x-ndjson")
