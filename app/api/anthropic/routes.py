"""Routes of this dialect (filled in by its adapter)."""

from __future__ import annotations

ROUTES: list = []
