"""One model split over machines with llama.cpp's RPC backend, on loopback: `fireside worker`
processes (a CPU device each) and `fireside serve --rpc` using them. Real workers, a real server,
the real SmolLM2 GGUF; the network is loopback, the protocol and the failure paths are the real ones.
The refusals that need no worker run in this process (tests/cli_runner.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import pytest

from app.settings.config import ConfigError, load_config
from backends import rpc
from tests.cli_runner import run_cli
from tests.conftest import (
    FIRESIDE,
    POOL,
    TWO_SLOTS,
    OutputReader,
    RunningServer,
    free_port,
    start_server,
    stop_process,
    stop_server,
)

if not rpc.supported():
    pytest.fail("this llama-cpp-python has no RPC backend: install it with the README's test command "
                "(CMAKE_ARGS=\"-DGGML_RPC=ON\")", pytrace=False)

# iproute2, for the private-address test's network namespace (often outside a user's PATH)
IP = shutil.which("ip") or next((p for p in ("/usr/sbin/ip", "/sbin/ip") if os.path.exists(p)), None)
PROMPTS = [
    "Write a short poem about a lighthouse.",
    "List three uses of copper.",
]


@dataclass
class Worker:
    port: int
    process: subprocess.Popen[str]
    output: OutputReader

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def connected(self) -> bool:
        """Whether a client holds its connection now (it serves one at a time)."""
        return self.output.text().rstrip().endswith("Accepted client connection")


def start_worker(port: int | None = None, *args: str, host: str = "127.0.0.1", netns: str | None = None) -> Worker:
    """A real `fireside worker` process: it serves until stopped, then ends with `os._exit`. With
    `netns`, it runs in that network namespace (`ip netns exec`, which becomes the worker)."""
    port = port or free_port()
    command = [str(FIRESIDE), "worker", "--host", host, "--port", str(port), "--threads", "1", *args]
    if netns is not None:
        command = [IP, "netns", "exec", netns, *command]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    worker = Worker(port, process, OutputReader(process))
    try:
        wait_listening(rpc.Endpoint(host, port), process)
    except BaseException:
        stop_process(process)
        raise
    return worker


def wait_listening(endpoint: rpc.Endpoint, process: subprocess.Popen[str], timeout: float = 60) -> None:
    """Until the worker answers the RPC handshake (it prints its banner before it listens)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            rpc.hello(endpoint, timeout=5)
            return
        except rpc.WorkerUnreachable:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the worker on {endpoint} did not start") from None
            time.sleep(0.1)


@contextmanager
def workers(count: int) -> Iterator[list[Worker]]:
    started = [start_worker() for _ in range(count)]
    try:
        yield started
    finally:
        for worker in started:
            stop_process(worker.process, timeout=5)


def greedy_chat(server: RunningServer, prompt: str, max_tokens: int = 48) -> dict:
    response = httpx.post(f"{server.v1}/chat/completions", timeout=120, json={
        "model": server.model, "messages": [{"role": "user", "content": prompt}], "temperature": 0, "max_tokens": max_tokens,
        "return_token_ids": True, "logprobs": True})
    assert response.status_code == 200, response.text
    return response.json()


def token_ids(answer: dict) -> list[int]:
    return [entry["token_id"] for entry in answer["choices"][0]["logprobs"]["content"]]


@pytest.fixture(scope="module")
def two_workers() -> Iterator[list[Worker]]:
    with workers(2) as started:
        yield started


@pytest.fixture(scope="module")
def split_server(two_workers: list[Worker]) -> Iterator[tuple[RunningServer, OutputReader]]:
    """Its own: its workers live only as long as this module."""
    server = start_server("--rpc", ",".join(w.endpoint for w in two_workers), "--tensor-split", "1,1", *TWO_SLOTS)
    yield server, server.output
    stop_server(server)


@pytest.fixture(scope="module")
def local_server() -> RunningServer:
    return POOL.get(*TWO_SLOTS)  # the same flags as split_server, without the workers


