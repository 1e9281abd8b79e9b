"""Replacing a file at once: a reader sees the old text or the new one, never half of one."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path


def replace_file(path: Path, text: str) -> None:
    """Write `text` to a new file in the same folder, sync it, and rename it over `path`. A crash
    or a full disk midway leaves the old file as it was. A `path` that is a symbolic link (into a
    dotfiles folder) stays one: the file it points to is replaced, with its permissions."""
    target = path.resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        with contextlib.suppress(FileNotFoundError):
            os.chmod(temporary, stat.S_IMODE(target.stat().st_mode))
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    _sync_folder(target.parent)


def _sync_folder(folder: Path) -> None:
    """Makes the rename itself durable (POSIX; Windows has no folder handles to sync)."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(handle)
    except OSError:
        pass  # some filesystems refuse to sync a folder; the rename is atomic all the same
    finally:
        os.close(handle)
