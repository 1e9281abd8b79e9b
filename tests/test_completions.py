"""POST /v1/completions on the real model over real HTTP."""

from __future__ import annotations

import json

import httpx
import pytest

PROMPT = "The capital of France is"


def complete(http: httpx.Client, model: str, **fields) -> httpx.Response:
    return http.post("/v1/completions", json={"model": model, **fields})


def greedy(http: httpx.Client, model: str, prompt: str | list, max_tokens: int, **fields) -> dict:
    response = complete(http, model, prompt=prompt, max_tokens=max_tokens, temperature=0, **fields)
    assert response.status_code == 200, response.text
    return response.json()


def sse_events(response: httpx.Response) -> list:
    events = []
    for line in response.iter_lines():
        if not line:
            continue
        assert line.startswith("data: "), line
        payload = line[len("data: "):]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def test_string_prompt_answers_in_openai_shape(http, server):
    body = greedy(http, server.model, PROMPT, 12, prompt_cache_isolation_key="fresh-partition")
    assert body["object"] == "text_completion"
    assert body["id"].startswith("cmpl-") and isinstance(body["created"], int)
    assert body["model"] == server.model
    [choice] = body["choices"]
    assert choice["index"] == 0 and choice["finish_reason"] in ("stop", "length")
    assert choice["text"]  # some text came back (which text is the model's, and differs between CPUs)
    usage = body["usage"]
    assert usage["prompt_tokens"] == 5
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert 1 <= usage["completion_tokens"] <= 12
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0


def test_default_max_tokens_is_16(http, server):
    body = complete(http, server.model, prompt="Once upon a time", temperature=0, ignore_eos=True).json()
    assert body["usage"]["completion_tokens"] == 16
    assert body["choices"][0]["finish_reason"] == "length"


def test_max_completion_tokens_is_an_alias(http, server):
    body = complete(http, server.model, prompt=PROMPT, max_completion_tokens=3, ignore_eos=True).json()
    assert body["usage"]["completion_tokens"] == 3


def test_max_tokens_and_max_completion_tokens_together_is_400(http, server):
    response = complete(http, server.model, prompt=PROMPT, max_tokens=3, max_completion_tokens=3)
    assert response.status_code == 400
    assert "max_completion_tokens" in response.json()["error"]["message"]


def test_several_prompts_and_n_number_choices_across_prompts(http, server):
    prompts = ["The capital of France is", "Two plus two equals"]
    body = complete(http, server.model, prompt=prompts, n=2, max_tokens=6, temperature=0).json()
    choices = body["choices"]
    assert [c["index"] for c in choices] == [0, 1, 2, 3]
    single = [greedy(http, server.model, p, 6) for p in prompts]
    texts = [s["choices"][0]["text"] for s in single]
    # greedy: both samples of a prompt equal that prompt's own answer, in prompt order
    assert [c["text"] for c in choices] == [texts[0], texts[0], texts[1], texts[1]]
    # each prompt counts once however many choices it has; every choice's tokens count
    assert body["usage"]["prompt_tokens"] == sum(s["usage"]["prompt_tokens"] for s in single)
    assert body["usage"]["completion_tokens"] == 2 * sum(s["usage"]["completion_tokens"] for s in single)


def test_token_id_prompts_match_text_prompts(http, server):
    text_answer = greedy(http, server.model, PROMPT, 8, echo=False)
    tokens = [504, 3575, 282, 4649, 314]  # "The capital of France is" in SmolLM2's vocabulary
    as_ids = greedy(http, server.model, tokens, 8)
    assert as_ids["choices"][0]["text"] == text_answer["choices"][0]["text"]
    assert as_ids["usage"]["prompt_tokens"] == 5
    nested = greedy(http, server.model, [tokens, tokens[:3]], 4)
    assert [c["index"] for c in nested["choices"]] == [0, 1]
    assert nested["usage"]["prompt_tokens"] == 8


