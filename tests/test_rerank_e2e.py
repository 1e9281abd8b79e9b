"""`POST /v1/rerank` over real HTTP, LLM-scored as Qwen3-Reranker is (P(yes) against P(no)), on
SmolLM2 and on Gemma 3 with the Gemma template (which refuses a system message: the instruction
goes into the user message). The tiny models rank poorly; what is checked is the contract: every
document scored once, sorted, with its index, `top_n`, `return_documents`, the score being the
model's own P(yes) / (P(yes) + P(no)) as plain completions scoring gives it, and clear errors.
Cross-encoders: MiniLM with a classifier head made by the tests (tests/embedding_model.py), its
scores checked against the independent numpy reference."""

from __future__ import annotations

import json
import math
import uuid

import httpx
import pytest

from tests.conftest import FIXTURES, POOL, TWO_SLOTS
from tests.embedding_model import (
    cross_encoder_gguf,
    reference_class_scores,
    reference_pair_tokens,
)
from tests.test_observability import LOG_PROMPTS, request_line

DOCUMENTS = ["Paris is the capital and largest city of France.", "Bananas are yellow fruit rich in potassium.",
             "The Eiffel Tower stands in Paris, France.", "Berlin is the capital of Germany."]
QUERY = "What is the capital of France?"


@pytest.fixture(scope="module")
def rerank_server(model_path, gemma_path):
    return POOL.get("--model", str(model_path), "--alias", "smol", "--model", str(gemma_path), "--alias",
                    "gemma", "--chat-template", str(FIXTURES / "google-gemma-2-2b-it.jinja"), *TWO_SLOTS)


def rerank(server, **body) -> httpx.Response:
    return httpx.post(f"{server.v1}/rerank", json={"query": QUERY, "documents": DOCUMENTS, **body}, timeout=120)


@pytest.mark.parametrize("model", ["smol", "gemma"])
def test_every_document_is_scored_once_and_sorted(rerank_server, model) -> None:
    response = rerank(rerank_server, model=model)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "list" and body["model"] == model and body["usage"]["prompt_tokens"] > 0
    data = body["data"]
    assert sorted(item["index"] for item in data) == [0, 1, 2, 3]
    scores = [item["relevance_score"] for item in data]
    assert scores == sorted(scores, reverse=True) and all(0.0 < s < 1.0 for s in scores)
    assert all(item["document"] == DOCUMENTS[item["index"]] for item in data)
    # scored again, now from cached prefixes: the same up to float rounding, which the probability
    # ratio amplifies where P(yes) and P(no) are close (a logit off by 0.1 moves it by 0.025)
    again = {item["index"]: item["relevance_score"] for item in rerank(rerank_server, model=model).json()["data"]}
    drift = max(abs(again[item["index"]] - item["relevance_score"]) for item in data)
    assert drift < 0.05, (again, data)


def test_top_n_and_return_documents(rerank_server) -> None:
    full = rerank(rerank_server, model="smol").json()["data"]
    cut = rerank(rerank_server, model="smol", top_n=2, return_documents=False).json()["data"]
    assert len(cut) == 2 and all("document" not in c for c in cut)
    scores = {f["index"]: f["relevance_score"] for f in full}
    assert all(abs(scores[c["index"]] - c["relevance_score"]) < 0.01 for c in cut)
    assert cut[0]["relevance_score"] >= cut[1]["relevance_score"] >= sorted(scores.values())[1] - 0.01


def test_the_score_is_the_model_s_yes_against_no() -> None:
    """The score is P(yes) / (P(yes) + P(no)) at the answer's first position, whatever the judging
    prompt says. The oracle: the prompts the ranking read, as the server's `--log-prompts` line
    shows them (its prompt with each answer), scored again through /v1/completions (echo and
    logprobs): the same model, another path, no prompt text written here."""
    server = POOL.get(*LOG_PROMPTS)  # SmolLM2, its prompts logged (the pooled server of the log tests)
    request_id = f"rerank-oracle-{uuid.uuid4().hex[:12]}"
    mark = server.output.mark()
    response = httpx.post(f"{server.v1}/rerank", json={"model": server.model, "query": QUERY, "documents": DOCUMENTS[:1]},
                          headers={"X-Request-Id": request_id}, timeout=120)
    assert response.status_code == 200, response.text
    body = response.json()
    prompts = json.loads(request_line(server.output, mark, id=request_id)["prompt"])
    assert len(prompts) == 2, prompts  # one document: its prompt followed by each answer
    logprob, stems = {}, set()
    for prompt in prompts:
        scored = httpx.post(f"{server.v1}/completions", json={
            "model": server.model, "prompt": prompt, "max_tokens": 0, "echo": True, "logprobs": 1,
            "return_token_ids": True}, timeout=60).json()["choices"][0]
        assert len(scored["prompt_token_ids"]) == body["usage"]["prompt_tokens"]  # the tokens the ranking read
        answer = scored["logprobs"]["tokens"][-1]
        logprob[answer] = scored["logprobs"]["token_logprobs"][-1]
        stems.add(prompt.removesuffix(answer))
    assert set(logprob) == {"yes", "no"} and len(stems) == 1  # one prompt, each answer after it
    [stem] = stems
    assert QUERY in stem and DOCUMENTS[0] in stem
    # compared as log-odds: the ranking's batch and the completion's evaluate the same tokens in
    # other shapes, so their logits differ by float rounding (0.06 nats measured on two cores)
    score = body["data"][0]["relevance_score"]
    assert abs(math.log(score / (1 - score)) - (logprob["yes"] - logprob["no"])) < 0.2


