"""`fireside pull` when things go wrong midway, run as the real command against tests/test_pull.py's
stand-in for the Hugging Face Hub on loopback: killed while it downloads, a server that ignores
Range, bytes left by an earlier pull that are not the file's, a disk too small for the file, and a
write that fails for want of room. The download lives in `<file>.part` until its hash checks out;
a part is kept for the next pull to continue from, never put under the final name nor registered.

The pull that is killed and the one under a file size limit are real `fireside pull` processes (the
command's smoke tests too); the pulls that follow them, and the refusals, run in this process
(tests/cli_runner.py)."""

from __future__ import annotations

import hashlib
import importlib
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Self

import pytest
from huggingface_hub import constants as hf_constants

from tests.cli_runner import CliResult, run_cli
from tests.conftest import FIRESIDE
from tests.test_pull import FakeHub, HubFile, HubHandler, gguf_bytes

REPO, NAME = "acme/Faults-GGUF", "faults-Q4_0.gguf"
DATA = gguf_bytes("faults", 1 << 20)
STALL = 300_000  # bytes the first download gets before the stand-in stops sending


@dataclass
class StallingHub(FakeHub):
    stall_at: dict[str, int] = field(default_factory=dict)  # file -> bytes sent before its first GET hangs
    ignore_range: bool = False  # answer 200 with the whole file, as some servers and proxies do
    release: threading.Event = field(default_factory=threading.Event)  # ends the hanging responses


