"""llama-server's native API on a real `fireside serve` (the default SmolLM2 model): tokens and
texts checked against the OpenAI door on the same server (one engine, one tokenizer: the oracle),
answers and stream events in llama-server's shapes, refusals naming their field. The same checks
against llama-server itself are in test_llamacpp_side_by_side.py."""

from __future__ import annotations

import json

import httpx
import pytest

from backends.registry import default_model_path
from tests.built import built
from tests.embedding_model import cross_encoder_gguf
from tests.fixtures.make_cut_draft import make_fim_cut
from tests.servers import POOL, RunningServer

PROMPT = "The capital of France is"


def _post(server: RunningServer, path: str, body: dict, **kwargs) -> httpx.Response:
    return httpx.post(f"{server.base_url}{path}", json=body, timeout=120, **kwargs)


def _error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text[:300]
    error = response.json()["error"]
    assert error["code"] == status and error["type"] == ("invalid_request_error" if status == 400 else
                                                        "not_found_error")
    return error["message"]


def test_tokenize_and_detokenize_round_trip_with_pieces_mixed_ids_and_special_tokens(server):
    text = "Hello world<|im_start|>é"
    plain = _post(server, "/tokenize", {"content": text}).json()["tokens"]
    with_pieces = _post(server, "/tokenize", {"content": text, "with_pieces": True}).json()["tokens"]
    assert [entry["id"] for entry in with_pieces] == plain and all(isinstance(t, int) for t in plain)
    assert "<|im_start|>" in [entry["piece"] for entry in with_pieces]  # parse_special: one token
    assert _post(server, "/detokenize", {"tokens": plain}).json() == {"content": text}
    as_text = _post(server, "/tokenize", {"content": text, "parse_special": False}).json()["tokens"]
    assert len(as_text) > len(plain)  # the marker read as plain text
    # text and ids mixed, as llama-server's tokenize_mixed reads them
    mixed = _post(server, "/tokenize", {"content": ["Hello", plain[1], "<|im_start|>"]}).json()["tokens"]
    assert mixed == plain[:3]
    message = _error(_post(server, "/detokenize", {"tokens": [1, 10**9]}), 400)
    assert "tokens[1]" in message and str(10**9) in message


def test_apply_template_renders_what_a_chat_answer_reads(server):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    prompt = _post(server, "/apply-template", {"messages": messages}).json()["prompt"]
    assert "Be brief." in prompt and "Hi there" in prompt
    chat = _post(server, "/v1/chat/completions", {"model": server.model, "messages": messages, "max_tokens": 1})
    tokens = _post(server, "/tokenize", {"content": prompt, "add_special": True}).json()["tokens"]
    assert len(tokens) == chat.json()["usage"]["prompt_tokens"]


def test_greedy_completion_matches_the_openai_door_with_its_fields_and_probabilities(server):
    body = _post(server, "/completion", {"prompt": PROMPT, "n_predict": 6, "temperature": 0, "n_probs": 2,
                                         "return_tokens": True}).json()
    oracle = _post(server, "/v1/completions", {"model": server.model, "prompt": PROMPT, "max_tokens": 6,
                                               "temperature": 0}).json()["choices"][0]
    assert body["content"] == oracle["text"]
    assert body["stop"] is True and body["stop_type"] in ("limit", "eos") and body["model"] == server.model
    assert len(body["tokens"]) == body["tokens_predicted"] == len(body["completion_probabilities"])
    prompt_tokens = _post(server, "/tokenize", {"content": PROMPT, "add_special": True}).json()["tokens"]
    assert body["tokens_evaluated"] == len(prompt_tokens) and body["prompt"] == PROMPT
    first = body["completion_probabilities"][0]
    assert first["id"] == body["tokens"][0] and len(first["top_logprobs"]) == 2
    assert first["top_logprobs"][0]["id"] == first["id"]  # greedy: the chosen token is the most likely
    assert bytes(first["bytes"]).decode() == first["token"]
    timings = body["timings"]
    assert timings["predicted_n"] == body["tokens_predicted"] and timings["prompt_ms"] > 0
    assert timings["prompt_n"] + timings["cache_n"] == body["tokens_evaluated"]
    assert body["generation_settings"]["n_predict"] == 6 and body["generation_settings"]["n_ctx"] > 0


def test_a_stream_sends_each_token_then_the_final_event_without_a_done_marker(server):
    whole = _post(server, "/completion", {"prompt": PROMPT, "n_predict": 5, "temperature": 0}).json()
    with httpx.stream("POST", f"{server.base_url}/completion", timeout=120,
                      json={"prompt": PROMPT, "n_predict": 5, "temperature": 0, "stream": True,
                            "timings_per_token": True}) as response:
        raw = response.read().decode()
    assert "[DONE]" not in raw
    events = [json.loads(line[len("data: "):]) for line in raw.splitlines() if line.startswith("data: ")]
    tokens, last = events[:-1], events[-1]
    assert all(event["stop"] is False and len(event["tokens"]) == 1 and "timings" in event for event in tokens)
    assert [event["tokens_predicted"] for event in tokens] == list(range(1, len(tokens) + 1))
    assert "".join(event["content"] for event in tokens) == whole["content"]
    assert last["stop"] is True and last["content"] == "" and last["tokens_predicted"] == len(tokens)
    assert last["timings"]["predicted_n"] == len(tokens)