@pytest.mark.parametrize(("body", "status", "param"), [
    ({"documents": []}, 400, "documents"),
    ({"top_n": 0}, 400, "top_n"),
    ({"model": "nope"}, 404, None),
    ({"colour": "red"}, 422, None),
    ({"documents": "one"}, 422, None),
])
def test_bad_requests_get_clear_errors(rerank_server, body, status, param) -> None:
    response = rerank(rerank_server, **body)
    assert response.status_code == status, response.text
    if status == 400:
        assert response.json()["error"]["param"] == param


def test_without_a_model_the_first_served_model_ranks(rerank_server) -> None:
    response = rerank(rerank_server)
    assert response.status_code == 200 and response.json()["model"] == "smol"


# ---------------------------------------------------------------------------------------- cross-encoders

PAIR_QUERY = "Where is the Eiffel Tower?"


@pytest.fixture(scope="module")
def cross_encoder_server():
    return POOL.get("--model", str(cross_encoder_gguf()), "--alias", "cross",
                    "--model", str(cross_encoder_gguf(("no", "yes"))), "--alias", "cross-yes-no",
                    "--ctx-size", "512", "--parallel", "1")


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def test_a_cross_encoder_scores_each_pair_as_the_reference_does(cross_encoder_server) -> None:
    response = httpx.post(f"{cross_encoder_server.v1}/rerank", timeout=120, json={
        "model": "cross", "query": PAIR_QUERY, "documents": DOCUMENTS, "top_n": 3})
    assert response.status_code == 200, response.text
    body = response.json()
    pairs = [reference_pair_tokens(PAIR_QUERY, document) for document in DOCUMENTS]
    assert body["usage"] == {"prompt_tokens": sum(map(len, pairs)), "total_tokens": sum(map(len, pairs))}
    expected = [_sigmoid(float(reference_class_scores(pair, 1)[0])) for pair in pairs]
    order = sorted(range(len(DOCUMENTS)), key=lambda i: -expected[i])
    assert [item["index"] for item in body["data"]] == order[:3]
    for item in body["data"]:
        assert abs(item["relevance_score"] - expected[item["index"]]) < 2e-3
        assert item["document"] == DOCUMENTS[item["index"]]


def test_a_two_class_cross_encoder_reports_the_probability_of_yes(cross_encoder_server) -> None:
    response = httpx.post(f"{cross_encoder_server.v1}/rerank", timeout=120, json={
        "model": "cross-yes-no", "query": PAIR_QUERY, "documents": DOCUMENTS, "return_documents": False})
    assert response.status_code == 200, response.text
    for item in response.json()["data"]:
        no, yes = reference_class_scores(reference_pair_tokens(PAIR_QUERY, DOCUMENTS[item["index"]]), 2)
        assert abs(item["relevance_score"] - math.exp(yes) / (math.exp(yes) + math.exp(no))) < 2e-3
        assert "document" not in item


def test_a_cross_encoder_gives_its_class_scores_through_return_logits(cross_encoder_server) -> None:
    url = f"{cross_encoder_server.v1}/embeddings"
    pair = reference_pair_tokens(PAIR_QUERY, DOCUMENTS[2])
    refused = httpx.post(url, json={"model": "cross", "input": [pair]}, timeout=120)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "model"
    logits = httpx.post(url, json={"model": "cross-yes-no", "input": [pair], "return_logits": []}, timeout=120)
    assert logits.status_code == 200, logits.text
    assert abs(logits.json()["data"][0]["embedding"] - reference_class_scores(pair, 2)).max() < 2e-3
    outside = httpx.post(url, json={"model": "cross-yes-no", "input": [pair], "return_logits": [2]}, timeout=120)
    assert outside.status_code == 400 and outside.json()["error"]["param"] == "return_logits"


def test_a_cross_encoder_refuses_what_it_cannot_do(cross_encoder_server) -> None:
    url = f"{cross_encoder_server.v1}/rerank"
    task = httpx.post(url, json={"model": "cross", "query": "q", "documents": ["d"], "task": "Judge"}, timeout=120)
    assert task.status_code == 400 and task.json()["error"]["param"] == "task"
    long = httpx.post(url, json={"model": "cross", "query": "q", "documents": ["word " * 600]}, timeout=120)
    assert long.status_code == 400 and long.json()["error"]["param"] == "documents"
    assert "512" in long.json()["error"]["message"]
    chat = httpx.post(f"{cross_encoder_server.v1}/chat/completions", timeout=120, json={
        "model": "cross", "messages": [{"role": "user", "content": "hi"}]})
    assert chat.status_code == 400
    models = {card["id"]: card for card in httpx.get(f"{cross_encoder_server.v1}/models").json()["data"]}
    assert models["cross"]["capabilities"] == ["rerank"]
