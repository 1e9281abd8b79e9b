"""TGI's API (`/generate`, `/generate_stream`, `POST /`) on the real SmolLM2, with
`huggingface_hub.InferenceClient` as the client, and plain HTTP for the exact shapes."""

from __future__ import annotations

import json
import math

import httpx
import pytest
from huggingface_hub import InferenceClient

# The opening of a story, cut mid-sentence: no greedy continuation ends within the 8 tokens the
# tests ask for (a short answer, " Paris.", may end after 3 on some CPU), so every answer here is cut
# at its max_new_tokens ("length") on any machine.
PROMPT = "Once upon a time, in a land far away,"


@pytest.fixture
def tgi(server) -> InferenceClient:
    return InferenceClient(base_url=server.base_url)


def _completion(http: httpx.Client, model: str, **fields) -> dict:
    response = http.post("/v1/completions", json={"model": model, "prompt": PROMPT, "temperature": 0, **fields})
    assert response.status_code == 200, response.text
    return response.json()


def test_greedy_by_default_and_the_same_text_as_completions(tgi, http, server):
    text = tgi.text_generation(PROMPT, max_new_tokens=8)
    assert text == _completion(http, server.model, max_tokens=8)["choices"][0]["text"]
    assert text  # SmolLM2 answers something here


def test_details_give_every_token_with_its_log_probability(tgi, http, server):
    output = tgi.text_generation(PROMPT, max_new_tokens=6, details=True, top_n_tokens=3)
    details = output.details
    assert details.finish_reason == "length" and details.generated_tokens == 6 and details.seed is None
    assert "".join(token.text for token in details.tokens) == output.generated_text
    assert all(token.logprob <= 0 and not token.special for token in details.tokens)
    assert details.prefill == []  # only with decoder_input_details
    assert len(details.top_tokens) == 6
    for token, tops in zip(details.tokens, details.top_tokens, strict=True):
        # (huggingface_hub leaves the lists' items as dicts)
        assert len(tops) == 3 and tops[0]["id"] == token.id  # greedy: the chosen token is the likeliest
        assert tops[0]["logprob"] >= tops[1]["logprob"] >= tops[2]["logprob"]
    logprobs = _completion(http, server.model, max_tokens=6, logprobs=1)["choices"][0]["logprobs"]
    assert [t.logprob for t in details.tokens] == pytest.approx(logprobs["token_logprobs"], abs=1e-4)


def test_decoder_input_details_score_the_prompt(http, server):
    body = {"inputs": PROMPT, "parameters": {"max_new_tokens": 1, "details": True, "decoder_input_details": True}}
    response = http.post("/generate", json=body)
    assert response.status_code == 200, response.text
    prefill = response.json()["details"]["prefill"]
    tokens = http.post("/v1/completions", json={"model": server.model, "prompt": PROMPT, "max_tokens": 1,
                                                "return_token_ids": True}).json()["choices"][0]["prompt_token_ids"]
    assert [item["id"] for item in prefill] == tokens
    assert prefill[0]["logprob"] is None and all(item["logprob"] < 0 for item in prefill[1:])


def test_a_stream_joins_to_the_whole_answer_and_ends_with_details(tgi):
    whole = tgi.text_generation(PROMPT, max_new_tokens=8)
    events = list(tgi.text_generation(PROMPT, max_new_tokens=8, stream=True, details=True))
    assert "".join(event.token.text for event in events) == whole
    assert all(event.details is None and event.generated_text is None for event in events[:-1])
    last = events[-1]
    assert last.generated_text == whole
    assert last.details.finish_reason == "length" and last.details.generated_tokens == 8
    assert last.details.input_length > 0
    assert list(tgi.text_generation(PROMPT, max_new_tokens=8, stream=True)) == [e.token.text for e in events]