def test_grammar_json_schema_stop_words_and_response_fields(server):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    body = _post(server, "/completion", {"prompt": "JSON:", "n_predict": 24, "temperature": 0,
                                         "json_schema": schema}).json()
    assert isinstance(json.loads(body["content"])["n"], int)
    stopped = _post(server, "/completion", {"prompt": PROMPT, "n_predict": 8, "temperature": 0,
                                            "grammar": 'root ::= " Paris" "."', "stop": ["."],
                                            "response_fields": ["content", "stop_type", "generation_settings/stop"]})
    assert stopped.json() == {"content": " Paris", "stop_type": "word", "stop": ["."]}


@pytest.mark.parametrize(("field", "value"), [("dry_multiplier", 0.8), ("xtc_probability", 0.5), ("mirostat", 1),
                                               ("id_slot", 2), ("post_sampling_probs", True), ("lora", [{"id": 0}])])
def test_fields_that_cannot_be_honoured_are_refused_by_name(server, field, value):
    message = _error(_post(server, "/completion", {"prompt": "Hi", "n_predict": 1, field: value}), 400)
    assert field in message


def test_refusals_of_meaning_and_schema_in_llama_servers_shape(server):
    assert "samplers" in _error(_post(server, "/completion", {"prompt": "Hi", "samplers": ["temperature", "top_k"]}),
                                400)
    assert "repeat_last_n" in _error(_post(server, "/completion", {"prompt": "Hi", "repeat_penalty": 1.1}), 400)
    assert "bogus" in _error(_post(server, "/completion", {"prompt": "Hi", "bogus": 1}), 400)
    assert "content" in _error(_post(server, "/tokenize", {}), 400)
    assert "ghost" in _error(_post(server, "/tokenize", {"content": "x", "model": "ghost"}), 404)


def test_props_describe_the_model_and_the_completion_defaults(server):
    props = httpx.get(f"{server.base_url}/props", timeout=60).json()
    params = props["default_generation_settings"]["params"]
    assert params["temperature"] == 0.8 and params["top_k"] == 40 and params["n_predict"] == -1
    assert props["total_slots"] == 4 and props["default_generation_settings"]["n_ctx"] > 0
    assert "im_start" in props["chat_template"] and props["model_path"].endswith(".gguf")
    document = httpx.get(f"{server.base_url}/openapi.json", timeout=60).json()
    assert {"/completion", "/infill", "/tokenize", "/detokenize", "/apply-template", "/embedding", "/reranking", "/slots", "/props",
            "/v1/tokenize", "/v1/detokenize"} <= set(document["paths"])


def test_vllm_tokenize_reads_a_prompt_or_the_chat_as_answered_and_detokenizes(server):
    url = f"{server.base_url}/v1"
    prompt = httpx.post(f"{url}/tokenize", json={"prompt": PROMPT, "return_token_strs": True}, timeout=60).json()
    native = _post(server, "/tokenize", {"content": PROMPT, "add_special": True}).json()["tokens"]
    assert prompt["tokens"] == native and prompt["count"] == len(native) and prompt["max_model_len"] > 0
    assert "".join(prompt["token_strs"]) == PROMPT
    assert httpx.post(f"{url}/detokenize", json={"tokens": native}, timeout=60).json() == {"prompt": PROMPT}
    messages = [{"role": "user", "content": "Hi there"}]
    chat = httpx.post(f"{url}/tokenize", json={"model": server.model, "messages": messages}, timeout=60).json()
    answered = _post(server, "/v1/chat/completions", {"model": server.model, "messages": messages, "max_tokens": 1})
    assert chat["count"] == answered.json()["usage"]["prompt_tokens"] and chat["token_strs"] is None
    refused = httpx.post(f"{url}/tokenize", json={"messages": messages, "continue_final_message": True}, timeout=60)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "continue_final_message"


