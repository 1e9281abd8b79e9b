"""`speculation` / `prediction` over real HTTP with the real model: at temperature 0 the answer is
exactly the one without a prediction (text, token ids, logprobs), on both endpoints, whole and
streamed; the perf metrics tell how much of the prediction was used.

Every context here stays under 256 tokens: past that, llama.cpp's CPU attention sums single-token
decodes along another path than batched ones (see backends/drafting.py), so only short contexts
are bit-identical with and without drafting.
"""

from __future__ import annotations

import httpx
import pytest

from tests.fireworks_shapes import (
    CHAT,
    COMPLETIONS,
    refused,
    send,
    stream,
    stream_text,
    stream_token_ids,
    whole,
)

TEXT = "The quick brown fox jumps over the lazy dog.\nA bird sings in the old oak tree every morning."
EDITED = TEXT.replace("old", "tall")  # the prediction: the text with one word changed
DOCUMENT = f"# v1\n{TEXT}\n# v2\n{TEXT}\n# v3\n"  # the model writes a third copy
STOP = "# v"
UNRELATED = "Quarterly revenue grew by eleven percent, driven by strong demand in Asia."

COMPLETION = {"prompt": DOCUMENT, "max_tokens": 40, "temperature": 0, "stop": STOP, "return_token_ids": True}
CHAT_BODY = {"messages": [{"role": "user", "content": DOCUMENT}], "max_tokens": 40, "temperature": 0, "stop": STOP,
             "return_token_ids": True}


def _completion(http, server, **extra) -> dict:
    return whole(http, COMPLETIONS, server.model, **COMPLETION, perf_metrics_in_response=True, **extra)


def _chat(http, server, **extra) -> dict:
    return whole(http, CHAT, server.model, **CHAT_BODY, perf_metrics_in_response=True, **extra)


def _prediction_tokens(http, server, text: str) -> list[int]:
    return whole(http, COMPLETIONS, server.model, prompt=text, max_tokens=0,
                 return_token_ids=True)["choices"][0]["prompt_token_ids"]


@pytest.fixture(scope="module")
def baseline(server):
    with httpx.Client(base_url=server.base_url, timeout=120) as client:
        completion = whole(client, COMPLETIONS, server.model, **COMPLETION, perf_metrics_in_response=True)
        chat = whole(client, CHAT, server.model, **CHAT_BODY, perf_metrics_in_response=True)
    assert completion["usage"]["total_tokens"] < 256 and chat["usage"]["total_tokens"] < 256
    assert completion["choices"][0]["finish_reason"] == "stop"
    assert len(completion["choices"][0]["token_ids"]) >= 15  # the model copies the text out
    for answer in (completion, chat):
        assert not any(name.startswith("speculation-") for name in answer["perf_metrics"])
    return {"completion": completion, "chat": chat}


def _same(answer: dict, expected: dict) -> None:
    got, want = answer["choices"][0], expected["choices"][0]
    if "message" in want:
        assert got["message"] == want["message"]
    else:
        assert got["text"] == want["text"]
    assert got["token_ids"] == want["token_ids"]
    assert got["finish_reason"] == want["finish_reason"]
    assert answer["usage"]["completion_tokens"] == expected["usage"]["completion_tokens"]


def _speculation_metrics(answer: dict) -> tuple[int, int]:
    metrics = answer["perf_metrics"]
    return metrics["speculation-prompt-tokens"], metrics["speculation-prompt-matched-tokens"]


@pytest.mark.parametrize("form", ["prediction-object", "prediction-string", "prediction-parts", "speculation"])
def test_completion_prediction_changes_nothing(http, server, baseline, form):
    extra = {
        "prediction-object": {"prediction": {"type": "content", "content": EDITED}},
        "prediction-string": {"prediction": EDITED},
        "prediction-parts": {"prediction": {"type": "content", "content": [
            {"type": "text", "text": EDITED[:20]}, {"type": "text", "text": EDITED[20:]}]}},
        "speculation": {"speculation": EDITED},
    }[form]
    answer = _completion(http, server, **extra)
    _same(answer, baseline["completion"])
    predicted, matched = _speculation_metrics(answer)
    assert predicted == len(_prediction_tokens(http, server, EDITED))
    assert matched > 0


def test_speculation_as_token_ids(http, server, baseline):
    expected = baseline["completion"]
    perfect = expected["choices"][0]["token_ids"]
    answer = _completion(http, server, speculation=perfect)
    _same(answer, expected)
    predicted, matched = _speculation_metrics(answer)
    assert predicted == len(perfect)
    assert matched >= len(perfect) // 2  # the exact answer: most drafts are kept


