"""Which media URLs the server may fetch, and how much of one (`--allow-private-media-urls`): the
setting alone, so that the command line builds it without loading the fetching (`app.media.fetch`)."""

from __future__ import annotations

from dataclasses import dataclass

MAX_MEDIA_BYTES = 20 * 1024 * 1024


@dataclass(frozen=True)
class MediaPolicy:
    allow_private: bool = False  # fetch URLs on loopback, private and link-local addresses too
    max_bytes: int = MAX_MEDIA_BYTES