@pytest.mark.parametrize("prompt", [[10, "a"], ["a", [1]], [[1], 2]])
def test_mixed_prompt_kinds_are_422(http, server, prompt):
    response = complete(http, server.model, prompt=prompt)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][:2] == ["body", "prompt"]


def test_token_ids_outside_the_vocabulary_are_400(http, server):
    response = complete(http, server.model, prompt=[1, 49152])
    assert response.status_code == 400
    assert "49152" in response.json()["error"]["message"]


def test_echo_puts_the_prompt_before_the_completion(http, server):
    plain = greedy(http, server.model, PROMPT, 5)["choices"][0]["text"]
    echoed = greedy(http, server.model, PROMPT, 5, echo=True)["choices"][0]["text"]
    assert echoed == PROMPT + plain
    ids = greedy(http, server.model, [504, 3575, 282, 4649, 314], 0, echo=True)
    assert ids["choices"][0]["text"] == PROMPT
    assert ids["usage"]["completion_tokens"] == 0


def test_same_seed_same_text(http, server):
    fields = dict(prompt="Write a word:", max_tokens=24, temperature=1.0, seed=1234)
    first = complete(http, server.model, **fields).json()["choices"][0]["text"]
    second = complete(http, server.model, **fields).json()["choices"][0]["text"]
    assert first == second
    others = {complete(http, server.model, **{**fields, "seed": s}).json()["choices"][0]["text"] for s in (1, 2, 3)}
    assert len(others | {first}) > 1  # the seed matters


def test_same_seed_same_texts_for_every_choice(http, server):
    fields = dict(prompt="Name a color:", max_tokens=10, temperature=1.0, seed=7, n=3)
    first = [c["text"] for c in complete(http, server.model, **fields).json()["choices"]]
    second = [c["text"] for c in complete(http, server.model, **fields).json()["choices"]]
    assert first == second


def stop_across_tokens(http: httpx.Client, model: str) -> tuple[str, str]:
    """The greedy 24-token answer to PROMPT and a stop string made of the last 2 characters of one
    of its tokens and the first 3 of the text after it, found nowhere earlier in the answer: read
    from the answer's own tokens (whatever text this machine's model writes)."""
    body = greedy(http, model, PROMPT, 24, ignore_eos=True, logprobs=0)
    full, tokens = body["choices"][0]["text"], body["choices"][0]["logprobs"]["tokens"]
    boundary = 0
    for token in tokens[:-1]:
        if not full.startswith(token, boundary):
            break  # a character split between tokens: offsets past it are not the text's
        boundary += len(token)
        stop = full[boundary - 2:boundary + 3]
        if len(token) >= 2 and len(stop) == 5 and full.index(stop) == boundary - 2:
            return full, stop
    pytest.fail(f"no token boundary to put a stop string across in {full!r} ({tokens})")


def test_stop_sequence_spanning_tokens_is_cut_and_never_returned(http, server):
    full, stop = stop_across_tokens(http, server.model)
    body = greedy(http, server.model, PROMPT, 24, ignore_eos=True, stop=[stop])
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert choice["text"] == full[: full.index(stop)]
    assert stop not in choice["text"]


def test_stop_sequence_is_cut_in_streams_too(http, server):
    full, stop = stop_across_tokens(http, server.model)
    with http.stream("POST", "/v1/completions", json={
        "model": server.model, "prompt": PROMPT, "max_tokens": 24, "temperature": 0,
        "ignore_eos": True, "stop": stop, "stream": True,
    }) as response:
        events = sse_events(response)
    text = "".join(e["choices"][0]["text"] for e in events[:-1] if e != "[DONE]" and e["choices"])
    assert text == full[: full.index(stop)]
    finish = [e["choices"][0]["finish_reason"] for e in events if e != "[DONE]" and e["choices"]]
    assert finish[-1] == "stop"


