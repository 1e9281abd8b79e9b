"""Real `fireside serve` processes for the tests, and the pool that shares them.

A server costs a process start, the imports and a model load (2 to 4 s on two cores), so servers
are shared through one pool for the whole test run, keyed by their arguments and environment: the
same flags mean the same server. Each pytest-xdist worker has its own pool, its own ports and its
own data folder. A test that must kill, restart or starve a server starts its own with
`start_server` and says why.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from backends.threads import physical_cores

FIRESIDE = Path(sys.executable).with_name("fireside")


def _worker_index() -> int:
    """This process's pytest-xdist worker number (`gw3` is 3), 0 without xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name[2:]) if name[2:].isdigit() else 0


# Each worker takes its ports from its own block below the kernel's ephemeral range (32768 and up),
# so two workers never race for one port; a random start keeps concurrent test runs apart too.
_PORT_BLOCK = 800
_PORT_BASE = 20000 + (_worker_index() * _PORT_BLOCK) % 12000
_ports = itertools.cycle(range(_PORT_BASE, _PORT_BASE + _PORT_BLOCK))
for _ in range(random.randrange(_PORT_BLOCK)):
    next(_ports)
_port_lock = threading.Lock()


def free_port() -> int:
    """A port of this worker's block that nothing listens on now (the next one each call, so a
    port just closed is not handed out again soon)."""
    with _port_lock:
        for _ in range(_PORT_BLOCK):
            port = next(_ports)
            with socket.socket() as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    raise RuntimeError(f"no free port in {_PORT_BASE}..{_PORT_BASE + _PORT_BLOCK}")


