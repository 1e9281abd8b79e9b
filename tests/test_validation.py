"""Validation (422/400/404), routes, model ids and the OpenAPI document, over real HTTP."""

from __future__ import annotations

import uuid

import pytest

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MESSAGES = [{"role": "user", "content": "hi"}]


def detail(response):
    assert response.status_code == 422, response.text
    [item] = response.json()["detail"]
    assert set(item) == {"loc", "msg", "type"}
    return item


@pytest.mark.parametrize("path", [COMPLETIONS, CHAT])
@pytest.mark.parametrize("body", [b"not json", b"{\"model\": ", b"[1, 2]", b"42", b"\"text\"", b"null", b""])
def test_bodies_that_are_not_json_objects_are_422(http, path, body):
    item = detail(http.post(path, content=body, headers={"content-type": "application/json"}))
    assert item["loc"] == ["body"]


@pytest.mark.parametrize(("path", "extra"), [(COMPLETIONS, {"prompt": "x"}), (CHAT, {"messages": MESSAGES})])
def test_unknown_fields_are_422_naming_the_field(http, server, path, extra):
    item = detail(http.post(path, json={"model": server.model, **extra, "frobnicate": 1}))
    assert item["loc"] == ["body", "frobnicate"] and item["type"] == "extra_forbidden"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", 2.5), ("temperature", -0.1), ("temperature", "hot"), ("top_p", 1.5), ("top_k", 101),
        ("top_k", 1.5), ("min_p", -1), ("typical_p", 2), ("frequency_penalty", 2.1), ("presence_penalty", -3),
        ("repetition_penalty", 2.5), ("n", 0), ("n", 129), ("stream", "yes"), ("echo", 1), ("seed", "1"),
        ("ignore_eos", None), ("context_length_exceeded_behavior", "explode"), ("service_tier", "gold"),
        ("stop", 5), ("stop", ["a", 1]), ("logit_bias", {"1": "x"}), ("metadata", {"a": 1}),
        ("max_tokens", "many"), ("logprobs", "yes"), ("sampling_mask", "all"), ("reasoning_effort", "extreme"),
        ("reasoning_history", "forever"), ("thinking", {"type": "sometimes"}),
        ("response_format", {"type": "yaml"}), ("stream_options", {"include_usage": "no"}),
    ],
)
def test_field_types_enums_and_ranges_are_422(http, server, field, value):
    item = detail(http.post(COMPLETIONS, json={"model": server.model, "prompt": "x", field: value}))
    assert item["loc"][:2] == ["body", field]


def test_nested_paths_are_named(http, server):
    item = detail(http.post(CHAT, json={"model": server.model, "messages": [{"role": "user"}, {"content": "x"}]}))
    assert item["loc"] == ["body", "messages", 1, "role"] and item["type"] == "missing"
    item = detail(http.post(CHAT, json={"model": server.model, "messages": [{"role": "user", "content": [{"type": "text", "txt": "x"}]}]}))
    assert item["loc"] == ["body", "messages", 0, "content", 0, "txt"]
    item = detail(http.post(COMPLETIONS, json={"model": server.model, "prompt": "x", "stream_options": {"bogus": 1}}))
    assert item["loc"] == ["body", "stream_options", "bogus"]


@pytest.mark.parametrize(("path", "missing"), [(COMPLETIONS, "prompt"), (COMPLETIONS, "model"), (CHAT, "model")])
def test_required_fields_are_422(http, server, path, missing):
    body = {"model": server.model, "prompt": "x"} if path == COMPLETIONS else {"model": server.model, "messages": MESSAGES}
    del body[missing]
    item = detail(http.post(path, json=body))
    assert item["loc"] == ["body", missing] and item["type"] == "missing"


