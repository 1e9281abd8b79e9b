"""A warm start: time to first token of the first request after a restart, with a long shared
system prompt, against the same request on a cold start (no saved prompt cache).

    .venv/bin/python tests/bench/bench_warm_start.py --reps 3

Each repetition uses a fresh data folder: start the server (cold), ask, stop it (the slots'
caches are saved), start it again (they are restored), ask a different question after the same
system prompt. Both times are the server's own `fireworks-server-time-to-first-token`; the report
gives the medians and warm / cold (the target is at most 0.3).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.bench.bench_engine import Server, running
from tests.conftest import FIRESIDE, free_port

SYSTEM = " ".join(f"Rule {i}: when the user asks about topic {i}, answer in one short, polite sentence."
                  for i in range(60))


def ttft(server: Server, question: str) -> tuple[float, int, int]:
    body = {"model": server.model, "temperature": 0, "max_tokens": 4,
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]}
    response = httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=300)
    response.raise_for_status()
    usage = response.json()["usage"]
    return (float(response.headers["fireworks-server-time-to-first-token"]), usage["prompt_tokens"],
            usage["prompt_tokens_details"]["cached_tokens"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", default="2")
    args = parser.parse_args(argv)
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    cold, warm = [], []
    for rep in range(args.reps):
        with tempfile.TemporaryDirectory() as data:
            def serve() -> Server:
                port = free_port()
                return Server("fireside", [str(FIRESIDE), "serve", "--port", str(port), "--ctx-size", "2048",
                                           "--parallel", "2", "--threads", args.threads], port,
                              env={"FIRESIDE_DATA_DIR": data})

            with running(serve) as server:
                seconds, prompt, cached = ttft(server, f"What about topic {rep}?")
                assert cached == 0, "a fresh data folder must start cold"
                cold.append(seconds)
            with running(serve) as server:
                seconds, prompt, cached = ttft(server, f"And topic {rep + 30}?")
                warm.append(seconds)
        print(f"rep {rep}: cold {cold[-1]:.3f} s, warm {warm[-1]:.3f} s ({cached} of {prompt} prompt tokens cached)")
    cold_s, warm_s = statistics.median(cold), statistics.median(warm)
    print(f"\ntime to first token, median of {args.reps}: cold {cold_s:.3f} s, after a restart {warm_s:.3f} s, "
          f"warm / cold {warm_s / cold_s:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
