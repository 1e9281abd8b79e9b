"""Server-wide settings of the HTTP API (from the command line)."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.media.policy import MediaPolicy
from app.settings.security import SecuritySettings

DEFAULT_MAX_LOGPROBS = 5


@dataclass(frozen=True)
class ApiSettings:
    max_logprobs: int = DEFAULT_MAX_LOGPROBS  # most alternatives per position `logprobs` may ask for
    security: SecuritySettings = field(default_factory=SecuritySettings)  # keys, CORS, body limit
    log_prompts: bool = False  # the request log line includes prompt and output text (--log-prompts)
    media: MediaPolicy = field(default_factory=MediaPolicy)  # which image URLs may be fetched
