"""`POST /v1/embeddings` over real HTTP: all-MiniLM-L6-v2 (a BERT GGUF made by the tests) checked
against the independent numpy reference, SmolLM2 with last-token pooling, through the OpenAI SDK
(float and base64, which it asks for by default) and plain HTTP."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import pytest

from tests.conftest import KEYED, POOL, TEST_KEY
from tests.embedding_model import minilm_gguf, reference_embedding, reference_tokens

TEXTS = ["A man is playing a guitar.", "Fireside runs GGUF models on the computer you already own."]


@pytest.fixture(scope="module")
def embed_server(model_path):
    return POOL.get("--model", str(minilm_gguf()), "--alias", "minilm", "--model", str(model_path),
                    "--alias", "smol", "--ctx-size", "512", "--parallel", "1")


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
    # the numpy BERT's embedding is the oracle: the cut is its first 64 components, at unit length
    reference = reference_embedding(ids)
    assert len(cut) == 64 and abs(float(np.linalg.norm(cut)) - 1.0) < 1e-5
    assert float(np.dot(cut, reference[:64]) / np.linalg.norm(reference[:64])) >= 0.999
    assert float(np.dot(whole, reference) / np.linalg.norm(whole)) >= 0.999  # token ids in, the same model
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
    ({"input": "x", "return_logits": [1], "dimensions": 3}, 400, "dimensions"),
    ({"input": "x", "raw_output": True}, 400, "raw_output"),
    ({"input": {"q": "x"}}, 400, "prompt_template"),
    ({"input": "x", "prompt_template": "{q}"}, 400, "prompt_template"),
    ({"input": {"q": "x"}, "prompt_template": "{r}"}, 400, "input"),
    ({"input": [{"q": "x"}, "y"], "prompt_template": "{q}"}, 400, "input"),
    ({"input": {"q": "x"}, "prompt_template": "{% if %}"}, 400, "prompt_template"),
    ({"input": {"q": "x"}, "prompt_template": "{{ q.__class__ }}"}, 400, "prompt_template"),
    ({"input": {"q": ""}, "prompt_template": "{q}"}, 400, "prompt_template"),
    ({"input": {"q": "x"}, "prompt_template": "{{ truncate_tokens(q, -1) }}"}, 400, "prompt_template"),
    ({"input": ["a"] * 2049}, 400, "input"),
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


def _vectors(server, **body) -> list[np.ndarray]:
    response = post(server, **body)
    assert response.status_code == 200, response.text
    return [np.array(item["embedding"]) for item in response.json()["data"]]


def test_objects_are_formatted_by_the_prompt_template(embed_server) -> None:
    notes = [{"title": "Guitar", "body": "A man is playing a guitar.", "tags": ["music"]},
             {"title": "Weather", "body": "The weather in Paris is sunny today.", "tags": []}]
    simple = _vectors(embed_server, model="minilm", input=notes, prompt_template="{title}: {body}")
    jinja = _vectors(embed_server, model="minilm", input=notes,
                     prompt_template="{{ title | upper }}: {{ body }}{% for t in tags %} #{{ t }}{% endfor %}")
    texts = _vectors(embed_server, model="minilm", input=["Guitar: A man is playing a guitar.",
                                                           "Weather: The weather in Paris is sunny today.",
                                                           "GUITAR: A man is playing a guitar. #music"])
    assert np.allclose(simple[0], texts[0], atol=1e-5) and np.allclose(simple[1], texts[1], atol=1e-5)
    assert np.allclose(jinja[0], texts[2], atol=1e-5)
    one = _vectors(embed_server, model="minilm", input=notes[0], prompt_template="{title}: {body}")
    assert len(one) == 1 and np.allclose(one[0], texts[0], atol=1e-5)


def test_truncate_tokens_cuts_by_the_model_s_tokens(embed_server) -> None:
    body = "Fireside runs GGUF models on the computer you already own. " * 60  # > 512 tokens
    assert post(embed_server, model="minilm", input={"body": body}, prompt_template="{body}").status_code == 400
    cut = _vectors(embed_server, model="minilm", input={"body": body}, prompt_template="{{ truncate_tokens(body) }}")
    words = _vectors(embed_server, model="minilm", input={"body": body},
                     prompt_template="{{ truncate_tokens(body, 5) }}")
    # fires ##ide runs g ##gu: the first 5 WordPiece tokens
    first_five = _vectors(embed_server, model="minilm", input=["fireside runs ggu"])
    assert len(reference_tokens("fireside runs ggu")) == 7  # [CLS] + 5 + [SEP]
    assert np.allclose(words[0], first_five[0], atol=1e-5)
    assert len(cut[0]) == 384


def test_return_logits_reads_a_generative_model_s_next_token_scores(embed_server) -> None:
    prompt = "The capital of France is"
    logits = _vectors(embed_server, model="smol", input=prompt, return_logits=[])[0]
    assert len(logits) == 49152  # SmolLM2's vocabulary
    completion = httpx.post(f"{embed_server.v1}/completions", timeout=120, json={
        "model": "smol", "prompt": prompt, "max_tokens": 1, "temperature": 0, "logprobs": 2}).json()
    top = sorted(completion["choices"][0]["logprobs"]["top_logprobs"][0].values(), reverse=True)
    best, second = np.sort(logits)[::-1][:2]
    assert abs((best - second) - (top[0] - top[1])) < 0.05  # the same distribution, read two ways
    first, runner_up = (int(i) for i in np.argsort(logits)[::-1][:2])
    picked = _vectors(embed_server, model="smol", input=[prompt, prompt], return_logits=[runner_up, first])
    assert np.allclose(picked[0], [logits[runner_up], logits[first]], atol=0.05)
    probabilities = _vectors(embed_server, model="smol", input=prompt, return_logits=[runner_up, first],
                             normalize=True)[0]
    assert abs(probabilities.sum() - 1) < 1e-5 and probabilities[1] > probabilities[0]
    assert abs(np.log(probabilities[1] / probabilities[0]) - (best - second)) < 0.05
    response = post(embed_server, model="smol", input=prompt, return_logits=[49152])
    assert response.status_code == 400 and response.json()["error"]["param"] == "return_logits"
    assert "49152" in response.json()["error"]["message"]


def test_unknown_model_is_404(embed_server) -> None:
    response = post(embed_server, model="nope", input="x")
    assert response.status_code == 404, response.text
    assert response.json() == {"error": {"message": "The model `nope` does not exist.", "type": "not_found_error",
                                         "param": "model", "code": "model_not_found"}}


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
    from app.settings.config import ConfigError, load_config
    from backends.registry import default_model_path

    config = tmp_path / "config.toml"
    config.write_text(f'[[models]]\nid = "minilm-cls"\nfile = "{minilm_gguf()}"\npooling = "cls"\n\n'
                      f'[[models]]\nid = "minilm"\nfile = "{minilm_gguf()}"\n\n'
                      f'[[models]]\nid = "smol-mean"\nfile = "{default_model_path()}"\npooling = "mean"\n',
                      encoding="utf-8")
    server = POOL.get("--config", str(config), "--ctx-size", "512", "--parallel", "1")
    cls = post(server, model="minilm-cls", input=TEXTS[0]).json()["data"][0]["embedding"]
    mean = post(server, model="minilm", input=TEXTS[0]).json()["data"][0]["embedding"]
    cosine = float(np.dot(cls, mean) / np.linalg.norm(cls) / np.linalg.norm(mean))
    assert 0.2 < cosine < 0.99  # related (one model) but not the same pooling
    reference = reference_embedding(reference_tokens(TEXTS[0]))
    assert float(np.dot(mean, reference) / np.linalg.norm(mean)) >= 0.999  # the entry without pooling: its own
    refused = post(server, model="smol-mean", input=TEXTS[0])
    assert refused.status_code == 400 and "mean pooling needs a model that declares it" in refused.text
    bad = tmp_path / "bad.toml"  # beside the served one, which the server may read again
    bad.write_text(f'[[models]]\nid = "x"\nfile = "{minilm_gguf()}"\npooling = "max"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="pooling is one of mean, cls, last, rank"):
        load_config(bad)


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


def test_the_endpoints_are_in_the_openapi_document_and_behind_the_api_key() -> None:
    server = POOL.get(*KEYED)  # the default model, with a key
    for route, body in (("embeddings", {"model": server.model, "input": "x"}),
                        ("rerank", {"model": server.model, "query": "q", "documents": ["d"]})):
        assert httpx.post(f"{server.v1}/{route}", json=body, timeout=60).status_code == 401
    authorised = httpx.post(f"{server.v1}/embeddings", json={"model": server.model, "input": "x"}, timeout=60,
                            headers={"Authorization": f"Bearer {TEST_KEY}"})
    assert authorised.status_code == 200
    paths = httpx.get(f"{server.base_url}/openapi.json", timeout=30,
                      headers={"Authorization": f"Bearer {TEST_KEY}"}).json()["paths"]
    assert {"/v1/embeddings", "/v1/rerank", "/inference/v1/embeddings", "/inference/v1/rerank"} <= set(paths)