def test_the_compatibility_route_answers_a_list_or_a_stream(http):
    whole = http.post("/", json={"inputs": PROMPT, "parameters": {"max_new_tokens": 4}})
    assert whole.status_code == 200 and isinstance(whole.json(), list) and len(whole.json()) == 1
    assert set(whole.json()[0]) == {"generated_text"}
    single = http.post("/generate", json={"inputs": PROMPT, "parameters": {"max_new_tokens": 4}}).json()
    assert single == whole.json()[0]
    with http.stream("POST", "/", json={"inputs": PROMPT, "stream": True, "parameters": {"max_new_tokens": 4}}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    events = [json.loads(line.removeprefix("data:")) for line in lines]
    assert all(line.startswith("data:") for line in lines) and len(events) == 4
    assert events[-1]["generated_text"] == single["generated_text"]
    assert set(events[0]) == {"index", "token", "generated_text", "details"}


def test_stop_sequence_and_full_text(tgi):
    whole = tgi.text_generation(PROMPT, max_new_tokens=8)
    stop = whole.strip().split()[1]  # a word of the answer, not its first
    output = tgi.text_generation(PROMPT, max_new_tokens=8, stop=[stop], details=True)
    assert output.details.finish_reason == "stop_sequence"
    assert whole.startswith(output.generated_text) and stop not in output.generated_text
    full = tgi.text_generation(PROMPT, max_new_tokens=8, return_full_text=True)
    assert full == PROMPT + whole


def test_sampling_reports_its_seed_and_best_of_keeps_the_likeliest(tgi):
    first = tgi.text_generation(PROMPT, max_new_tokens=6, do_sample=True, seed=7, details=True)
    again = tgi.text_generation(PROMPT, max_new_tokens=6, do_sample=True, seed=7, details=True)
    assert first.details.seed == 7 and first.generated_text == again.generated_text
    unseeded = tgi.text_generation(PROMPT, max_new_tokens=2, temperature=0.9, details=True)
    assert isinstance(unseeded.details.seed, int)  # the seed it drew, so the answer can be repeated
    best = tgi.text_generation(PROMPT, max_new_tokens=6, best_of=3, do_sample=True, seed=1, temperature=1.5,
                               details=True)
    others = best.details.best_of_sequences
    assert len(others) == 2
    total = sum(token.logprob for token in best.details.tokens)
    assert all(total >= sum(token.logprob for token in other.tokens) for other in others)


def test_truncate_keeps_the_last_tokens(http):
    body = {"inputs": "one two three four five six seven eight nine ten", "stream": True,
            "parameters": {"max_new_tokens": 1, "truncate": 3}}
    with http.stream("POST", "/generate_stream", json=body) as response:
        events = [json.loads(line.removeprefix("data:")) for line in response.iter_lines() if line]
    assert events[-1]["details"]["input_length"] == 3


def test_json_grammar(tgi):
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"],
              "additionalProperties": False}
    # the schema's grammar allows at most 146 bytes: 160 tokens end the object on any machine
    text = tgi.text_generation("Name a city as JSON: ", max_new_tokens=160, grammar={"type": "json", "value": schema})
    assert set(json.loads(text)) == {"city"}


@pytest.mark.parametrize(("parameters", "named"), [
    ({"watermark": True}, "watermark"),
    ({"grammar": {"type": "regex", "value": "[a-z]+"}}, "regex"),
    ({"best_of": 2}, "best_of"),  # best_of needs sampling
    ({"top_n_tokens": 1000}, "top_n_tokens"),
])
def test_what_cannot_be_honoured_is_a_400_naming_it(http, parameters, named):
    response = http.post("/generate", json={"inputs": PROMPT, "parameters": parameters})
    assert response.status_code == 400, response.text
    body = response.json()
    assert set(body) == {"error", "error_type"} and body["error_type"] == "validation" and named in body["error"]


def test_streams_refuse_what_only_a_whole_answer_can_give(http):
    for parameters, named in (({"best_of": 2, "do_sample": True}, "best_of"),
                              ({"decoder_input_details": True}, "decoder_input_details")):
        response = http.post("/generate_stream", json={"inputs": PROMPT, "parameters": parameters})
        assert response.status_code == 400 and named in response.json()["error"]


def test_schema_errors_and_unknown_models_in_tgis_shape(http):
    unknown = http.post("/generate", json={"inputs": PROMPT, "parameters": {"max_tokens": 3}})
    assert unknown.status_code == 422
    assert unknown.json()["error_type"] == "validation" and "max_tokens" in unknown.json()["error"]
    assert http.post("/generate", json={"parameters": {}}).status_code == 422  # no inputs
    assert http.post("/generate", content=b"{not json").status_code == 422
    ranged = http.post("/generate", json={"inputs": PROMPT, "parameters": {"temperature": 0}})
    assert ranged.status_code == 422 and "temperature" in ranged.json()["error"]
    # found by schemathesis: 82 million choices held the server until it stopped answering
    many = http.post("/generate", json={"inputs": PROMPT, "parameters": {"best_of": 82438161, "do_sample": True}})
    assert many.status_code == 422 and "best_of" in many.json()["error"] and "<= 128" in many.json()["error"]
    missing = http.post("/generate", json={"inputs": PROMPT, "model": "no-such-model"})
    assert missing.status_code == 404 and missing.json()["error_type"] == "not_found"
    empty = http.post("/generate", json={"inputs": ""})
    assert empty.status_code == 400 and "inputs" in empty.json()["error"]


def test_raw_output_and_perf_metrics(http, server):
    body = {"inputs": PROMPT, "model": server.model, "raw_output": True, "perf_metrics_in_response": True,
            "parameters": {"max_new_tokens": 3}}
    answer = http.post("/generate", json=body)
    assert answer.status_code == 200
    data = answer.json()
    assert data["raw_output"]["completion"] == data["generated_text"]
    assert data["perf_metrics"]["prompt-tokens"] == int(answer.headers["x-prompt-tokens"])
    assert answer.headers["x-generated-tokens"] == "3" and math.isfinite(float(answer.headers["x-compute-time"]))