def test_more_than_four_stop_sequences_is_400(http, server):
    response = complete(http, server.model, prompt=PROMPT, stop=["a", "b", "c", "d", "e"])
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "stop"


def test_ignore_eos_generates_to_max_tokens(http, server):
    # the bias makes the end of turn (<|im_end|>, id 2, an end-of-generation token) the greedy choice
    # on any machine: it ends the answer at once; ignore_eos keeps going
    prompt = "<|im_start|>user\nSay yes<|im_end|>\n<|im_start|>assistant\n"
    eos = {"2": 100}
    stopped = greedy(http, server.model, prompt, 200, logit_bias=eos)
    assert stopped["choices"][0]["finish_reason"] == "stop"
    assert stopped["usage"]["completion_tokens"] < 200 and stopped["choices"][0]["text"] == ""
    forced = greedy(http, server.model, prompt, 60, ignore_eos=True, logit_bias=eos)
    assert forced["choices"][0]["finish_reason"] == "length"
    assert forced["usage"]["completion_tokens"] == 60


def test_logit_bias_forces_a_token(http, server):
    token = 28  # a single-character token in SmolLM2's vocabulary
    body = greedy(http, server.model, PROMPT, 4, logit_bias={str(token): 100}, ignore_eos=True)
    unbiased = greedy(http, server.model, PROMPT, 4, ignore_eos=True)
    assert body["choices"][0]["text"] != unbiased["choices"][0]["text"]
    assert len(set(body["choices"][0]["text"])) == 1


@pytest.mark.parametrize("bias", [{"abc": 1}, {"99999999": 1}, {"5": 101}])
def test_bad_logit_bias_is_400(http, server, bias):
    response = complete(http, server.model, prompt=PROMPT, logit_bias=bias)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "logit_bias"


def test_sampling_fields_are_honoured(http, server):
    fields = dict(prompt=PROMPT, max_tokens=8, seed=5, temperature=0.9, top_k=40, top_p=0.9, min_p=0.05,
                  typical_p=0.95, frequency_penalty=0.5, presence_penalty=0.5, repetition_penalty=1.2)
    first = complete(http, server.model, **fields)
    assert first.status_code == 200, first.text
    assert first.json() ["choices"][0]["text"] == complete(http, server.model, **fields).json()["choices"][0]["text"]
    # top_k=1 is greedy whatever the temperature
    topk1 = complete(http, server.model, prompt=PROMPT, max_tokens=8, temperature=1.5, top_k=1, seed=9).json()
    assert topk1["choices"][0]["text"] == greedy(http, server.model, PROMPT, 8)["choices"][0]["text"]
    mirostat = complete(http, server.model, prompt=PROMPT, max_tokens=8, mirostat_target=3.0, mirostat_lr=0.1, seed=1)
    assert mirostat.status_code == 200 and mirostat.json()["usage"]["completion_tokens"] >= 1


def test_stream_chunks_carry_ids_and_end_with_usage_then_done(http, server):
    with http.stream("POST", "/v1/completions", json={
        "model": server.model, "prompt": PROMPT, "max_tokens": 6, "temperature": 0, "stream": True, "n": 2,
    }) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert len({c["id"] for c in chunks}) == 1
    assert all(c["object"] == "text_completion" and c["model"] == server.model and c["created"] for c in chunks)
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] <= 12
    texts = {0: "", 1: ""}
    for chunk in chunks[:-1]:
        [choice] = chunk["choices"]
        texts[choice["index"]] += choice["text"]
    whole = greedy(http, server.model, PROMPT, 6)["choices"][0]["text"]
    assert texts == {0: whole, 1: whole}


def test_stream_without_usage_when_asked(http, server):
    with http.stream("POST", "/v1/completions", json={
        "model": server.model, "prompt": PROMPT, "max_tokens": 3, "stream": True,
        "stream_options": {"include_usage": False},
    }) as response:
        events = sse_events(response)
    assert events[-1] == "[DONE]"
    assert all("usage" not in e for e in events[:-1])
