"""How a streamed answer is framed on the wire: what `app.pipeline.run.stream` writes each chunk
with and ends a stream with. The framings themselves, one per API, are in `app.api.common.streams`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Framing:
    frame: Callable[[Any], bytes]  # one chunk as it goes out
    end: bytes  # after the last chunk of a stream that ran to its end (or failed); b"": nothing
    media_type: str
    headers: dict[str, str] = field(default_factory=dict)
