"""Observability: `/metrics` after real requests, one log line per request, load progress lines.

Two pooled servers (their output is read here): one plain, one with `--log-prompts`. Counters are
compared before and after a scrape and log lines are looked for after a mark, so the checks hold
whatever ran on them before.
"""

from __future__ import annotations

import json
import logging
import re

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.pipeline.record import RequestRecord, error_message
from app.server.request_log import format_line, truncate
from backends.llama_model import LoadProgress
from tests.conftest import POOL, TWO_SLOTS, OutputReader, RunningServer

SECRET = "purple giraffes sing opera"  # prompt text that must not reach the log without --log-prompts
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


# --log-prompts and one CORS origin: the same server as test_security_checks's
LOG_PROMPTS = ("--ctx-size", "256", "--parallel", "1", "--log-prompts", "--cors-origin", "http://localhost:3000")


@pytest.fixture(scope="module")
def observed() -> tuple[RunningServer, OutputReader]:
    running = POOL.get(*TWO_SLOTS)
    return running, running.output


@pytest.fixture(scope="module")
def prompts_logged() -> tuple[RunningServer, OutputReader]:
    running = POOL.get(*LOG_PROMPTS)
    return running, running.output


# ---- helpers ---------------------------------------------------------------------------------

def scrape(base_url: str) -> Samples:
    response = httpx.get(f"{base_url}/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


def parse_line(line: str) -> dict[str, str]:
    """A request log line's fields (quoted values are JSON strings), after whatever prefix the
    logging configuration puts before the message."""
    start = line.find("request id=")
    assert start >= 0, line
    return {key: json.loads(raw) if raw.startswith('"') else raw for key, raw in _FIELD.findall(line[start:])}


def is_request_line(line: str) -> bool:
    return "request id=" in line


def request_line(reader: OutputReader, since: int = 0, **expected: str) -> dict[str, str]:
    """The first request line after `since` with the `expected` fields."""
    line = reader.wait_for(lambda text: is_request_line(text)
                           and all(parse_line(text).get(k) == v for k, v in expected.items()), since=since)
    assert line is not None, f"no request line with {expected} in:\n{reader.text(since)}"
    return parse_line(line)


def completion(base: str, model: str, prompt: str, **extra: object) -> dict:
    body = {"model": model, "prompt": prompt, "max_tokens": 8, "temperature": 0, **extra}
    response = httpx.post(f"{base}/v1/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def chat(base: str, model: str, text: str, **extra: object) -> dict:
    body = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 8, "temperature": 0,
            **extra}
    response = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def streamed_completion(base: str, model: str, prompt: str) -> tuple[str, dict]:
    """The streamed text and the usage chunk."""
    body = {"model": model, "prompt": prompt, "max_tokens": 8, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    text, usage = "", None
    with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                text += "".join(choice.get("text") or "" for choice in chunk["choices"])
                usage = chunk.get("usage") or usage
    assert usage is not None
    return text, usage


def cached(usage: dict) -> int:
    return (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0


# ---- /metrics ---------------------------------------------------------------------------------

def test_metrics_move_by_the_requests_made(observed):
    server, _ = observed
    base, model = server.base_url, server.model
    before = scrape(base)
    _, stream_usage = streamed_completion(base, model, "Once upon a time")  # first: its end is surely recorded
    usages = [stream_usage, completion(base, model, "The capital of France is")["usage"],
              chat(base, model, "Say hello.")["usage"]]
    assert httpx.post(f"{base}/v1/completions", json={"model": "no-such-model", "prompt": "x"}).status_code == 404
    assert httpx.post(f"{base}/v1/chat/completions", json={"model": model, "messages": 5}).status_code == 422
    after = scrape(base)

    requests = "fireside_http_requests_total"
    assert delta(before, after, requests, route="/v1/completions", status="200") == 2
    assert delta(before, after, requests, route="/v1/chat/completions", status="200") == 1
    assert delta(before, after, requests, route="/v1/completions", status="404") == 1
    assert delta(before, after, requests, route="/v1/chat/completions", status="422") == 1
    assert delta(before, after, requests, route="/metrics", status="200") == 1  # the first scrape
    assert delta(before, after, "fireside_http_request_duration_seconds_count", route="/v1/completions") == 3

    assert delta(before, after, "fireside_prompt_tokens_total", model=model) == sum(u["prompt_tokens"] for u in usages)
    assert delta(before, after, "fireside_completion_tokens_total", model=model) == sum(
        u["completion_tokens"] for u in usages)
    assert delta(before, after, "fireside_cached_prompt_tokens_total", model=model) == sum(cached(u) for u in usages)
    assert delta(before, after, "fireside_time_to_first_token_seconds_count", model=model) == 3
    assert delta(before, after, "fireside_time_to_first_token_seconds_sum", model=model) > 0
    assert delta(before, after, "fireside_decode_tokens_per_second_count", model=model) == sum(
        u["completion_tokens"] > 1 for u in usages)
    assert value(after, "fireside_time_to_first_token_seconds_bucket", model=model, le="+Inf") >= 3

    assert value(after, "fireside_slots_total", model=model) == 2
    assert value(after, "fireside_slots_busy", model=model) == 0
    assert value(after, "fireside_queue_depth", model=model) == 0
    assert value(after, "fireside_models_loaded") == 1
    assert value(after, "fireside_model_loaded", model=model) == 1
    ratio = value(after, "fireside_prefix_cache_hit_ratio", model=model)
    prompt_total = value(after, "fireside_prompt_tokens_total", model=model)
    assert ratio == pytest.approx(value(after, "fireside_cached_prompt_tokens_total", model=model) / prompt_total)


def test_each_server_counts_its_own_requests(observed, prompts_logged):
    """Requests to one server show in its own /metrics and no other's."""
    servers = [observed[0].base_url, prompts_logged[0].base_url]
    before = [scrape(base) for base in servers]
    for _ in range(3):
        assert httpx.get(f"{servers[0]}/v1/models", timeout=10).status_code == 200
    assert httpx.get(f"{servers[1]}/v1/models", timeout=10).status_code == 200
    assert httpx.get(f"{servers[0]}/no/such/path", timeout=10).status_code == 404
    after = [scrape(base) for base in servers]
    counts = [(delta(old, new, "fireside_http_requests_total", route="/v1/models", status="200"),
               delta(old, new, "fireside_http_requests_total", route="unmatched", status="404"),
               delta(old, new, "fireside_http_requests_total", route="/metrics", status="200"))
              for old, new in zip(before, after, strict=True)]
    assert counts == [(3, 1, 1), (1, 0, 1)]  # and each counted the one scrape it answered in between


# ---- the request log line -----------------------------------------------------------------------

def test_one_line_per_request_without_prompt_text(observed):
    server, reader = observed
    base, model = server.base_url, server.model
    body = chat(base, model, f"Tell me why {SECRET}.", user="alice", metadata={"team": "blue team"})
    line = request_line(reader, response_id=body["id"])
    usage = body["usage"]
    assert line["route"] == "/v1/chat/completions" and line["method"] == "POST" and line["status"] == "200"
    assert line["model"] == model and line["stream"] == "false" and line["disconnected"] == "false"
    assert int(line["prompt_tokens"]) == usage["prompt_tokens"]
    assert int(line["completion_tokens"]) == usage["completion_tokens"]
    assert int(line["cached_tokens"]) == cached(usage)
    # both times are there, the first token's within the whole (how long either took is the machine's)
    assert 0 <= float(line["ttft_ms"]) <= float(line["total_ms"])
    assert line["user"] == "alice" and json.loads(line["metadata"]) == {"team": "blue team"}
    assert line["id"].startswith("req-")
    assert "prompt" not in line and "output" not in line

    mark = reader.mark()
    streamed_completion(base, model, f"Why {SECRET}")
    request_line(reader, mark, route="/v1/completions", stream="true", status="200")
    lines = [text for text in reader.text().splitlines() if is_request_line(text)]
    assert len([text for text in lines if body["id"] in text]) == 1  # exactly one line per request
    assert SECRET not in reader.text()


def test_errors_get_a_line_with_their_message(observed):
    server, reader = observed
    base = server.base_url
    missing = httpx.post(f"{base}/v1/completions", json={"model": "ghost-model", "prompt": SECRET},
                         headers={"X-Request-Id": "trace-404"})
    assert missing.status_code == 404 and missing.headers["x-request-id"] == "trace-404"
    line = request_line(reader, id="trace-404")
    assert line["status"] == "404" and line["model"] == "ghost-model" and "ghost-model" in line["error"]
    assert "prompt_tokens" not in line

    invalid = httpx.post(f"{base}/v1/chat/completions", json={"model": server.model, "messages": 5},
                         headers={"X-Request-Id": "trace-422"})
    assert invalid.status_code == 422
    line = request_line(reader, id="trace-422")
    assert line["status"] == "422" and "messages" in line["error"]

    assert httpx.get(f"{base}/v2/nothing-here", headers={"X-Request-Id": "trace-unmatched"}).status_code == 404
    line = request_line(reader, id="trace-unmatched")
    assert line["route"] == "unmatched" and line["path"] == "/v2/nothing-here"
    assert SECRET not in reader.text()


def test_a_client_that_leaves_a_stream_is_logged_as_disconnected(observed):
    server, reader = observed
    body = {"model": server.model, "prompt": "Count from one to one hundred:", "max_tokens": 400,
            "stream": True, "ignore_eos": True}
    received = 0
    with httpx.stream("POST", f"{server.base_url}/v1/completions", json=body, timeout=60,
                      headers={"X-Request-Id": "trace-leaves"}) as response:
        for line in response.iter_lines():
            if line.startswith("data: {") and '"text":""' not in line:
                received += 1
                if received == 3:
                    break  # and close the connection
    line = request_line(reader, id="trace-leaves")
    assert line["disconnected"] == "true" and line["stream"] == "true" and line["status"] == "200"
    # what it was sent counts: its prompt, and at least the tokens it read (at most what was asked)
    assert int(line["prompt_tokens"]) > 5
    assert 3 <= int(line["completion_tokens"]) < 400


def test_a_client_that_leaves_a_whole_answer_counts_what_was_generated(observed):
    server, reader = observed
    body = {"model": server.model, "prompt": "Count from one to one hundred:", "max_tokens": 2000,
            "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):  # gives up, and closes the connection
        httpx.post(f"{server.base_url}/v1/completions", json=body, timeout=httpx.Timeout(60, read=0.5),
                   headers={"X-Request-Id": "trace-gives-up"})
    line = request_line(reader, id="trace-gives-up")
    assert line["disconnected"] == "true" and line["stream"] == "false"
    assert int(line["prompt_tokens"]) > 5
    assert 0 < int(line["completion_tokens"]) < 2000


def test_log_prompts_includes_prompt_and_output(prompts_logged):
    server, reader = prompts_logged
    base, model = server.base_url, server.model
    body = completion(base, model, f"Why do {SECRET}?")
    line = request_line(reader, response_id=body["id"])
    assert SECRET in line["prompt"] and line["output"] == body["choices"][0]["text"]

    mark = reader.mark()
    text, _ = streamed_completion(base, model, f"Because {SECRET}")
    line = request_line(reader, mark, route="/v1/completions", stream="true")
    assert SECRET in line["prompt"] and line["output"] == text

    answer = chat(base, model, f"Do {SECRET}?")
    line = request_line(reader, response_id=answer["id"])
    assert SECRET in line["prompt"] and "<|im_start|>" in line["prompt"]  # as the model saw it


# ---- model load progress -------------------------------------------------------------------------

def test_load_progress_lines_at_start_up(observed):
    server, reader = observed
    lines = reader.text().splitlines()
    done = [i for i, text in enumerate(lines) if re.search(r"loading \S+\.gguf: 100%$", text)]
    listening = [i for i, text in enumerate(lines) if text.startswith("listening on")]
    assert done and listening and done[0] < listening[0], lines


def test_load_progress_is_throttled(caplog, monkeypatch):
    clock = iter([0.0, 0.1, 0.2, 1.5, 1.6, 1.7])
    monkeypatch.setattr("backends.llama_model.time.monotonic", lambda: next(clock))
    progress = LoadProgress("big.gguf", interval=1.0)
    with caplog.at_level(logging.INFO, logger="fireside.load"):
        for fraction in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0):
            progress.report(fraction)
    assert [r.getMessage() for r in caplog.records] == ["loading big.gguf: 0%", "loading big.gguf: 60%",
                                                        "loading big.gguf: 100%"]


# ---- the line's format ------------------------------------------------------------------------------

def test_line_quoting_and_truncation():
    record = RequestRecord("req-1", "POST", "/v1/completions", route="/v1/completions", status=400,
                           error='bad "value"\nhere', user="plain")
    fields = parse_line(format_line(record))
    assert fields["error"] == 'bad "value"\nhere' and fields["user"] == "plain" and fields["status"] == "400"
    assert "\n" not in format_line(record)
    long = "a" * 1500 + "b" * 1500
    cut = truncate(long, 100)
    assert cut.startswith("a" * 50) and cut.endswith("b" * 50) and "2900 chars" in cut
    assert error_message(b'{"detail":[{"loc":["body","model"],"msg":"missing"}]}') == "body.model: missing"
    assert error_message(b'{"error":{"message":"nope","type":"x"}}') == "nope"



def test_an_embedding_request_is_logged_with_its_input(prompts_logged):
    server, reader = prompts_logged
    mark = reader.mark()
    response = httpx.post(f"{server.v1}/embeddings", json={"model": server.model, "input": f"About {SECRET}"},
                          timeout=60)
    assert response.status_code == 200, response.text
    line = request_line(reader, mark, route="/v1/embeddings")
    assert SECRET in line["prompt"] and line["status"] == "200"
    assert int(line["prompt_tokens"]) == response.json()["usage"]["prompt_tokens"]
