"""The memory a model load may still take: what the system reports as available.

Linux: `MemAvailable` of /proc/meminfo (free memory plus the page cache and slabs the kernel can
reclaim, its own estimate of what a new program can take without swapping). Windows:
`GlobalMemoryStatusEx`'s available physical memory. Elsewhere (macOS, whose free page count
leaves out the cache it would give up) there is no reading it can trust: None, and no load is
refused for free memory there (`--memory-budget` still bounds what loads).

`FIRESIDE_FAKE_MEMAVAILABLE` (bytes) replaces the reading: tests use it to stand for a machine
short of memory, which cannot be arranged on a machine that has enough.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from pathlib import Path

log = logging.getLogger("fireside.memory")

FAKE_ENV = "FIRESIDE_FAKE_MEMAVAILABLE"
MEMINFO = Path("/proc/meminfo")


def available_memory() -> int | None:
    """Bytes a new allocation may take without swapping or the kernel's OOM killer; None: unknown."""
    fake = os.environ.get(FAKE_ENV)
    if fake:
        try:
            return int(fake)
        except ValueError:
            log.warning("%s=%r is not a number of bytes; ignored", FAKE_ENV, fake)
    if sys.platform.startswith("linux"):
        return _meminfo_available(MEMINFO)
    if sys.platform == "win32":
        return _windows_available()
    return None


def _meminfo_available(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="ascii")
    except OSError:
        return None
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name == "MemAvailable":
            fields = rest.split()
            if fields and fields[0].isdigit():
                return int(fields[0]) * (1024 if fields[1:] == ["kB"] else 1)
    return None  # kernels before 3.14 do not report it


class _MemoryStatusEx(ctypes.Structure):
    _fields_ = [("dwLength", ctypes.c_ulong), ("dwMemoryLoad", ctypes.c_ulong),
                ("ullTotalPhys", ctypes.c_ulonglong), ("ullAvailPhys", ctypes.c_ulonglong),
                ("ullTotalPageFile", ctypes.c_ulonglong), ("ullAvailPageFile", ctypes.c_ulonglong),
                ("ullTotalVirtual", ctypes.c_ulonglong), ("ullAvailVirtual", ctypes.c_ulonglong),
                ("ullAvailExtendedVirtual", ctypes.c_ulonglong)]


def _windows_available() -> int | None:
    status = _MemoryStatusEx()
    status.dwLength = ctypes.sizeof(_MemoryStatusEx)
    if not ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):  # type: ignore[attr-defined]
        return None
    return int(status.ullAvailPhys)


def describe_bytes(size: int) -> str:
    """`1.5 GiB`, `98.2 MiB`, `512 B`."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"