class OutputReader:
    """Reads a process's output on a thread as it comes, so that the pipe never fills (the server
    writes one log line per request) and a test can wait for a line. On a shared server a test
    looks only at the lines after its `mark()`."""

    def __init__(self, process: subprocess.Popen[str]):
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(process.stdout,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()

    def mark(self) -> int:
        """Where the output stands now: pass it as `since` to see only what comes after."""
        with self._changed:
            return len(self.lines)

    def text(self, since: int = 0) -> str:
        with self._changed:
            return "".join(self.lines[since:])

    def wait_closed(self, timeout: float = 15.0) -> str:
        """All of the output, once the process has closed it."""
        self._thread.join(timeout)
        return self.text()

    def wait_for(self, wanted: Callable[[str], bool], timeout: float = 10.0, since: int = 0) -> str | None:
        """The first line after `since` for which `wanted(line)` holds, waiting up to `timeout` s."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = next((line for line in self.lines[since:] if wanted(line)), None)
                left = deadline - time.monotonic()
                if found is not None or left <= 0:
                    return found
                self._changed.wait(left)


@dataclass
class RunningServer:
    base_url: str  # http://127.0.0.1:PORT
    model: str
    process: subprocess.Popen[str]
    output: OutputReader = field(repr=False)  # everything it printed (stdout and stderr)

    @property
    def v1(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def port(self) -> int:
        return int(self.base_url.rsplit(":", 1)[1])

    def health(self) -> dict:
        return httpx.get(f"{self.base_url}/health", timeout=10).json()


def _environment(env: Mapping[str, str | None] | None) -> dict[str, str] | None:
    """This process's environment with `env` over it (None removes a variable)."""
    if not env:
        return None
    merged = {**os.environ, **env}
    return {name: value for name, value in merged.items() if value is not None}


def _cores_per_worker() -> int | None:
    """Under pytest-xdist, each worker's servers get their share of the cores (None: the server's
    own adaptive count). Every worker drives a server at once, so two-thread servers on two cores
    make OpenMP barriers wait on descheduled threads. One thread each ran eight of the costliest
    files 4 to 5 % faster, with as much less CPU, in interleaved pairs of runs (181 and 195 s against
    189 and 202 s)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return max(1, physical_cores() // workers) if workers > 1 else None


def engine_threads() -> int:
    """Threads for an engine or projector a test runs in its own process: the worker's share of
    the cores, as its servers get (2 outside pytest-xdist). Two-thread engines beside the other
    worker's servers, with OpenMP's passive waiting (tests/conftest.py), decoded a token 3-4x
    slower than one-thread ones."""
    return _cores_per_worker() or 2


def start_server(*args: str, env: Mapping[str, str | None] | None = None, timeout: float = 90.0) -> RunningServer:
    """A `fireside serve` process of its own with `args` (and `env` over this process's
    environment, None removing a variable), once its /health answers (killed if it never does). Its prompt caches stay off
    the disk unless `args` say otherwise: servers of other tests must not start with this one's
    cache. Tests that can share a server take it from `POOL` instead."""
    port, started = free_port(), time.monotonic()
    if "--prompt-cache-disk" not in args:
        args = (*args, "--prompt-cache-disk", "0")
    if "--threads" not in args and (share := _cores_per_worker()) is not None:
        args = (*args, "--threads", str(share))
    process = subprocess.Popen(
        [str(FIRESIDE), "serve", "--port", str(port), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=_environment(env),
    )
    output = OutputReader(process)
    try:
        running = _wait_until_serving(process, output, f"http://127.0.0.1:{port}", timeout)
    except BaseException:
        stop_process(process)  # never leave a server behind a failed start
        raise
    if log := os.environ.get("FIRESIDE_TEST_SERVER_LOG"):  # where the suite's server starts go, to count them
        with open(log, "a", encoding="utf-8") as file:
            file.write(f"{time.monotonic() - started:.2f} {os.environ.get('PYTEST_CURRENT_TEST', '')!r} {args!r}\n")
    return running


def _wait_until_serving(process: subprocess.Popen[str], output: OutputReader, base_url: str,
                        timeout: float) -> RunningServer:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"fireside exited with {process.returncode}: {output.wait_closed()}")
        try:
            health = httpx.get(f"{base_url}/health", timeout=2).json()
        except httpx.HTTPError:
            time.sleep(0.1)
            continue
        # the first loaded model ("" when every model loads on first use)
        return RunningServer(base_url, health["models"][0]["id"] if health["models"] else "", process, output)
    raise RuntimeError(f"fireside did not start in time: {output.text()}")


def stop_process(process: subprocess.Popen, timeout: float = 15) -> None:
    """SIGTERM (a graceful shutdown), then SIGKILL if it does not end in time."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def stop_server(server: RunningServer) -> None:
    stop_process(server.process)


class ServerPool:
    """Servers shared by every test of this process, keyed by (arguments, environment). The least
    recently used one is stopped when more than `limit` run, to bound memory (about 300 MiB each
    for the default model)."""

    def __init__(self, limit: int):
        self.limit = limit
        self._servers: OrderedDict[tuple, RunningServer] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, *args: str, env: Mapping[str, str | None] | None = None) -> RunningServer:
        key = (args, tuple(sorted((env or {}).items())))
        with self._lock:
            running = self._servers.pop(key, None)
            if running is None or running.process.poll() is not None:
                while len(self._servers) >= self.limit:
                    _, oldest = self._servers.popitem(last=False)
                    stop_server(oldest)
                running = start_server(*args, env=env)
            self._servers[key] = running
            return running

    def close(self) -> None:
        with self._lock:
            while self._servers:
                stop_server(self._servers.popitem()[1])


POOL = ServerPool(limit=int(os.environ.get("FIRESIDE_TEST_SERVERS", "10")))


# The pooled configurations most tests share (the same flags in the same order are one server).
DEFAULT_ARGS = ("--ctx-size", "1024", "--parallel", "4")  # the `server` fixture: 4 slots of 1024 tokens
TWO_SLOTS = ("--ctx-size", "1024", "--parallel", "2")
ONE_SMALL_SLOT = ("--ctx-size", "256", "--parallel", "1")
TEST_KEY = "fs-Secret-Key-7Q3ZX9KW"
KEYED = (*ONE_SMALL_SLOT, "--api-key", TEST_KEY)  # a key, no CORS, no --log-prompts


def wait_healthy(url: str, process: subprocess.Popen, why_not: Callable[[], str] = lambda: "it exited at start-up",
                 seconds: float = 60.0) -> None:
    """Wait until `url`/health answers 200 (another server than ours: llama-server); fail with
    `why_not()` if the process exits first."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert process.poll() is None, why_not()
        time.sleep(0.1)
    raise AssertionError(f"{url} did not become healthy in {seconds:g} s")
