"""JSON as tool calls read and write it: strict parsing and compact writing."""

from __future__ import annotations

import json
import math
from typing import Any


def dump_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("number out of range")
    return value


def load_json(text: str) -> Any:
    """Strict JSON (no NaN/Infinity, no numbers that overflow to infinity)."""
    return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
