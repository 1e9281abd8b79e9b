"""`POST /v1/embeddings` over real HTTP: all-MiniLM-L6-v2 (a BERT GGUF made by the tests) checked
against the independent numpy reference, SmolLM2 with last-token pooling, through the OpenAI SDK
(float and base64, which it asks for by default) and plain HTTP."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import pytest

from tests.conftest import start_server, stop_server
from tests.embedding_model import minilm_gguf, reference_embedding, reference_tokens

TEXTS = ["A man is playing a guitar.", "Fireside runs GGUF models on the computer you already own."]


@pytest.fixture(scope="module")
def embed_server(model_path):
    server = start_server("--model", str(minilm_gguf()), "--alias", "minilm", "--model", str(model_path),
                          "--alias", "smol", "--ctx-size", "512", "--parallel", "1")
    yield server
    stop_server(server)


def post(server, **body) -> httpx.Response:
    return httpx.post(f"{server.v1}/embeddings", json=body, timeout=120)


def test_openai_sdk_float_and_base64_match_the_reference(embed_server) -> None:
    import openai

    with openai.OpenAI(base_url=embed_server.v1, api_key="unused", max_retries=0) as client:
        default = client.embeddings.create(model="minilm", input=TEXTS)  # the SDK asks for base64
        floats = client.embeddings.create(model="minilm", input=TEXTS, encoding_format="float")
    assert [d.index for d in default.data] == [0, 1]
    assert default.usage.prompt_tokens == sum(len(reference_tokens(t)) for t in TEXTS)
    for text, a, b in zip(TEXTS, default.data, floats.data, strict=True):
        assert len(a.embedding) == 384 and np.allclose(a.embedding, b.embedding, atol=1e-6)
        vector = np.array(b.embedding)
        assert float(vector @ reference_embedding(reference_tokens(text)) / np.linalg.norm(vector)) >= 0.999


def test_normalize_dimensions_and_token_inputs(embed_server) -> None:
    ids = reference_tokens(TEXTS[0])
    whole = post(embed_server, model="minilm", input=ids).json()["data"][0]["embedding"]
    cut = post(embed_server, model="minilm", input=[ids], dimensions=64, normalize=True).json()["data"][0]["embedding"]
    assert len(cut) == 64 and abs(float(np.linalg.norm(cut)) - 1.0) < 1e-5
    expected = np.array(whole[:64]) / np.linalg.norm(whole[:64])
    assert np.allclose(cut, expected, atol=1e-5)
    raw = post(embed_server, model="minilm", input=TEXTS[0], encoding_format="base64").json()["data"][0]["embedding"]
    assert np.allclose(np.frombuffer(base64.b64decode(raw), dtype=np.float32), whole, atol=1e-6)


def test_a_generative_model_embeds_by_its_last_token(embed_server) -> None:
    response = post(embed_server, model="smol", input=TEXTS, normalize=True, perf_metrics_in_response=True)
    assert response.status_code == 200, response.text
    body = response.json()
    assert [len(d["embedding"]) for d in body["data"]] == [576, 576]
    assert body["perf_metrics"]["prompt-tokens"] == body["usage"]["prompt_tokens"] > 0
    assert response.headers["fireworks-prompt-tokens"] == str(body["usage"]["prompt_tokens"])
    a, b = (np.array(d["embedding"]) for d in body["data"])
    assert float(a @ b) < 0.999


@pytest.mark.parametrize(("body", "status", "param"), [
    ({"input": ""}, 400, "input"),
    ({"input": []}, 400, "input"),
    ({"input": [1, "a"]}, 422, None),
    ({"input": "x", "dimensions": 0}, 400, "dimensions"),
    ({"input": "x", "dimensions": 999}, 400, "dimensions"),
    ({"input": "x", "return_logits": [1]}, 400, "return_logits"),
    ({"input": "x", "fanout_size": 2}, 400, "fanout_size"),
    ({"input": {"q": "x"}, "prompt_template": "{q}"}, 400, "prompt_template"),
    ({"input": [[101] * 600]}, 400, "input"),
    ({"input": [[10 ** 9]]}, 400, "input"),
    ({"input": "x", "encoding_format": "int8"}, 422, None),
    ({"input": "x", "colour": "red"}, 422, None),
])
def test_bad_requests_get_clear_errors(embed_server, body, status, param) -> None:
    response = post(embed_server, model="minilm", **body)
    assert response.status_code == status, response.text
    if status == 400:
        assert response.json()["error"]["param"] == param
    else:
        assert response.json()["detail"]


def test_unknown_model_is_404(embed_server) -> None:
    assert post(embed_server, model="nope", input="x").status_code == 404


def test_langchain_openai_embeddings(embed_server) -> None:
    from langchain_openai import OpenAIEmbeddings

    # check_embedding_ctx_length=False: LangChain otherwise sends OpenAI's own (tiktoken) token ids,
    # which mean nothing to another model's vocabulary; local servers are used this way
    embedder = OpenAIEmbeddings(model="minilm", base_url=embed_server.v1, api_key="unused",
                                check_embedding_ctx_length=False)
    documents = embedder.embed_documents(TEXTS)
    query = embedder.embed_query(TEXTS[0])
    assert len(documents) == 2 and np.allclose(documents[0], query, atol=1e-6)
    reference = reference_embedding(reference_tokens(TEXTS[1]))
    assert float(np.array(documents[1]) @ reference / np.linalg.norm(documents[1])) >= 0.999


@pytest.mark.parametrize("route", ["completions", "chat/completions"])
def test_an_embedding_model_does_not_generate(embed_server, route) -> None:
    body = {"model": "minilm", "max_tokens": 3, "prompt": "hello", "messages": [{"role": "user", "content": "hi"}]}
    body.pop("messages" if route == "completions" else "prompt")
    response = httpx.post(f"{embed_server.v1}/{route}", json=body, timeout=60)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "minilm is an embedding model (mean pooling): it does not generate text; use /v1/embeddings")


def test_models_say_what_each_model_serves(embed_server) -> None:
    post(embed_server, model="smol", input="load it")  # models load on first use
    cards = {card["id"]: card for card in httpx.get(f"{embed_server.v1}/models", timeout=30).json()["data"]}
    assert cards["minilm"]["capabilities"] == ["embedding"]
    assert cards["smol"]["capabilities"] == ["completion", "chat", "embedding", "rerank"]


def test_an_embedding_model_does_not_rank(embed_server) -> None:
    response = httpx.post(f"{embed_server.v1}/rerank", json={"model": "minilm", "query": "q", "documents": ["d"]},
                          timeout=60)
    assert response.status_code == 400 and response.json()["error"]["param"] == "model"
    assert "minilm is an embedding model (mean pooling)" in response.json()["error"]["message"]


def test_pooling_is_set_per_model_in_the_config(tmp_path) -> None:
    """`pooling = "cls"` makes the BERT model pool by its [CLS] position: a vector other than its
    own mean pooling; a generative model cannot pool by the mean and says so; a pooling the config
    cannot name is refused when the config is read."""
    from app.config import ConfigError, load_config
    from backends.registry import default_model_path

    config = tmp_path / "config.toml"
    config.write_text(f'[[models]]\nid = "minilm-cls"\nfile = "{minilm_gguf()}"\npooling = "cls"\n\n'
                      f'[[models]]\nid = "minilm"\nfile = "{minilm_gguf()}"\n\n'
                      f'[[models]]\nid = "smol-mean"\nfile = "{default_model_path()}"\npooling = "mean"\n',
                      encoding="utf-8")
    server = start_server("--config", str(config), "--ctx-size", "512", "--parallel", "1")
    try:
        cls = post(server, model="minilm-cls", input=TEXTS[0]).json()["data"][0]["embedding"]
        mean = post(server, model="minilm", input=TEXTS[0]).json()["data"][0]["embedding"]
        cosine = float(np.dot(cls, mean) / np.linalg.norm(cls) / np.linalg.norm(mean))
        assert 0.2 < cosine < 0.99  # related (one model) but not the same pooling
        reference = reference_embedding(reference_tokens(TEXTS[0]))
        assert float(np.dot(mean, reference) / np.linalg.norm(mean)) >= 0.999  # the entry without pooling: its own
        refused = post(server, model="smol-mean", input=TEXTS[0])
        assert refused.status_code == 400 and "mean pooling needs a model that declares it" in refused.text
    finally:
        stop_server(server)
    config.write_text(f'[[models]]\nid = "x"\nfile = "{minilm_gguf()}"\npooling = "max"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="pooling is one of mean, cls, last, rank"):
        load_config(config)


HOSTILE = [
    b"not json", b"[]", b"null", b'{"model": "minilm"}', b'{"model": "minilm", "input": null}',
    b'{"model": "minilm", "input": [[[1]]]}', b'{"model": "minilm", "input": [true, false]}',
    b'{"model": "minilm", "input": [-1]}', b'{"model": "minilm", "input": "x", "dimensions": -5}',
    b'{"model": "minilm", "input": "x", "normalize": "yes"}', b'{"model": 5, "input": "x"}',
    b'{"model": "minilm", "input": "\\u0000\\ud83d"}', b'{"model": "minilm", "input": [' + b'"a",' * 300 + b'"b"]}',
]
HOSTILE_RERANK = [
    b"{}", b'{"query": 1, "documents": ["a"]}', b'{"query": "q", "documents": [null]}',
    b'{"query": "q", "documents": ["a"], "top_n": 99999}', b'{"query": "q", "documents": ["a"], "top_n": -1}',
    b'{"query": "", "documents": [""], "task": ""}', b'{"query": "q", "documents": ["a"], "model": "minilm"}',
]


@pytest.mark.parametrize(("route", "body"), [("embeddings", b) for b in HOSTILE] + [("rerank", b) for b in HOSTILE_RERANK])
def test_hostile_bodies_never_get_a_server_error(embed_server, route, body) -> None:
    response = httpx.post(f"{embed_server.base_url}/inference/v1/{route}", content=body,
                          headers={"content-type": "application/json"}, timeout=120)
    assert response.status_code < 500, response.text
    assert response.status_code in (200, 400, 404, 422)


def test_the_endpoints_are_in_the_openapi_document_and_behind_the_api_key(model_path) -> None:
    server = start_server("--model", str(minilm_gguf()), "--alias", "minilm", "--api-key", "sk-local-test-key-1234",
                          "--ctx-size", "512", "--parallel", "1")
    try:
        for route, body in (("embeddings", {"model": "minilm", "input": "x"}),
                            ("rerank", {"model": "minilm", "query": "q", "documents": ["d"]})):
            assert httpx.post(f"{server.v1}/{route}", json=body, timeout=60).status_code == 401
        authorised = httpx.post(f"{server.v1}/embeddings", json={"model": "minilm", "input": "x"}, timeout=60,
                                headers={"Authorization": "Bearer sk-local-test-key-1234"})
        assert authorised.status_code == 200
        paths = httpx.get(f"{server.base_url}/openapi.json", timeout=30,
                          headers={"Authorization": "Bearer sk-local-test-key-1234"}).json()["paths"]
        assert {"/v1/embeddings", "/v1/rerank", "/inference/v1/embeddings", "/inference/v1/rerank"} <= set(paths)
    finally:
        stop_server(server)
