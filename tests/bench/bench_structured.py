"""Structured-output benchmark: constrained against free decoding, and schema conversion time.

    .venv/bin/python tests/bench/bench_structured.py [--reps 5] [--tokens 200]

On the default model, through one Fireside server, interleaved repetition by repetition:

  - decode tokens/s of one SSE stream (after the first token) on the same prompt: free text, then
    under a JSON Schema whose answers are long (a list of 40 or more records), then in
    `json_object` mode; greedy, `--tokens` tokens at most (a drawn token the grammar rejects
    costs a second, constrained draw: the ratio includes those);
    and the same schema with `uniqueItems` on its list (every token read by the decode-time guard);
  - conversion time per schema (`convert_schema`, as the server converts without `strict`) over
    the test corpus, the real-world corpus and the end-to-end schemas (median, p95, max), and the
    time to refuse hostile schemas.

Target: constrained decode >= 0.9 x free decode, as ratios of medians within the run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from backends.grammar import GrammarCache  # noqa: E402
from backends.llama_model import LlamaModel, ModelOptions  # noqa: E402
from backends.registry import default_model_path  # noqa: E402
from backends.sampling import Candidates  # noqa: E402
from grammars.json_schema import SchemaError, convert_schema, schema_to_gbnf  # noqa: E402
from tests.bench.bench_engine import Server, running  # noqa: E402
from tests.conftest import FIRESIDE, free_port  # noqa: E402
from tests.structured_schemas import SCHEMAS  # noqa: E402

PROMPT = ("<|im_start|>system\nYou answer with JSON only.<|im_end|>\n<|im_start|>user\n"
          "List forty people with their name, age and city.<|im_end|>\n<|im_start|>assistant\n")
PEOPLE = {
    "type": "array", "minItems": 40, "items": {
        "type": "object", "additionalProperties": False, "required": ["name", "age", "city"],
        "properties": {"name": {"type": "string", "maxLength": 40}, "age": {"type": "integer", "minimum": 0,
                                                                            "maximum": 120},
                       "city": {"type": "string", "maxLength": 40}}}}


def decode_rate(server: Server, tokens: int, response_format: dict | None) -> float:
    """Decode tokens/s of one stream after its first token."""
    body = {"model": server.model, "prompt": PROMPT, "max_tokens": tokens, "temperature": 0, "stream": True,
            "ignore_eos": response_format is None, "stream_options": {"include_usage": True}}
    if response_format is not None:
        body["response_format"] = response_format
    first = last = None
    usage = None
    with httpx.Client(timeout=600, trust_env=False) as client:
        with client.stream("POST", server.base_url + "/v1/completions", json=body) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                now = time.perf_counter()
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    usage = chunk["usage"]
                elif chunk["choices"] and chunk["choices"][0]["text"]:
                    first = first or now
                    last = now
    assert usage and first and last and last > first
    return (usage["completion_tokens"] - 1) / (last - first)


def redraw_cost() -> float:
    """Seconds to constrain the whole vocabulary inside a string of the PEOPLE grammar: what a
    rejected draw adds to its step (the model here rarely needs it: its JSON mostly fits)."""
    model = LlamaModel(default_model_path(), ModelOptions())
    grammar = GrammarCache(model.vocab).get(schema_to_gbnf(PEOPLE)).start()
    for token in model.tokenize('[{"name":"Jo', add_special=False, parse_special=False):
        grammar.allows(token)
        grammar.accept(token)
    candidates = Candidates(model.n_vocab)
    logits = np.zeros(model.n_vocab, dtype=np.float32)
    times = []
    for _ in range(20):
        array = candidates.fill(logits)
        start = time.perf_counter()
        grammar.constrain(array)
        times.append(time.perf_counter() - start)
    grammar.close()
    model.close()
    return statistics.median(times)


def conversion_times() -> list[float]:
    corpus = ROOT / "tests" / "schema_corpus"
    paths = [*sorted(corpus.glob("*.json")), *sorted((corpus / "real_world").glob("*.json"))]
    schemas = [case["schema"] for path in paths for case in json.loads(path.read_text())]
    schemas += [schema for _, _, schema in SCHEMAS] + [PEOPLE]
    times = []
    for schema in schemas:
        start = time.perf_counter()
        try:
            convert_schema(schema, strict=False)
        except SchemaError:
            continue
        times.append(time.perf_counter() - start)
    return times


def _nested(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


HOSTILE = {
    "20,000+ nodes": {"type": "object", "properties": {f"p{i}": {"enum": [str(j) for j in range(20)]}
                                                       for i in range(1200)}},
    "nested 70 deep": _nested(70),
    "pattern blow-up": {"type": "string", "pattern": "^(a|aa)*(b|bb)*(c|cc)*[a-z]{1,64}$", "maxLength": 512},
    "anyOf product 8^4": {"allOf": [{"anyOf": [{"properties": {f"k{i}": {"const": j}}} for j in range(8)]}
                                    for i in range(4)]},
    "reference cycle": {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    "200 bounded numbers": {"type": "object", "properties": {
        f"n{i}": {"type": "number", "minimum": -1.123456789, "exclusiveMaximum": 98765.4321} for i in range(200)}},
}


def hostile_times() -> dict[str, tuple[float, str]]:
    """Seconds to convert or refuse each hostile schema (target: refused in under 100 ms)."""
    results = {}
    for name, schema in HOSTILE.items():
        start = time.perf_counter()
        try:
            convert_schema(schema, strict=True)
            outcome = "converted"
        except SchemaError as error:
            outcome = f"refused ({error.keyword})"
        results[name] = (time.perf_counter() - start, outcome)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=200)
    args = parser.parse_args()
    times = conversion_times()
    p95 = sorted(times)[int(0.95 * (len(times) - 1))]
    print(f"convert_schema over {len(times)} schemas: median {1000 * statistics.median(times):.2f} ms, "
          f"p95 {1000 * p95:.2f} ms, max {1000 * max(times):.2f} ms (target p95 < 10 ms)", flush=True)
    for name, (seconds, outcome) in hostile_times().items():
        print(f"  hostile: {name}: {outcome} in {1000 * seconds:.1f} ms (target < 100 ms)", flush=True)
    port = free_port()
    command = [str(FIRESIDE), "serve", "--port", str(port), "--ctx-size", "2048", "--parallel", "1"]
    formats = {"free": None, "schema": {"type": "json_schema", "json_schema": PEOPLE},
               "json_object": {"type": "json_object"},
               "unique": {"type": "json_schema", "json_schema": {**PEOPLE, "uniqueItems": True}}}
    with running(lambda: Server("fireside", command, port)) as server:
        for response_format in formats.values():  # warm: caches, graphs and compiled grammars
            decode_rate(server, 16, response_format)
        rates: dict[str, list[float]] = {name: [] for name in formats}
        for _ in range(args.reps):
            for name, response_format in formats.items():
                rates[name].append(decode_rate(server, args.tokens, response_format))
            print("  " + ", ".join(f"{name} {values[-1]:.1f}" for name, values in rates.items()), flush=True)
    medians = {name: statistics.median(values) for name, values in rates.items()}
    print(f"decode tok/s (median of {args.reps}): " + ", ".join(f"{n} {v:.1f}" for n, v in medians.items()))
    print(f"constrained / free: schema {medians['schema'] / medians['free']:.2f}, "
          f"json_object {medians['json_object'] / medians['free']:.2f}, "
          f"schema with uniqueItems {medians['unique'] / medians['free']:.2f} (target >= 0.9)")
    print(f"one redraw under the grammar (a drawn token rejected): {1000 * redraw_cost():.1f} ms, paid only then")
    return 0


if __name__ == "__main__":
    sys.exit(main())