def test_a_model_split_over_two_workers_answers_token_for_token_as_served_locally(
        split_server, local_server: RunningServer, two_workers: list[Worker]):
    split_server, _ = split_server
    for prompt in PROMPTS:
        split, local = greedy_chat(split_server, prompt), greedy_chat(local_server, prompt)
        assert token_ids(split) == token_ids(local) and len(token_ids(local)) > 10
        assert split["choices"][0]["message"]["content"] == local["choices"][0]["message"]["content"]
    # both workers hold layers: the server keeps a connection to each (one it did not use it would close)
    assert all(worker.connected() for worker in two_workers), [w.output.text() for w in two_workers]


def test_streams_and_concurrent_requests_on_the_workers_match_local(split_server, local_server: RunningServer):
    split_server, _ = split_server

    def streamed(server: RunningServer, prompt: str) -> str:
        text = []
        with httpx.stream("POST", f"{server.v1}/completions", timeout=120, json={
                "model": server.model, "prompt": prompt, "temperature": 0, "max_tokens": 32, "stream": True}) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    text.extend(choice["text"] for choice in json.loads(line[6:])["choices"])  # none in the usage chunk
        return "".join(text)

    openings = ["The old lighthouse keeper", "Copper is a metal that"]
    with ThreadPoolExecutor(2) as pool:  # two slots decoding in one batch on the workers
        split = list(pool.map(lambda p: streamed(split_server, p), openings))
    assert split == [streamed(local_server, p) for p in openings]
    assert all(split)


def test_the_start_line_says_where_the_layers_are(split_server, two_workers: list[Worker]):
    _, output = split_server
    line = output.wait_for(lambda text: text.startswith("serving "))
    assert line is not None and f"layers on RPC workers {two_workers[0].endpoint}, {two_workers[1].endpoint}" in line


def test_a_worker_that_is_not_there_at_start_up_is_one_line():
    port = free_port()
    result = run_cli("serve", "--port", str(free_port()), "--rpc", f"127.0.0.1:{port}", "--prompt-cache-disk", "0")
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert f"RPC worker 127.0.0.1:{port} is not reachable" in lines[0] and "fireside worker" in lines[0]


