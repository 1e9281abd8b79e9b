"""A/B of two Fireside installs on bench_engine's (b) and (c): did a change cost speed?

    git worktree add /tmp/fireside-base <commit> && python3 -m venv /tmp/fireside-base/.venv \
        && /tmp/fireside-base/.venv/bin/pip install -e "/tmp/fireside-base[default-model]"
    .venv/bin/python tests/bench/bench_ab.py --baseline /tmp/fireside-base/.venv/bin/fireside

Both servers run side by side on the same model and settings and are measured in turns,
repetition by repetition, each going first every other turn (the machine's drifting speed hits
both alike): (b) one whole-answer request and one SSE stream, (c) aggregate tokens/s at 1, 4 and
8 concurrent streams. The report
gives each figure for both and the ratio this tree / baseline; a ratio near 1.00 is within noise
(repeat runs on these shared machines differ by a few per cent, and an A/A run of one install
against itself has shown single figures 5-10 % apart). For a tighter figure, take more turns of
fewer measures: `--only one,c8 --reps 15`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from backends.threads import physical_cores  # noqa: E402
from tests.bench.bench_engine import (  # noqa: E402
    Server,
    aggregate,
    one_request,
    running,
    single_stream,
    warm_up,
)
from tests.conftest import FIRESIDE, free_port  # noqa: E402


def serve(name: str, binary: Path, args: argparse.Namespace) -> Server:
    port = free_port()
    command = [str(binary), "serve", "--port", str(port), "--ctx-size", str(args.ctx_size), "--parallel", "8",
               "--threads", str(args.threads)]
    return Server(name, command, port)


MEASURES: dict[str, Callable[[Server, int], float]] = {
    "(b) one request": one_request,
    "(b) SSE stream": lambda server, tokens: single_stream(server, tokens)[1],
    "(c) 1 streams": lambda server, tokens: aggregate(server, 1, tokens),
    "(c) 4 streams": lambda server, tokens: aggregate(server, 4, tokens),
    "(c) 8 streams": lambda server, tokens: aggregate(server, 8, tokens),
}
SHORT_NAMES = {"one": "(b) one request", "sse": "(b) SSE stream", "c1": "(c) 1 streams", "c4": "(c) 4 streams",
               "c8": "(c) 8 streams"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, help="the other install's `fireside` command")
    parser.add_argument("--threads", type=int, default=physical_cores())
    parser.add_argument("--ctx-size", type=int, default=1024)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--only", default=",".join(SHORT_NAMES),
                        help="the measures to take, comma-separated: " + ", ".join(SHORT_NAMES) + " (more turns of fewer "
                             "measures in the same time)")
    args = parser.parse_args(argv)
    wanted = [SHORT_NAMES[name.strip()] for name in args.only.split(",") if name.strip()]
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    samples: dict[str, dict[str, list[float]]] = {"this": {}, "baseline": {}}
    with contextlib.ExitStack() as stack:
        servers = {"this": stack.enter_context(running(lambda: serve("this tree", FIRESIDE, args))),
                   "baseline": stack.enter_context(running(lambda: serve("baseline", args.baseline, args)))}
        for server in servers.values():
            warm_up(server)
        for rep in range(args.reps):
            order = list(servers.items())
            for side, server in order if rep % 2 == 0 else order[::-1]:  # neither always goes first
                for name in wanted:
                    samples[side].setdefault(name, []).append(MEASURES[name](server, args.tokens))
    print(f"{args.threads} threads, {args.tokens} tokens per stream, medians of {args.reps} turns (tokens/s)")
    print("\n| measure | this tree | baseline | ratio |")
    print("| --- | --- | --- | --- |")
    for name in samples["this"]:
        this, base = statistics.median(samples["this"][name]), statistics.median(samples["baseline"][name])
        print(f"| {name} | {this:.1f} | {base:.1f} | {this / base:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