def test_unrelated_prediction_changes_nothing(http, server, baseline):
    answer = _completion(http, server, prediction={"type": "content", "content": UNRELATED})
    _same(answer, baseline["completion"])
    predicted, matched = _speculation_metrics(answer)
    assert predicted > 0 and matched <= predicted


def test_chat_prediction_changes_nothing(http, server, baseline):
    answer = _chat(http, server, prediction={"type": "content", "content": EDITED})
    _same(answer, baseline["chat"])
    predicted, matched = _speculation_metrics(answer)
    assert predicted == len(_prediction_tokens(http, server, EDITED)) and matched > 0
    answer = _chat(http, server, speculation=_prediction_tokens(http, server, TEXT))
    _same(answer, baseline["chat"])


def test_speculation_metrics_in_headers(http, server):
    response = send(http, COMPLETIONS, server.model, **COMPLETION, speculation=EDITED,
                    prompt_cache_isolation_key="speculation-headers")
    assert response.status_code == 200
    assert int(response.headers["fireworks-speculation-prompt-tokens"]) > 0
    assert int(response.headers["fireworks-speculation-prompt-matched-tokens"]) > 0


def test_prediction_with_logprobs(http, server):
    body = {"logprobs": True, "top_logprobs": 2}
    plain = whole(http, COMPLETIONS, server.model, **COMPLETION, **body)["choices"][0]["logprobs"]["content"]
    drafted = whole(http, COMPLETIONS, server.model, **COMPLETION, **body,
                    prediction=EDITED)["choices"][0]["logprobs"]["content"]
    assert [e["token_id"] for e in drafted] == [e["token_id"] for e in plain]
    assert [e["text_offset"] for e in drafted] == [e["text_offset"] for e in plain]
    assert [e["logprob"] for e in drafted] == pytest.approx([e["logprob"] for e in plain], abs=1e-3)
    assert [[a["token_id"] for a in e["top_logprobs"]] for e in drafted] == \
        [[a["token_id"] for a in e["top_logprobs"]] for e in plain]


@pytest.mark.parametrize("path", [COMPLETIONS, CHAT])
def test_prediction_in_a_stream(http, server, baseline, path):
    body = COMPLETION if path == COMPLETIONS else CHAT_BODY
    expected = baseline["completion" if path == COMPLETIONS else "chat"]["choices"][0]
    chunks = stream(http, path, server.model, **body, prediction=EDITED, perf_metrics_in_response=True)
    assert stream_text(chunks) == expected.get("text", (expected.get("message") or {}).get("content"))
    assert stream_token_ids(chunks) == expected["token_ids"]
    [metrics] = [chunk["perf_metrics"] for chunk in chunks if "perf_metrics" in chunk]
    assert metrics["speculation-prompt-matched-tokens"] > 0


def test_prediction_with_several_choices(http, server, baseline):
    answer = whole(http, COMPLETIONS, server.model, **COMPLETION, n=2, prediction=EDITED)
    for choice in answer["choices"]:
        assert choice["token_ids"] == baseline["completion"]["choices"][0]["token_ids"]


def test_sampled_prediction_answers(http, server):
    answer = whole(http, COMPLETIONS, server.model, prompt=DOCUMENT, max_tokens=20, temperature=0.8, seed=4,
                   stop=STOP, prediction=EDITED, logprobs=True)
    content = answer["choices"][0]["logprobs"]["content"]
    assert len(content) == answer["usage"]["completion_tokens"] >= 1
    again = whole(http, COMPLETIONS, server.model, prompt=DOCUMENT, max_tokens=20, temperature=0.8, seed=4,
                  stop=STOP, prediction=EDITED, logprobs=True)
    assert again["choices"][0]["text"] == answer["choices"][0]["text"]  # a seed repeats the draw


def test_matched_tokens_never_exceed_the_prediction(http, server):
    """`speculation-prompt-matched-tokens` counts tokens of the prediction that matched, so it is at
    most `speculation-prompt-tokens`, even when the output repeats the predicted text more than once."""
    answer = whole(http, CHAT, server.model, messages=[{"role": "user", "content": DOCUMENT}], max_tokens=40,
                   temperature=0, prediction=TEXT, perf_metrics_in_response=True)
    predicted, matched = _speculation_metrics(answer)
    assert matched <= predicted


def test_prediction_and_speculation_together_are_refused(http, server):
    error = refused(http, COMPLETIONS, server.model, prompt=DOCUMENT, max_tokens=1, prediction=EDITED,
                    speculation=EDITED)
    assert error["param"] == "prediction"
