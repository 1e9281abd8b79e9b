"""Signatures on what the server hands a client to send back unchanged: Anthropic's `thinking`
blocks and the Responses API's reasoning items. A block that comes back with a valid signature is
the model's own reasoning and is rendered as such; one that does not is refused.

The key is made once, kept in the data folder (readable by its owner only), so signatures stay
valid across restarts.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import os
import secrets
from pathlib import Path

from app.settings.locations import data_dir

KEY_FILE = "signing.key"
KEY_BYTES = 32


def _read_or_make(path: Path) -> bytes:
    try:
        key = path.read_bytes()
        if len(key) == KEY_BYTES:
            return key
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_bytes(KEY_BYTES)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(key)
    os.replace(temporary, path)  # atomic: two servers starting at once agree on one key
    return path.read_bytes()


@functools.cache
def _key() -> bytes:
    return _read_or_make(data_dir() / KEY_FILE)


def sign(kind: str, text: str) -> str:
    """A signature over `text` as a `kind` of content (so one kind's signature fits no other)."""
    digest = hmac.new(_key(), kind.encode() + b"\0" + text.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def verify(kind: str, text: str, signature: str) -> bool:
    return hmac.compare_digest(sign(kind, text), signature)
