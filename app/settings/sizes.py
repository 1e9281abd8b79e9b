"""Sizes written for people: `16MiB`, `512KiB`, `16M` (binary), `16MB` (decimal), or bytes."""

from __future__ import annotations

import re

_UNITS = {
    "": 1, "b": 1,
    "k": 1024, "kib": 1024, "kb": 1000,
    "m": 1024**2, "mib": 1024**2, "mb": 1000**2,
    "g": 1024**3, "gib": 1024**3, "gb": 1000**3,
    "t": 1024**4, "tib": 1024**4, "tb": 1000**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes from `16777216`, `16MiB`, `16M` (binary) or `16MB` (decimal); at least 1 byte."""
    match = _SIZE.match(text)
    unit = match[2].lower() if match else ""
    if not match or unit not in _UNITS:
        raise ValueError(f"not a size: {text!r} (examples: 16MiB, 512KiB, 1000000)")
    size = int(float(match[1]) * _UNITS[unit])
    if size < 1:
        raise ValueError(f"size must be at least 1 byte: {text!r}")
    return size


def format_size(size: int) -> str:
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} bytes"
