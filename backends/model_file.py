"""Which files a model is (`gguf_parts`), what they were when it loaded, and whether they still are.

A loaded model holds its weights in memory (`ModelOptions.use_mmap` is off), so nothing done to
its file can crash the server; but a file that was replaced, rewritten, truncated or deleted is
no longer the model the server holds. The registry stamps the files before it loads them and
compares at each request's admission (one `stat` per file).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class FileStamp:
    path: Path
    device: int
    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: Path) -> FileStamp | None:
        try:
            stat = os.stat(path)
        except OSError:
            return None
        return cls(path, stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)

    def change(self) -> str | None:
        """How the file at `path` differs from this stamp, in words; None when it does not."""
        now = FileStamp.of(self.path)
        if now is None:
            return f"{self.path} was deleted"
        if (now.device, now.inode) != (self.device, self.inode):
            return f"{self.path} was replaced by another file"
        if now.size != self.size:
            verb = "truncated" if now.size < self.size else "extended"
            return f"{self.path} was {verb} from {self.size} to {now.size} bytes"
        if now.mtime_ns != self.mtime_ns:
            return f"{self.path} was rewritten"
        return None


def stamp_files(paths: list[Path]) -> tuple[FileStamp, ...]:
    """Stamps of the files that exist among `paths` (a missing one fails the load that follows)."""
    return tuple(stamp for stamp in map(FileStamp.of, paths) if stamp is not None)


def first_change(stamps: tuple[FileStamp, ...]) -> str | None:
    for stamp in stamps:
        change = stamp.change()
        if change is not None:
            return change
    return None


def gguf_parts(path: Path) -> list[Path]:
    """The files of a (possibly split) GGUF: `name-00001-of-00003.gguf` and its siblings."""
    if not path.exists():
        return []
    base, marker, count = path.stem.rpartition("-00001-of-")
    if not marker:
        return [path]
    parts = (path.with_name(f"{base}-{i:05d}-of-{count}.gguf") for i in range(1, int(count) + 1))
    return [part for part in parts if part.exists()]