class StallingHandler(HubHandler):
    hub: StallingHub

    def _send_file(self, method: str, file: HubFile, name: str, etag: str | None = None) -> None:
        if self.hub.ignore_range and "Range" in self.headers:
            del self.headers["Range"]  # still in hub.requests: the client did ask for it
        stall = self.hub.stall_at.pop(name, None) if method == "GET" else None
        if stall is None:
            return super()._send_file(method, file, name, etag)
        self.send_response(200)
        self.send_header("Content-Length", str(len(file.data)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        self.wfile.write(file.data[:stall])
        self.wfile.flush()
        self.hub.release.wait(timeout=300)


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        pass  # a client that dies midway breaks the pipe: expected here


class ListedAs(bytes):
    """File bytes the stand-in lists (and announces) at another size: the listing's `size` and the
    HEAD's X-Linked-Size read len(data). How a file bigger than the disk's free space looks."""

    size: int

    def __new__(cls, data: bytes, size: int) -> Self:
        made = super().__new__(cls, data)
        made.size = size
        return made

    def __len__(self) -> int:
        return self.size


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[StallingHub]:
    """The stand-in on a free port, and the environment `fireside pull` runs in: every folder
    under tmp_path, huggingface_hub pointed at the stand-in, no progress bars."""
    fake = StallingHub()
    server = QuietServer(("127.0.0.1", 0), type("Handler", (StallingHandler,), {"hub": fake}))
    fake.port = server.server_address[1]
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    for name, value in {
        "HF_ENDPOINT": fake.url, "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_OFFLINE": "0", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "FIRESIDE_MODELS_DIR": str(tmp_path / "models"), "FIRESIDE_CONFIG_DIR": str(tmp_path / "config"),
    }.items():
        monkeypatch.setenv(name, value)
    # The stalled GET must still be waiting when the test kills the pull, however slow the machine
    # (it would time out and continue by itself otherwise).
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "600")
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_CACHE", "HTTP_PROXY",
                 "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    importlib.reload(hf_constants)  # huggingface_hub reads its environment at import: for the pulls in this process
    try:
        yield fake
    finally:
        fake.release.set()
        server.shutdown()
        server.server_close()
        monkeypatch.undo()
        importlib.reload(hf_constants)


def final_path(tmp_path: Path) -> Path:
    return tmp_path / "models" / REPO / NAME


def part_path(tmp_path: Path) -> Path:
    return final_path(tmp_path).with_name(NAME + ".part")


def pull(preexec_fn: Callable[[], None] | None = None) -> subprocess.CompletedProcess[str]:
    """A real `fireside pull` process: for what changes the process itself (`preexec_fn`)."""
    return subprocess.run([str(FIRESIDE), "pull", REPO], check=False, capture_output=True, text=True, timeout=180,
                          preexec_fn=preexec_fn)


def pull_here() -> CliResult:
    """`fireside pull` in this process."""
    return run_cli("pull", REPO)


def registered(tmp_path: Path) -> str:
    config = tmp_path / "config" / "config.toml"
    return config.read_text() if config.exists() else ""


def downloads(hub: StallingHub) -> list[dict[str, str]]:
    return hub.seen("GET", rf"^/cdn/{REPO}/{NAME}$")


def one_line_error(result: CliResult | subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("fireside: "), result.stderr
    return lines[-1]


def assert_pulled_whole(tmp_path: Path, result: CliResult | subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert hashlib.sha256(final_path(tmp_path).read_bytes()).hexdigest() == hashlib.sha256(DATA).hexdigest()
    assert not part_path(tmp_path).exists()
    assert f'file = "{REPO}/{NAME}"' in registered(tmp_path)


def kill_midway(tmp_path: Path) -> None:
    """Start a pull, SIGKILL it once the part holds the STALL bytes the stand-in sent (a real
    process: it is killed)."""
    part = part_path(tmp_path)
    process = subprocess.Popen([str(FIRESIDE), "pull", REPO], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    try:
        deadline = time.monotonic() + 120  # against a hang only
        while process.poll() is None and time.monotonic() < deadline:
            if part.is_file() and part.stat().st_size >= STALL:
                break
            time.sleep(0.05)
    finally:
        process.kill()
        output = process.communicate()[0]
    assert process.returncode == -signal.SIGKILL, f"the pull ended before it was killed: {output}"
    assert part.is_file() and part.stat().st_size == STALL, output


@pytest.mark.parametrize("ignore_range", [False, True], ids=["range", "range-ignored"])
def test_a_pull_killed_midway_continues_from_its_part(hub, tmp_path, ignore_range):
    hub.add(REPO, {NAME: HubFile(DATA)})
    hub.stall_at[NAME] = STALL
    kill_midway(tmp_path)
    assert not final_path(tmp_path).exists() and registered(tmp_path) == ""
    hub.release.set()
    hub.ignore_range = ignore_range
    assert_pulled_whole(tmp_path, pull_here())
    # It asked for the rest; a server that ignored that sent the whole file, which replaced the part.
    assert [get.get("range") for get in downloads(hub)] == [None, f"bytes={STALL}-"]


def test_a_part_that_is_not_the_files_fails_its_hash_and_the_pull_starts_over(hub, tmp_path):
    hub.add(REPO, {NAME: HubFile(DATA)})
    part = part_path(tmp_path)
    part.parent.mkdir(parents=True)
    part.write_bytes(gguf_bytes("an older version of the file", STALL))  # the repo changed it since
    assert_pulled_whole(tmp_path, pull_here())
    assert [get.get("range") for get in downloads(hub)] == [f"bytes={STALL}-", None]


def test_a_file_bigger_than_the_free_space_is_refused_before_downloading(hub, tmp_path):
    hub.add(REPO, {NAME: HubFile(ListedAs(DATA, 1 << 60))})  # 1 EiB: more than any disk here
    line = one_line_error(pull_here())
    folder = final_path(tmp_path).parent
    assert f"not enough space in {folder}: the download needs 1048576.0 TiB more" in line and " free" in line
    assert downloads(hub) == [] and not part_path(tmp_path).exists()
    assert not final_path(tmp_path).exists() and registered(tmp_path) == ""


LIMIT = 256 * 1024


def file_size_limit() -> None:
    """In the child: files may not grow past LIMIT bytes, so the write that crosses it fails with
    EFBIG (SIGXFSZ ignored, as Python ignores it anyway). This stands in for a full disk (ENOSPC),
    which no unprivileged test can arrange: both are a write refused for want of room."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def test_a_write_refused_for_want_of_room_is_one_line_and_the_part_is_kept_for_the_next_pull(hub, tmp_path):
    hub.add(REPO, {NAME: HubFile(DATA)})
    line = one_line_error(pull(preexec_fn=file_size_limit))
    folder = final_path(tmp_path).parent
    assert f"writing {NAME}.part in {folder} (768.0 KiB more needed, " in line and " free)" in line
    assert "kept" in line and "next pull continues" in line
    assert part_path(tmp_path).stat().st_size == LIMIT  # all that could be written, nothing torn
    assert not final_path(tmp_path).exists() and registered(tmp_path) == ""
    assert_pulled_whole(tmp_path, pull_here())  # room again: it continues where the write failed
    assert [get.get("range") for get in downloads(hub)] == [None, f"bytes={LIMIT}-"]