def test_a_worker_that_dies_mid_request_fails_it_with_503_and_the_model_comes_back_with_it(
        local_server: RunningServer):
    worker = start_worker()
    server = start_server("--rpc", worker.endpoint, *TWO_SLOTS)  # its own: its worker is killed
    try:
        expected = token_ids(greedy_chat(local_server, PROMPTS[0]))
        assert token_ids(greedy_chat(server, PROMPTS[0])) == expected

        long_answer = {"model": server.model, "messages": [{"role": "user", "content": "Name every bird."}],
                       "max_tokens": 400, "ignore_eos": True, "temperature": 0}
        with ThreadPoolExecutor(1) as pool:  # a whole answer decoding beside the stream
            whole = pool.submit(httpx.post, f"{server.v1}/chat/completions", json=long_answer, timeout=120)
            events = stream_until_killed(server, worker)
            cut_off = whole.result()
        assert cut_off.status_code == 503, cut_off.text
        assert f"RPC worker {worker.endpoint} went away" in cut_off.json()["error"]["message"]
        errors = [event["error"] for event in events if "error" in event]
        assert len(errors) == 1, events[-3:]
        assert f"RPC worker {worker.endpoint} went away" in errors[0]["message"]
        assert len(events) < 300  # ended by the failure, not run to its length

        # while it is gone: a clear 503 naming it, and the server itself lives on
        gone = httpx.post(f"{server.v1}/chat/completions", timeout=60, json={
            "model": server.model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
        assert gone.status_code == 503, gone.text
        assert f"RPC worker {worker.endpoint}" in gone.json()["error"]["message"]
        assert "not reachable" in gone.json()["error"]["message"]
        assert server.process.poll() is None

        back = start_worker(worker.port)  # the same worker again, on the same port
        try:
            assert token_ids(greedy_chat(server, PROMPTS[0])) == expected
        finally:
            stop_process(back.process, timeout=5)
    finally:
        stop_process(worker.process, timeout=5)
        stop_server(server)
    assert server.process.returncode == 0  # a clean exit, the abandoned model left alone


def stream_until_killed(server: RunningServer, worker: Worker) -> list[dict]:
    """A long streamed answer's chunks; the worker is killed after the fifth."""
    events: list[dict] = []
    with httpx.stream("POST", f"{server.v1}/chat/completions", timeout=120, json={
            "model": server.model, "messages": [{"role": "user", "content": "Count to a thousand."}],
            "max_tokens": 400, "ignore_eos": True, "temperature": 0, "stream": True}) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: {"):
                events.append(json.loads(line[6:]))
                if len(events) == 5:
                    worker.process.send_signal(signal.SIGKILL)
    return events


def test_the_worker_listens_on_loopback_and_refuses_a_public_address_without_insecure():
    for host in ("8.8.8.8", "0.0.0.0"):
        result = run_cli("worker", "--host", host, "--port", str(free_port()))
        assert result.returncode == 2, result
        assert f"refusing to listen on {host}" in result.stderr and "no authentication" in result.stderr
        assert "--insecure" in result.stderr and "SSH tunnel" in result.stderr
        assert result.stderr.startswith("fireside: ") and len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize(("host", "reach"), [
    ("127.0.0.1", "loopback"), ("localhost", "loopback"), ("192.168.1.20", "private"), ("10.0.0.5", "private"),
    ("100.100.1.2", "private"), ("fd00::1", "private"), ("0.0.0.0", "public"), ("8.8.8.8", "public"),
    ("2001:4860:4860::8888", "public"),
])
def test_how_far_a_worker_address_reaches(host: str, reach: str):
    assert rpc.exposure(host) == reach


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([IP, *args], capture_output=True, text=True, timeout=30, check=False)


def _free_subnet() -> str:
    """A 10.77.N /24 that no route of this machine covers but the default one (N from this
    process's id, so that concurrent runs take different ones)."""
    start = os.getpid() % 200
    for n in (20 + (start + i) % 230 for i in range(230)):
        routes = _ip("-4", "route", "show", "to", "match", f"10.77.{n}.2").stdout.splitlines()
        if all(line.startswith("default") for line in routes):
            return f"10.77.{n}"
    raise RuntimeError("no free 10.77.N.0/24 subnet on this machine")


@contextmanager
def private_network() -> Iterator[tuple[str, str]]:
    """A network namespace of its own whose one interface has a private IPv4 address: (namespace,
    address). A veth pair joins it to this namespace (`.1` here, `.2` there), so the worker there
    answers this process; nothing leaves the machine. Removed afterwards, even on failure. Skips
    where namespaces cannot be made (not root, no iproute2), saying why."""
    if IP is None:
        pytest.skip("no iproute2 `ip` here: the test makes a network namespace with it")
    if os.geteuid() != 0:
        pytest.skip("not root: making a network namespace (ip netns add) needs root")
    pid = os.getpid()
    namespace, here, there = f"fireside-test-{pid}", f"fsh{pid}", f"fsn{pid}"
    made = _ip("netns", "add", namespace)
    if made.returncode != 0:
        pytest.skip(f"this machine cannot make a network namespace: ip netns add: {made.stderr.strip()}")
    try:
        subnet = _free_subnet()
        steps = [("link", "add", here, "type", "veth", "peer", "name", there),
                 ("link", "set", there, "netns", namespace),
                 ("addr", "add", f"{subnet}.1/24", "dev", here),
                 ("link", "set", here, "up"),
                 ("netns", "exec", namespace, IP, "addr", "add", f"{subnet}.2/24", "dev", there),
                 ("netns", "exec", namespace, IP, "link", "set", there, "up"),
                 ("netns", "exec", namespace, IP, "link", "set", "lo", "up")]
        for step in steps:
            done = _ip(*step)
            assert done.returncode == 0, f"ip {' '.join(step)}: {done.stderr}"
        yield namespace, f"{subnet}.2"
    finally:
        _ip("link", "del", here)  # both ends of the pair (absent if it was never made)
        _ip("netns", "del", namespace)


def test_a_worker_on_a_private_address_warns_and_names_the_risk():
    with private_network() as (namespace, address):
        assert rpc.exposure(address) == "private"
        worker = start_worker(None, host=address, netns=namespace)
        try:
            rpc.hello(rpc.Endpoint(address, worker.port), timeout=5)  # it listens there, reached from here
            warning = worker.output.wait_for(lambda line: line.startswith("fireside: warning:"))
            assert warning is not None and f"{address}:{worker.port}" in warning
            assert "no authentication" in warning and "SSH tunnel" in warning
        finally:
            stop_process(worker.process, timeout=5)


def test_a_worker_on_loopback_does_not_warn_and_keeps_its_cache_where_told(tmp_path):
    worker = start_worker(None, "--insecure", "--cache", str(tmp_path / "rpc-cache"))
    try:
        assert "warning" not in worker.output.text()
        assert f"fireside worker on {worker.endpoint}" in worker.output.text()
        assert f"local cache    : {tmp_path / 'rpc-cache'}" in worker.output.text()
        assert (tmp_path / "rpc-cache").is_dir()
    finally:
        stop_process(worker.process, timeout=5)


def test_doctor_says_the_build_has_rpc_and_lists_a_workers_devices_with_their_memory():
    # Real `fireside doctor` processes: the smoke test of the command, and a connection to the
    # worker that this process must not hold (ggml-rpc keeps it for the life of the process).
    with workers(1) as (worker,):
        result = subprocess.run([str(FIRESIDE), "doctor", "--json", "--rpc", worker.endpoint],
                                capture_output=True, text=True, timeout=120, check=True)
        text = subprocess.run([str(FIRESIDE), "doctor", "--rpc", worker.endpoint],
                              capture_output=True, text=True, timeout=120, check=True).stdout
    report = json.loads(result.stdout)
    assert report["rpc"] is True and "RPC" in report["backends"]
    (found,) = report["rpc_workers"]
    assert found["endpoint"] == worker.endpoint and found["reachable"] and found["used_by"] == ["--rpc"]
    assert found["protocol"].startswith(f"{rpc.PROTOCOL_MAJOR}.")
    (device,) = found["devices"]
    assert device["type"] == "GPU"  # how ggml-rpc presents every remote device
    assert 0 < device["free_bytes"] <= device["total_bytes"]
    assert device["description"] == worker.endpoint
    assert f"RPC worker {worker.endpoint} (for --rpc): protocol" in text


def test_doctor_reports_a_worker_that_does_not_answer():
    port = free_port()
    result = run_cli("doctor", "--json", "--rpc", f"127.0.0.1:{port}")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    (found,) = report["rpc_workers"]
    assert not found["reachable"] and "not reachable" in found["error"] and found["devices"] == []


@pytest.mark.parametrize(("lines", "complaint"), [
    ('rpc = ["host"]', None),
    ('rpc = "a:1,b:2"', None),
    ('rpc = ["a:1", "a:1"]', "listed twice"),
    ('rpc = ["a:99999"]', "port must be a number"),
    ('rpc = ["[::1]:50052"]', "IPv6"),
    ("rpc = 5", "list of"),
    ("tensor_split = [3, 1]", None),
    ('tensor_split = ["x"]', "proportions"),
    ("tensor_split = [0, 0]", "not all 0"),
])
def test_the_configs_rpc_and_tensor_split_keys(tmp_path, lines: str, complaint: str | None):
    path = tmp_path / "config.toml"
    path.write_text(f'[[models]]\nid = "m"\nfile = "/m.gguf"\n{lines}\n')
    if complaint is None:
        entry = load_config(path).models[0]
        assert entry.rpc or entry.tensor_split
        return
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert "config.toml:4: models[0]." in str(raised.value) and complaint in str(raised.value)


def test_a_configured_model_on_a_missing_worker_gets_503_naming_it(tmp_path):
    from backends.registry import default_model_path

    port = free_port()
    config = tmp_path / "config.toml"
    config.write_text(f'[[models]]\nid = "far"\nfile = "{default_model_path()}"\nrpc = ["127.0.0.1:{port}"]\n')
    server = start_server("--config", str(config))
    try:
        response = httpx.post(f"{server.v1}/chat/completions", timeout=60, json={
            "model": "far", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
        assert response.status_code == 503
        assert f"RPC worker 127.0.0.1:{port} is not reachable" in response.json()["error"]["message"]
    finally:
        stop_server(server)
