"""This dialect's part of `/openapi.json` (filled in by its adapter)."""

from __future__ import annotations

from typing import Any

STRUCTS: list[type] = []


def paths(ref: Any) -> dict[str, Any]:
    return {}