OUT_OF_RANGE = [
    ({"logprobs": 6}, "logprobs", "between 0 and 5"),
    ({"logprobs": -1}, "logprobs", "between 0 and 5"),
    ({"logprobs": True, "top_logprobs": 6}, "top_logprobs", "between 0 and 5"),
    ({"top_logprobs": 2}, "top_logprobs", "needs logprobs"),
    ({"logprobs": 2, "sampling_mask": "count"}, "sampling_mask", "logprobs: true"),
    ({"echo_last": -1}, "echo_last", "0 or more"),
    ({"echo": True, "echo_last": 2}, "echo_last", "not both"),
    ({"speculation": "a", "prediction": "b"}, "prediction", "not both"),
    ({"speculation": [10**9]}, "speculation", "outside the vocabulary"),
]


@pytest.mark.parametrize(("fields", "param", "words"), OUT_OF_RANGE)
@pytest.mark.parametrize("path", [COMPLETIONS, CHAT])
def test_output_options_that_contradict_or_exceed_limits_are_400(http, server, path, fields, param, words):
    base = {"model": server.model, "prompt": "x"} if path == COMPLETIONS else {"model": server.model, "messages": MESSAGES}
    response = http.post(path, json={**base, **fields})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and words in error["message"], error


@pytest.mark.parametrize(("fields", "param", "words"), [
    ({"reasoning_history": "preserved"}, "reasoning_history", "prompt as written"),
    ({"reasoning_effort": "low"}, "reasoning_effort", "no reasoning"),
    ({"thinking": {"type": "enabled"}}, "thinking", "no reasoning"),
    ({"images": ["data:image/png;base64,AAAA"]}, "images", "placeholders for 1 images"),
    ({"prompt": "x <image> y", "images": ["data:image/png;base64,AAAA"]}, "images", "does not accept images"),
])
def test_completion_fields_that_cannot_apply_say_why(http, server, fields, param, words):
    response = http.post(COMPLETIONS, json={"model": server.model, "prompt": "x", **fields})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and words in error["message"], error


@pytest.mark.parametrize(("effort", "word"), [("low", "low"), (2048, "2048"), (True, "true")])
def test_reasoning_controls_on_a_model_without_reasoning_are_400(http, server, effort, word):
    response = http.post(CHAT, json={"model": server.model, "messages": MESSAGES, "reasoning_effort": effort})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "reasoning_effort" and word in error["message"] and "no reasoning" in error["message"]


def test_reasoning_off_on_a_model_without_reasoning_is_fine(http, server):
    """Switching reasoning off where there is none changes nothing: the same prompt, the same answer
    (greedy, this machine's), no reasoning in it."""
    body = {"model": server.model, "messages": MESSAGES, "max_tokens": 2, "temperature": 0}
    plain = http.post(CHAT, json=body).json()
    for fields in ({"reasoning_effort": "none"}, {"reasoning_effort": False}, {"thinking": {"type": "disabled"}},
                   {"reasoning_history": "disabled"}):
        response = http.post(CHAT, json={**body, **fields})
        assert response.status_code == 200, (fields, response.text)
        answer = response.json()
        assert answer["choices"][0]["message"] == plain["choices"][0]["message"], fields
        assert "reasoning_content" not in answer["choices"][0]["message"], fields
        assert answer["usage"]["prompt_tokens"] == plain["usage"]["prompt_tokens"], fields


@pytest.mark.parametrize(("fields", "param", "words"), [
    ({"prompt_truncate_len": 0}, "prompt_truncate_len", "1 or more"),
    ({"prompt_token_ids": [1, 2], "messages": None, "safe_tokenization": True}, "safe_tokenization", "no text"),
    ({"prompt_token_ids": [1, 2], "messages": None, "prompt_truncate_len": 10}, "prompt_truncate_len", "evicts"),
    ({"prompt_token_ids": [10**9], "messages": None}, "prompt_token_ids", "outside the vocabulary"),
])
def test_chat_prompt_options_that_cannot_apply_are_400(http, server, fields, param, words):
    body = {"model": server.model, "messages": MESSAGES, **fields}
    response = http.post(CHAT, json={k: v for k, v in body.items() if v is not None})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and words in error["message"], error


