"""SIGTERM and SIGINT while answers stream: the server drains instead of cutting them.

New requests get 503 (in their front door's shape) and `/health` says `draining`; running streams
go on to their end, or, past `--shutdown-grace`, end with an error chunk that says why and a
proper end of the body; then the process exits 0. Each test stops a server of its own.
"""

from __future__ import annotations

import json
import signal
import threading

import httpx
import pytest

from tests.conftest import start_server, stop_server

LONG = {"messages": [{"role": "user", "content": "Count from one to one thousand."}],
        "ignore_eos": True, "temperature": 0, "stream": True}


class Reader(threading.Thread):
    """Reads one SSE stream to its end on a thread: its data lines, and how the body ended."""

    def __init__(self, url: str, body: dict):
        super().__init__(daemon=True)
        self.url, self.body = url, body
        self.lines: list[str] = []
        self.started = threading.Event()
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            with httpx.stream("POST", self.url, json=self.body, timeout=120) as response:
                assert response.status_code == 200
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        self.lines.append(line[6:])
                        self.started.set()
        except Exception as error:  # noqa: BLE001 - the test reads it
            self.error = error
        finally:
            self.started.set()

    def chunks(self) -> list[dict]:
        return [json.loads(line) for line in self.lines if line != "[DONE]"]


def _text(chunks: list[dict]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_running_streams_finish_and_new_requests_get_503(stop: signal.Signals) -> None:
    server = start_server("--shutdown-grace", "120")
    try:
        reader = Reader(f"{server.v1}/chat/completions", {**LONG, "model": server.model, "max_tokens": 160})
        reader.start()
        assert reader.started.wait(60) and reader.error is None
        server.process.send_signal(stop)
        # Still listening: a new request is refused in its own API's shape, /health says why
        refused = httpx.post(f"{server.v1}/chat/completions", timeout=30,
                             json={"model": server.model, "messages": [{"role": "user", "content": "hi"}],
                                   "max_tokens": 4})
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "shutting_down"
        assert "shutting down" in refused.json()["error"]["message"]
        anthropic = httpx.post(f"{server.v1}/messages", timeout=30, json={
            "model": server.model, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
        assert anthropic.status_code == 503
        assert anthropic.json()["type"] == "error"
        health = httpx.get(f"{server.base_url}/health", timeout=30)
        assert (health.status_code, health.json()["status"]) == (503, "draining")
        reader.join(120)
        assert not reader.is_alive() and reader.error is None
        assert reader.lines[-1] == "[DONE]"
        chunks = reader.chunks()
        assert [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices")][-1] == "length"
        assert [c["usage"] for c in chunks if c.get("usage")][-1]["completion_tokens"] == 160
        assert server.process.wait(60) == 0
    finally:
        stop_server(server)


def test_past_the_grace_a_stream_ends_with_a_chunk_that_says_why() -> None:
    server = start_server("--shutdown-grace", "1")
    try:
        reader = Reader(f"{server.v1}/chat/completions", {**LONG, "model": server.model, "max_tokens": 3000})
        reader.start()
        assert reader.started.wait(60) and reader.error is None
        server.process.send_signal(signal.SIGTERM)
        reader.join(120)
        assert not reader.is_alive()
        assert reader.error is None  # the body ended properly, not cut mid-chunk
        last = json.loads(reader.lines[-1]) if reader.lines[-1] != "[DONE]" else json.loads(reader.lines[-2])
        assert last["error"]["code"] == "shutting_down", last
        assert 0 < len(_text(reader.chunks())) and "shutting down" in last["error"]["message"]
        assert server.process.wait(60) == 0
        assert "draining 1 requests" in server.output.wait_closed()
    finally:
        stop_server(server)


def test_an_idle_server_exits_0_at_once() -> None:
    server = start_server()
    try:
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(30) == 0
    finally:
        stop_server(server)