def test_chat_and_completions_carry_timings_only_when_asked(server):
    body = {"model": server.model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    plain = _post(server, "/v1/chat/completions", body).json()
    timed = _post(server, "/v1/chat/completions", {**body, "timings_per_token": True}).json()
    assert "timings" not in plain
    assert timed["timings"]["predicted_n"] == timed["usage"]["completion_tokens"]
    assert timed["timings"]["prompt_n"] + timed["timings"]["cache_n"] == timed["usage"]["prompt_tokens"]
    with httpx.stream("POST", f"{server.v1}/completions", timeout=120,
                      json={"model": server.model, "prompt": PROMPT, "max_tokens": 2, "stream": True,
                            "timings_per_token": True}) as response:
        chunks = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    assert [chunk["timings"]["predicted_n"] for chunk in chunks if "timings" in chunk] == [2]


def test_infill_names_the_missing_fim_tokens_of_a_model_without_them(server):
    # SmolLM2's vocabulary has no FIM tokens (no model of the suite's fixtures has them)
    message = _error(_post(server, "/infill", {"input_prefix": "def f():\n    return ", "input_suffix": "\n",
                                               "n_predict": 4}), 400)
    assert "FIM_PRE" in message and "fill-in-the-middle" in message
    assert "input_prefix" in _error(_post(server, "/infill", {"n_predict": 4}), 400)


def test_embedding_normalises_as_asked_and_slots_show_no_prompt(server):
    vectors = _post(server, "/embedding", {"content": [PROMPT, "Hello"]}).json()
    assert [entry["index"] for entry in vectors] == [0, 1] and all(len(entry["embedding"]) == 1 for entry in vectors)
    assert abs(sum(x * x for x in vectors[0]["embedding"][0]) - 1) < 1e-4  # Euclidean by default
    taxicab = _post(server, "/embedding", {"content": PROMPT, "embd_normalize": 1}).json()[0]["embedding"][0]
    assert abs(sum(abs(x) for x in taxicab) - 1) < 1e-4
    ids = _post(server, "/tokenize", {"content": PROMPT, "add_special": True}).json()["tokens"]
    by_ids = _post(server, "/embedding", {"content": ids}).json()[0]["embedding"][0]
    assert max(abs(a - b) for a, b in zip(by_ids, vectors[0]["embedding"][0], strict=True)) < 1e-4
    _post(server, "/completion", {"prompt": "A secret prompt", "n_predict": 1})
    slots = httpx.get(f"{server.base_url}/slots", timeout=60).json()
    assert [slot["id"] for slot in slots] == [0, 1, 2, 3] and all(slot["prompt"] == "" for slot in slots)
    assert any(slot["n_tokens_cached"] > 0 for slot in slots) and "secret" not in json.dumps(slots)


def test_reranking_ranks_as_v1_rerank_in_jinas_shape():
    server = POOL.get("--model", str(cross_encoder_gguf()), "--alias", "cross",  # test_rerank_e2e's, shared
                      "--model", str(cross_encoder_gguf(("no", "yes"))), "--alias", "cross-yes-no",
                      "--ctx-size", "512", "--parallel", "1")
    documents = ["Paris is in France.", "Bananas are yellow.", "The Eiffel Tower is in Paris."]
    body = {"query": "Where is the Eiffel Tower?", "documents": documents, "top_n": 2}
    ranked = _post(server, "/reranking", {**body, "model": "cross"}).json()
    oracle = httpx.post(f"{server.v1}/rerank", json={**body, "model": "cross"}, timeout=60).json()["data"]
    assert ranked["object"] == "list" and ranked["model"] == "cross" and ranked["usage"]["prompt_tokens"] > 0
    assert [(r["index"], round(r["relevance_score"], 6)) for r in ranked["results"]] == \
        [(r["index"], round(r["relevance_score"], 6)) for r in oracle]
    assert _post(server, "/rerank", {**body, "model": "cross", "top_n": 0}).status_code == 400  # llama-server fails on top_n < 0


def test_reranking_needs_a_reranker(server):
    assert "not a reranker" in _error(_post(server, "/reranking", {"query": "q", "documents": ["d"]}), 400)


def test_infill_builds_the_repository_level_fim_prompt():
    fim = built("smollm2-fim", make_fim_cut, default_model_path()) / "smollm2-fim.gguf"
    server = POOL.get("--model", str(fim), "--alias", "fim", "--ctx-size", "512", "--parallel", "1")
    body = {"input_prefix": "def add(a, b):\n    return ", "input_suffix": "\n\nprint(add(1, 2))\n",
            "input_extra": [{"filename": "util.py", "text": "import os\n"}], "prompt": "a",
            "n_predict": 2, "temperature": 0, "return_tokens": True}
    answer = _post(server, "/infill", body).json()
    # llama-server's format_prompt_infill: repository, files, then <FIM_PRE>prefix prompt<FIM_SUF>suffix<FIM_MID>
    assert answer["prompt"] == ("<repo_name>myproject\n<file_sep>util.py\nimport os\n<file_sep>filename\n"
                                "<gh_stars>def add(a, b):\n    return a<issue_start>\n\nprint(add(1, 2))\n"
                                "<issue_comment>")
    assert answer["tokens_predicted"] == len(answer["tokens"]) == 2