def test_prompt_token_ids_with_messages_is_400(http, server):
    response = http.post(CHAT, json={"model": server.model, "messages": MESSAGES, "prompt_token_ids": [1, 2]})
    assert response.status_code == 400
    assert response.json()["error"] == {"message": "give messages or prompt_token_ids, not both",
                                        "type": "invalid_request_error", "param": "messages", "code": None}


def test_informational_fields_are_accepted(http, server):
    """Fields that only inform (or ask for the default) change nothing in the answer."""
    plain = {"model": server.model, "messages": MESSAGES, "max_tokens": 6, "temperature": 0}
    # both prefilled anew: a prompt reused from a slot is decoded in other chunks, whose rounding
    # can change a greedy token
    isolated = str(uuid.uuid4())
    response = http.post(CHAT, json={
        **plain, "user": "u1", "metadata": {"k": "v"},
        "prompt_cache_key": "k", "prompt_cache_isolation_key": isolated, "service_tier": "priority",
        "raw_output": False, "logprobs": False, "response_format": {"type": "text"}, "parallel_tool_calls": True,
        "safe_tokenization": False, "return_token_ids": False,
    })
    assert response.status_code == 200, response.text
    [choice] = response.json()["choices"]
    [expected] = http.post(CHAT, json={**plain, "prompt_cache_isolation_key": str(uuid.uuid4())}).json()["choices"]
    assert choice["message"] == expected["message"] and choice["message"]["content"]
    assert choice["finish_reason"] == expected["finish_reason"] and choice["logprobs"] is None
    assert "raw_output" not in choice and "token_ids" not in choice


def test_unknown_model_is_404_in_openai_shape(http):
    response = http.post(CHAT, json={"model": "no-such-model", "messages": MESSAGES})
    assert response.status_code == 404
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert "no-such-model" in error["message"] and error["code"] == "model_not_found"


def test_fireworks_style_model_ids_resolve(http, server):
    response = http.post(COMPLETIONS, json={"model": f"accounts/fireworks/models/{server.model}", "prompt": "x", "max_tokens": 1})
    assert response.status_code == 200, response.text
    assert response.json()["model"] == f"accounts/fireworks/models/{server.model}"
    assert http.post(COMPLETIONS, json={"model": "accounts/fireworks/models/other", "prompt": "x"}).status_code == 404


def test_inference_prefix_serves_the_same_api(http, server):
    for path in ("/inference/v1/completions", "/v1/completions"):
        response = http.post(path, json={"model": server.model, "prompt": "Hello", "max_tokens": 2})
        assert response.status_code == 200, (path, response.text)
    assert http.get("/inference/v1/models").json() == http.get("/v1/models").json()


def test_models_list_in_openai_shape(http, server):
    body = http.get("/v1/models").json()
    assert body["object"] == "list"
    [card] = body["data"]
    assert card["id"] == server.model and card["object"] == "model" and card["owned_by"]
    assert http.get(f"/v1/models/{server.model}").json()["id"] == server.model
    assert http.get("/v1/models/nothing").status_code == 404


def test_health(http, server):
    body = http.get("/health").json()
    assert body["status"] == "ok"
    assert body["models"][0]["id"] == server.model and body["models"][0]["slots"] == 4


def test_openapi_document_describes_our_api(http):
    document = http.get("/openapi.json").json()
    assert document["openapi"].startswith("3.1")
    for path in ("/v1/completions", "/v1/chat/completions", "/inference/v1/chat/completions"):
        assert "post" in document["paths"][path]
    schema = document["components"]["schemas"]["ChatCompletionRequest"]
    assert schema["additionalProperties"] is False
    assert "temperature" in schema["properties"] and "messages" in schema["properties"]


def test_unknown_route_is_404_in_openai_shape(http):
    response = http.get("/v1/nothing-here")
    assert response.status_code == 404
    assert "error" in response.json()
