"""Shared fixtures: the real `fireside` command serving the real SmolLM2 GGUF on loopback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from backends.registry import default_model_path

FIRESIDE = Path(sys.executable).with_name("fireside")
SPEC_DIR = Path(__file__).resolve().parents[2] / "shared" / "spec"
FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "chat-templates"


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
    port = free_port()
    process = subprocess.Popen(
        [str(FIRESIDE), "serve", "--port", str(port), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"fireside exited with {process.returncode}: {process.stdout.read()}")
        try:
            health = httpx.get(f"{base_url}/health", timeout=2).json()
            return RunningServer(base_url, health["models"][0]["id"], process)
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
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


@pytest.fixture(scope="session")
def server() -> Iterator[RunningServer]:
    """One server for the suite: 4 slots of 1024 tokens keep it quick on two cores."""
    running = start_server("--ctx-size", "1024", "--parallel", "4")
    yield running
    stop_server(running)


@pytest.fixture(scope="session")
def model_path() -> Path:
    return default_model_path()


@pytest.fixture
def http(server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=120) as client:
        yield client


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
