"""Downloads that survive being stopped, for a pull (`app.hub`).

The bytes go to `<file>.part` beside the file's final path; a later attempt (in the same process
after a dropped connection, or a new pull after a kill, Ctrl-C or a full disk) continues from the
part's size with an HTTP Range request, and starts over when the server ignores Range and answers
200. The caller checks the whole part and renames it to the final name, so that name only ever
holds a complete, checked file.

Space: the free space is checked against what is still to come before each request, and a write
that fails for want of room (ENOSPC, EDQUOT, or EFBIG where the file system caps a file's size)
ends the pull with one line naming the folder, what was needed and what is free. The part is kept
either way, as after a kill: the next pull continues from it once there is room.
"""

from __future__ import annotations

import errno
import re
import shutil
import time
from pathlib import Path
from typing import Any, BinaryIO

_RETRIES = 5  # dropped connections in a row that bring no new bytes before giving up
_NO_ROOM = {errno.ENOSPC: "disk full", errno.EFBIG: "file too large for the file system"}
if hasattr(errno, "EDQUOT"):  # not on Windows
    _NO_ROOM[errno.EDQUOT] = "disk quota exceeded"


class PullError(Exception):
    """A pull that cannot go on; the message is the one line the user sees."""


def human_size(size: int | None) -> str:
    if size is None:
        return "size unknown"
    if size < 1024:
        return f"{size} B"
    value, units = size / 1024, ["KiB", "MiB", "GiB", "TiB"]
    while value >= 1024 and len(units) > 1:
        value, units = value / 1024, units[1:]
    return f"{value:.1f} {units[0]}"


def part_path(path: Path) -> Path:
    return path.with_name(path.name + ".part")


def still_needed(path: Path, size: int | None) -> int:
    """Bytes a download of `path` has yet to write: none when a file of that size is in place
    (checked by its hash later), the rest beyond its part otherwise."""
    if size is None or (path.is_file() and path.stat().st_size == size):
        return 0
    part = part_path(path)
    kept = part.stat().st_size if part.is_file() else 0
    return size - kept if kept <= size else size


def free_space(folder: Path) -> int:
    """Free bytes for `folder`, or for the nearest folder above it that exists."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return shutil.disk_usage(folder).free


def check_space(folder: Path, needed: int) -> None:
    free = free_space(folder)
    if needed > free:
        raise PullError(f"not enough space in {folder}: the download needs {human_size(needed)} more, "
                        f"{human_size(free)} free; make room (or set FIRESIDE_MODELS_DIR to another disk) "
                        "and pull again")


def fetch(url: str, headers: dict[str, str], part: Path, size: int | None, progress: Any = None) -> int:
    """Download `url` into `part` (size: the listed size, None if unknown), continuing from what
    the part holds. Returns how many bytes of the part were kept from before (0: a whole download).
    `progress`: a tqdm class for the bar (default: huggingface_hub's, which HF_HUB_DISABLE_PROGRESS_BARS
    turns off)."""
    from huggingface_hub.utils import tqdm

    part.parent.mkdir(parents=True, exist_ok=True)
    kept = part.stat().st_size if part.is_file() else 0
    if size is not None and kept > size:  # not a part of this file
        part.unlink()
        kept = 0
    bar = (progress or tqdm)(total=size, initial=kept, unit="B", unit_scale=True, unit_divisor=1024,
                             desc=part.name.removesuffix(".part"))
    # Unbuffered: what write() reports written is on disk, so a failed write leaves a part whose
    # size is exactly what the next attempt may continue from.
    with bar, part.open("ab", buffering=0) as sink:
        failures = 0
        while size is None or sink.tell() < size:
            start, error = sink.tell(), None
            try:
                _get(url, headers, sink, part, size, bar)
                if size is None:
                    break
            except Exception as caught:
                if not is_network_error(caught):
                    raise
                error = caught
            failures = 0 if sink.tell() > start else failures + 1
            if failures > _RETRIES:  # what reached the disk stays for the next pull
                if error is not None:
                    raise error
                raise PullError(f"the download of {part.name.removesuffix('.part')} keeps ending early, at "
                                f"{human_size(sink.tell())}; pull again to continue from there")
            if size is None or sink.tell() < size:
                time.sleep(1)
        written = sink.tell()
    if size is not None and written != size:
        part.unlink()
        raise PullError(f"the download of {part.name.removesuffix('.part')} has {written} bytes where the Hub "
                        f"lists {size}; removed it (pull again to retry)")
    return kept


def _get(url: str, headers: dict[str, str], sink: BinaryIO, part: Path, size: int | None, bar: Any) -> None:
    """One request for the rest of the file, appended to `sink`."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session, hf_raise_for_status

    start = sink.tell()
    # identity: Range counts bytes of the body as sent, and these must be the file's own bytes
    wanted = {**headers, "Accept-Encoding": "identity", **({"Range": f"bytes={start}-"} if start else {})}
    with get_session().stream("GET", url, headers=wanted, timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT) as response:
        hf_raise_for_status(response)
        if start and response.status_code == 200:  # Range ignored: the whole file comes again
            sink.seek(0)
            sink.truncate()
            bar.update(-start)
            start = 0
        elif start and _range_start(response.headers.get("Content-Range", "")) != start:
            raise PullError(f"{url} answered bytes {response.headers.get('Content-Range')!r} when asked for "
                            f"bytes {start}-; remove {part} and pull again")
        length = response.headers.get("Content-Length", "")
        check_space(part.parent, int(length) if length.isdigit() else (size - start if size is not None else 0))
        for chunk in response.iter_bytes():
            _write(sink, chunk, part, size)
            bar.update(len(chunk))


def _range_start(content_range: str) -> int | None:
    match = re.match(r"bytes (\d+)-", content_range.strip())
    return int(match.group(1)) if match else None


def _write(sink: BinaryIO, chunk: bytes, part: Path, size: int | None) -> None:
    view = memoryview(chunk)
    try:
        while view:
            view = view[sink.write(view):]  # an unbuffered write may take only part of the chunk
    except OSError as error:
        if error.errno not in _NO_ROOM:
            raise
        have = sink.tell()
        needed = f"{human_size(size - have)} more" if size is not None else "more"
        raise PullError(f"{_NO_ROOM[error.errno]} writing {part.name} in {part.parent} ({needed} needed, "
                        f"{human_size(free_space(part.parent))} free); the {human_size(have)} downloaded so far "
                        "are kept there, and the next pull continues from them") from None


def is_network_error(error: BaseException) -> bool:
    """Connection failures come up as the HTTP client's own exceptions (httpx2 in huggingface_hub
    2.x, httpx in 1.x); matching on the module keeps this file off that undeclared dependency."""
    return type(error).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore", "requests", "urllib3")
