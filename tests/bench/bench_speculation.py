"""Predicted outputs (`prediction` / `speculation`) against plain decoding, edit-style.

    .venv/bin/python tests/bench/bench_speculation.py [--reps 5] [--threads 2]

One Fireside server on the default model. The edit-style request: a document shown twice and
the header of a third copy, so that the model writes the document out again; the prediction is
the document with one small change (what an editor sends when it asks for a rewrite). Greedy
decoding, with and without the prediction, interleaved repetition by repetition; the prompt is
cached after the first request, so the server's processing time is the decode time (its first
token included: with a prediction, the first step already checks drafted tokens). Reported per
document: tokens/s of each (median), their ratio, how many predicted tokens the output matched,
and whether both gave the same tokens.

Target: >= 2x decode speed with the prediction.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.bench.bench_engine import Server, running  # noqa: E402
from tests.conftest import FIRESIDE, free_port  # noqa: E402

PROSE = """Fireside runs open models on the computer you already own. It loads a GGUF file, keeps it in memory and \
answers requests from the apps on your desktop over HTTP.
Every request goes through the same steps. The server reads the JSON body, checks every field, turns the messages \
into a prompt with the model's own chat template and hands the tokens to the engine.
The engine keeps several sequences in one context. Each step decodes the next token of every sequence at once, so \
four apps asking at the same time cost little more than one.
When a request ends, its tokens stay in the cache. The next request that starts with the same text skips the work \
that was already done, which makes the second turn of a chat fast.
"""

NOTES = """Meeting notes, Tuesday
- The release moves to Friday because the installer still fails on Windows.
- Ana will fix the installer and send a new build to the testers on Wednesday.
- Ben will write the release notes and ask the designers for two screenshots.
- The team agreed to keep the old settings page for one more version.
- Next meeting: Thursday at ten, in the small room.
"""

RECIPE = """Tomato soup for four
Chop two onions and three cloves of garlic. Warm a spoon of olive oil in a large pot and cook the onions slowly \
until they are soft.
Add the garlic, one kilo of ripe tomatoes cut in quarters, a pinch of salt and half a litre of water.
Let it simmer for twenty minutes, then blend until smooth and season with pepper and a little sugar.
Serve hot with bread and a spoon of cream on top.
"""

# (document, the predicted output: the document with one small change)
DOCUMENTS = {
    "prose": (PROSE, PROSE.replace("four apps", "three apps")),
    "notes": (NOTES, NOTES.replace("Ana will", "Maria will")),
    "recipe": (RECIPE, RECIPE.replace("twenty minutes", "thirty minutes")),
}


def edit_request(model: str, document: str) -> dict:
    prompt = f"# version 1\n{document}\n# version 2\n{document}\n# version 3\n"
    return {"model": model, "prompt": prompt, "max_tokens": 400, "temperature": 0, "stop": ["# version"],
            "return_token_ids": True}


def decode(client: httpx.Client, body: dict) -> tuple[float, list[int], int]:
    """(generated tokens/s over the server's whole processing time, the tokens, predicted tokens
    the output matched). The prompt is cached, so the time is the decode's, first token included
    (with a prediction the first step already checks drafted tokens)."""
    response = client.post("/v1/completions", json={**body, "perf_metrics_in_response": True})
    response.raise_for_status()
    answer = response.json()
    metrics = answer["perf_metrics"]
    tokens = answer["choices"][0]["token_ids"]
    return len(tokens) / metrics["server-processing-time"], tokens, metrics.get("speculation-prompt-matched-tokens", 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", default="2")
    parser.add_argument("--model", metavar="PATH", help="a GGUF file (default: the embedded model)")
    args = parser.parse_args()
    port = free_port()
    command = [str(FIRESIDE), "serve", "--port", str(port), "--threads", args.threads, "--parallel", "1"]
    if args.model:
        command += ["--model", args.model]
    with running(lambda: Server("fireside", command, port)) as server, \
            httpx.Client(base_url=server.base_url, timeout=600, trust_env=False) as client:
        model = client.get("/v1/models").json()["data"][0]["id"]
        print(f"{'document':<8} {'plain tok/s':>12} {'predicted tok/s':>16} {'ratio':>6} {'matched':>10} same")
        for name, (document, predicted) in DOCUMENTS.items():
            body = edit_request(model, document)
            decode(client, body)  # warm: the prompt is cached from here on
            plain_rates, predicted_rates = [], []
            same = True
            for _ in range(args.reps):
                rate, plain_tokens, _ = decode(client, body)
                plain_rates.append(rate)
                rate, tokens, kept = decode(client, {**body, "prediction": {"type": "content", "content": predicted}})
                predicted_rates.append(rate)
                same = same and tokens == plain_tokens
            plain, fast = statistics.median(plain_rates), statistics.median(predicted_rates)
            print(f"{name:<8} {plain:>12.1f} {fast:>16.1f} {fast / plain:>5.2f}x {kept:>4}/{len(tokens):<5} {same}")


if __name__ == "__main__":
    main()
