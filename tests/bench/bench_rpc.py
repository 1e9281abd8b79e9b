"""The cost of llama.cpp's RPC hop on loopback: the default model served locally, then with all
its layers on one `fireside worker`, then split over two, in one run.

    .venv/bin/python tests/bench/bench_rpc.py [--tokens 128] [--reps 3] [--threads 1] [--json FILE]

Every process gets `--threads` CPU threads (1 by default, so that a worker and the server do not
fight over the two cores of a small machine). Reported per setup: one stream's decode tokens/s
(whole answers, prompt and round trip cancelled out, the median over `--reps`), 4 streams'
aggregate tokens/s, and the hop's cost per token against local: 1000/rate - 1000/local_rate, in ms.
On loopback this is the protocol's own cost (a graph sent and a result read back per step); a real
network adds its round trip per step and per device.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench.bench_engine import Server, aggregate, one_request, warm_up
from tests.conftest import FIRESIDE, free_port, stop_process


@contextlib.contextmanager
def workers(count: int, threads: int) -> Iterator[list[str]]:
    processes, endpoints = [], []
    try:
        for _ in range(count):
            port = free_port()
            process = subprocess.Popen([str(FIRESIDE), "worker", "--port", str(port), "--threads", str(threads)],
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            processes.append(process)
            for line in process.stdout:  # its banner ends with the transport line
                if "transport" in line:
                    break
            endpoints.append(f"127.0.0.1:{port}")
        yield endpoints
    finally:
        for process in processes:
            stop_process(process, timeout=5)


def serve(args: argparse.Namespace, endpoints: list[str]) -> Server:
    port = free_port()
    command = [str(FIRESIDE), "serve", "--port", str(port), "--threads", str(args.threads), "--parallel", "4",
               "--ctx-size", "512", "--prompt-cache-disk", "0", "--draft", "off"]
    if endpoints:
        command += ["--rpc", ",".join(endpoints)]
    return Server(f"fireside on {len(endpoints)} workers" if endpoints else "fireside local", command, port)


def measure(args: argparse.Namespace, workers_count: int) -> dict[str, float]:
    with workers(workers_count, args.threads) as endpoints:
        server = serve(args, endpoints)
        try:
            warm_up(server, 4)
            single = statistics.median(one_request(server, args.tokens) for _ in range(args.reps))
            four = statistics.median(aggregate(server, 4, args.tokens) for _ in range(args.reps))
        finally:
            server.stop()
    return {"single_tps": single, "aggregate4_tps": four}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    results = {name: measure(args, count) for name, count in (("local", 0), ("one worker", 1), ("two workers", 2))}
    local = results["local"]
    for name, result in results.items():
        hop = 1000 / result["single_tps"] - 1000 / local["single_tps"]
        result["hop_ms_per_token"] = hop
        print(f"{name:12s} one stream {result['single_tps']:6.1f} tok/s ({result['single_tps'] / local['single_tps']:.2f}x), "
              f"4 streams {result['aggregate4_tps']:6.1f} tok/s ({result['aggregate4_tps'] / local['aggregate4_tps']:.2f}x), "
              f"hop {hop:+.2f} ms/token")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
