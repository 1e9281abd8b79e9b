"""Upstream routing end to end: a Fireside whose config routes models to a second, real Fireside
on loopback (serving SmolLM2 behind an API key), asked through every front door with the real
clients. Greedy answers through the first equal the second's own; usage is the second's; the
second's errors come back in each front door's shape; a stream the client leaves stops the
second's generation."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anthropic
import httpx
import ollama
import openai
import pytest

from app.pipeline.output import SplitOutput
from app.pipeline.stream_buffer import Piece
from backends.jobs import OutputPart
from tests.conftest import (
    FIRESIDE,
    POOL,
    TWO_SLOTS,
    OutputReader,
    RunningServer,
    free_port,
)

KEY = "upstream-test-key-0123456789"
KEY_ENV = "FIRESIDE_TEST_UPSTREAM_KEY"
WRONG_ENV = "FIRESIDE_TEST_WRONG_KEY"
GREEDY = {"temperature": 0}  # the Anthropic SDK takes it only in extra_body
QUESTION = [{"role": "user", "content": "Name three colours."}]
# The city's length bounded and one call asked for: a call is then at most a few hundred bytes and
# ends within CALL_BUDGET whatever whitespace and name the model picks (its choices differ between CPUs).
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"],
    "additionalProperties": False}}}]
CALL_BUDGET = 384


@dataclass
class Pair:
    front: RunningServer  # routes `remote`, `wrong-key` and `nowhere` upstream
    back: RunningServer  # serves `smol` itself, behind KEY
    front_log: OutputReader
    back_log: OutputReader

    @property
    def upstream_url(self) -> str:
        return self.back.v1


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    back = POOL.get("--alias", "smol", "--api-key", KEY, *TWO_SLOTS)
    config = tmp_path_factory.mktemp("upstream") / "config.toml"
    config.write_text(f"""
[[models]]
id = "remote"
aliases = ["cluster"]
upstream = "{back.v1}"
api_key_env = "{KEY_ENV}"
model = "smol"

[[models]]
id = "wrong-key"
upstream = "{back.v1}"
api_key_env = "{WRONG_ENV}"
model = "smol"

[[models]]
id = "nowhere"
upstream = "http://127.0.0.1:{free_port()}/v1"
""", encoding="utf-8")
    front = POOL.get("--config", str(config), env={KEY_ENV: KEY, WRONG_ENV: "not-the-key-0123456789"})
    return Pair(front, back, front.output, back.output)


@pytest.fixture(scope="module")
def front_sdk(pair: Pair) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=pair.front.v1, api_key="unused", max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def back_sdk(pair: Pair) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=pair.back.v1, api_key=KEY, max_retries=0) as client:
        yield client


def direct_chat(back_sdk: openai.OpenAI, messages: list[dict], max_tokens: int = 12) -> tuple[str, int, int]:
    answer = back_sdk.chat.completions.create(model="smol", messages=messages, max_tokens=max_tokens, temperature=0)
    return answer.choices[0].message.content, answer.usage.prompt_tokens, answer.usage.completion_tokens


# ---- listing --------------------------------------------------------------------------------

def test_models_list_the_upstream_model_with_where_it_runs(pair: Pair) -> None:
    cards = {card["id"]: card for card in httpx.get(f"{pair.front.v1}/models", timeout=10).json()["data"]}
    assert cards["remote"]["upstream"] == pair.upstream_url
    assert cards["remote"]["capabilities"] == ["completion", "chat"]
    assert httpx.get(f"{pair.front.v1}/models/cluster", timeout=10).json()["upstream"] == pair.upstream_url
    tags = {m["name"]: m for m in httpx.get(f"{pair.front.base_url}/api/tags", timeout=10).json()["models"]}
    assert tags["remote"]["remote_host"] == pair.upstream_url and tags["remote"]["remote_model"] == "smol"


def test_serve_and_fireside_models_say_where_an_upstream_model_runs(pair: Pair, tmp_path: Path) -> None:
    line = pair.front_log.wait_for(lambda text: text.startswith("serving remote "))
    assert line is not None and f"from upstream {pair.upstream_url} (as smol)" in line
    assert "does not exist" not in pair.front_log.text()  # no file warning for a model without a file
    folder = tmp_path / "config"
    folder.mkdir()
    (folder / "config.toml").write_text(f'[[models]]\nid = "remote"\nupstream = "{pair.upstream_url}"\n')
    listing = subprocess.run([str(FIRESIDE), "models", "--port", str(free_port())], capture_output=True, text=True,
                             timeout=60, check=True, env={**os.environ, "FIRESIDE_CONFIG_DIR": str(folder)}).stdout
    row = next(line for line in listing.splitlines() if line.startswith("remote "))
    assert row.split() == ["remote", "-", "-", "remote", "?", pair.upstream_url]  # ID ALIASES BASE SIZE LOADED FILE


# ---- answers equal the upstream's own ---------------------------------------------------------

def test_chat_whole_and_streamed_equal_the_upstreams_answer_and_usage(pair: Pair, front_sdk: openai.OpenAI,
                                                                      back_sdk: openai.OpenAI) -> None:
    text, prompt_tokens, completion_tokens = direct_chat(back_sdk, QUESTION)
    whole = front_sdk.chat.completions.create(model="remote", messages=QUESTION, max_tokens=12, temperature=0)
    assert whole.model == "remote"
    assert whole.choices[0].message.content == text
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens) == (prompt_tokens, completion_tokens)

    chunks = list(front_sdk.chat.completions.create(model="cluster", messages=QUESTION, max_tokens=12,
                                                    temperature=0, stream=True))
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(deltas) > 1  # passed through chunk by chunk
    assert "".join(deltas) == text
    assert chunks[-1].usage.completion_tokens == completion_tokens
    assert chunks[-1].usage.prompt_tokens == prompt_tokens
    line = pair.front_log.wait_for(lambda line: f"response_id={chunks[0].id}" in line)
    assert line is not None and f"upstream={pair.upstream_url}" in line
    assert f"completion_tokens={completion_tokens}" in line


def test_completions_equal_the_upstreams(front_sdk: openai.OpenAI, back_sdk: openai.OpenAI) -> None:
    direct = back_sdk.completions.create(model="smol", prompt="Once upon a time", max_tokens=8, temperature=0)
    routed = front_sdk.completions.create(model="remote", prompt="Once upon a time", max_tokens=8, temperature=0)
    assert routed.choices[0].text == direct.choices[0].text
    assert routed.usage.completion_tokens == direct.usage.completion_tokens


def test_anthropic_messages_through_the_sdk(pair: Pair, back_sdk: openai.OpenAI) -> None:
    text, _, completion_tokens = direct_chat(back_sdk, QUESTION)
    # how the upstream's own answer ended (cut, or ended by the model within 12 tokens on this machine)
    direct = back_sdk.chat.completions.create(model="smol", messages=QUESTION, max_tokens=12, temperature=0)
    stop_reason = {"length": "max_tokens", "stop": "end_turn"}[direct.choices[0].finish_reason]
    with anthropic.Anthropic(base_url=pair.front.base_url, api_key="unused", max_retries=0) as sdk:
        message = sdk.messages.create(model="remote", max_tokens=12, messages=QUESTION, extra_body=GREEDY)
        assert message.content[0].text == text
        assert message.usage.output_tokens == completion_tokens and message.stop_reason == stop_reason
        with sdk.messages.stream(model="remote", max_tokens=12, messages=QUESTION, extra_body=GREEDY) as stream:
            streamed = "".join(stream.text_stream)
            final = stream.get_final_message()
    assert streamed == text and final.stop_reason == stop_reason


def test_ollama_chat_through_the_client(pair: Pair, back_sdk: openai.OpenAI) -> None:
    text, prompt_tokens, completion_tokens = direct_chat(back_sdk, QUESTION)
    client = ollama.Client(host=pair.front.base_url)
    answer = client.chat(model="remote", messages=QUESTION, options={"temperature": 0, "num_predict": 12})
    assert answer.message.content == text
    assert (answer.prompt_eval_count, answer.eval_count) == (prompt_tokens, completion_tokens)
    streamed = "".join(part.message.content for part in client.chat(
        model="remote", messages=QUESTION, options={"temperature": 0, "num_predict": 12}, stream=True))
    assert streamed == text


def test_tgi_generate_and_stream(pair: Pair, back_sdk: openai.OpenAI) -> None:
    direct = back_sdk.completions.create(model="smol", prompt="The sky is", max_tokens=6, temperature=0)
    body = {"model": "remote", "inputs": "The sky is", "parameters": {"max_new_tokens": 6}}
    whole = httpx.post(f"{pair.front.base_url}/generate", json=body, timeout=60)
    assert whole.status_code == 200 and whole.json()["generated_text"] == direct.choices[0].text
    with httpx.stream("POST", f"{pair.front.base_url}/generate_stream", json=body, timeout=60) as response:
        events = [json.loads(line[5:]) for line in response.iter_lines() if line.startswith("data:")]
    assert "".join(event["token"]["text"] for event in events) == direct.choices[0].text
    assert events[-1]["generated_text"] == direct.choices[0].text
    assert events[-1]["details"]["generated_tokens"] == direct.usage.completion_tokens


def test_responses_through_the_sdk(front_sdk: openai.OpenAI, back_sdk: openai.OpenAI) -> None:
    text, prompt_tokens, completion_tokens = direct_chat(back_sdk, QUESTION, max_tokens=16)
    response = front_sdk.responses.create(model="remote", input="Name three colours.", max_output_tokens=16,
                                          temperature=0)
    assert response.output_text == text
    assert (response.usage.input_tokens, response.usage.output_tokens) == (prompt_tokens, completion_tokens)


def test_tool_calls_come_through_structured(front_sdk: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    whole = front_sdk.chat.completions.create(model="remote", messages=messages, tools=TOOLS, tool_choice="required",
                                              parallel_tool_calls=False, max_tokens=CALL_BUDGET, temperature=0)
    [call] = whole.choices[0].message.tool_calls
    assert whole.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather" and set(json.loads(call.function.arguments)) == {"city"}
    stream = front_sdk.chat.completions.create(model="remote", messages=messages, tools=TOOLS, tool_choice="required",
                                               parallel_tool_calls=False, max_tokens=CALL_BUDGET, temperature=0,
                                               stream=True)
    pieces = [c.choices[0].delta.tool_calls for c in stream if c.choices and c.choices[0].delta.tool_calls]
    assert pieces[0][0].function.name == "get_weather" and pieces[0][0].id
    assert "".join(p[0].function.arguments or "" for p in pieces) == call.function.arguments


def test_split_output_reads_the_same_however_the_parts_are_grouped() -> None:
    """An upstream's parts as the shapers read them, one piece per part or coalesced by a stream
    buffer at any point: the same content, reasoning and call."""
    parts = [OutputPart("content", "plain "), OutputPart("reasoning", "thinking \x00 hard"),
             OutputPart("content", "more"), OutputPart("call", '{"a":', 0, "f", "call_x"),
             OutputPart("call", " 1}", 0)]
    for cut in range(len(parts) + 1):
        output = SplitOutput()
        events = [event for group in (parts[:cut], parts[cut:]) if group
                  for event in output.feed(Piece("".join(p.text for p in group), parts=group))]
        events += output.finish()
        assert "".join(e.text for e in events if e.kind == "content") == "plain more"
        assert "".join(e.text for e in events if e.kind == "reasoning") == "thinking \x00 hard"
        assert [(e.name, e.id) for e in events if e.kind == "call"] == [("f", "call_x"), (None, None)]
        assert [(c.name, c.arguments, c.id) for c in output.calls] == [("f", '{"a": 1}', "call_x")]


# ---- errors in each front door's shape -----------------------------------------------------

def test_an_upstream_400_keeps_its_status_and_message(pair: Pair) -> None:
    body = {"messages": QUESTION, "max_tokens": 50000, "context_length_exceeded_behavior": "error"}
    direct = httpx.post(f"{pair.back.v1}/chat/completions", json={**body, "model": "smol"},
                        headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    routed = httpx.post(f"{pair.front.v1}/chat/completions", json={**body, "model": "remote"}, timeout=30)
    assert direct.status_code == routed.status_code == 400
    assert routed.json()["error"]["message"] == direct.json()["error"]["message"]
    assert routed.json()["error"]["code"] == "context_length_exceeded"
    anthropic_shape = httpx.post(f"{pair.front.base_url}/v1/messages", timeout=30, json={
        "model": "remote", "max_tokens": 8, "messages": QUESTION, "stop_sequences": ["a", "b", "c", "d", "e"]})
    assert anthropic_shape.status_code == 400
    assert anthropic_shape.json()["type"] == "error" and "stop" in anthropic_shape.json()["error"]["message"]


def test_a_refused_key_is_a_401_in_every_front_doors_shape(pair: Pair) -> None:
    base = pair.front.base_url
    answers = {
        "openai": httpx.post(f"{base}/v1/chat/completions", json={"model": "wrong-key", "messages": QUESTION}),
        "openai-stream": httpx.post(f"{base}/v1/chat/completions",
                                    json={"model": "wrong-key", "messages": QUESTION, "stream": True}),
        "anthropic": httpx.post(f"{base}/v1/messages", json={"model": "wrong-key", "max_tokens": 8, "messages": QUESTION}),
        "ollama": httpx.post(f"{base}/api/chat", json={"model": "wrong-key", "messages": QUESTION}),
        "tgi": httpx.post(f"{base}/generate", json={"model": "wrong-key", "inputs": "Hi"}),
        "responses": httpx.post(f"{base}/v1/responses", json={"model": "wrong-key", "input": "Hi"}),
    }
    for door, answer in answers.items():
        assert answer.status_code == 401, door
    assert WRONG_ENV in answers["openai"].json()["error"]["message"]
    assert answers["openai-stream"].json()["error"]["type"] == "authentication_error"
    assert answers["anthropic"].json()["error"]["type"] == "authentication_error"
    assert pair.upstream_url in answers["ollama"].json()["error"]
    assert answers["tgi"].json()["error_type"] == "authentication"
    assert answers["responses"].json()["error"]["message"]


def test_an_unreachable_upstream_is_a_502_naming_it(pair: Pair) -> None:
    base = pair.front.base_url
    for url, body in ((f"{base}/v1/chat/completions", {"model": "nowhere", "messages": QUESTION, "stream": True}),
                      (f"{base}/api/generate", {"model": "nowhere", "prompt": "Hi"}),
                      (f"{base}/v1/messages", {"model": "nowhere", "max_tokens": 8, "messages": QUESTION})):
        answer = httpx.post(url, json=body, timeout=30)
        assert answer.status_code == 502, url
        assert "unreachable" in answer.text and "http://127.0.0.1:" in answer.text


def test_what_cannot_be_forwarded_is_a_400_naming_the_field(pair: Pair) -> None:
    base = pair.front.base_url
    for path, body, param in (
        ("/v1/chat/completions", {"model": "remote", "messages": QUESTION, "logprobs": True}, "logprobs"),
        ("/v1/chat/completions", {"model": "remote", "prompt_token_ids": [1, 2, 3]}, "prompt_token_ids"),
        ("/v1/completions", {"model": "remote", "prompt": "Hi", "logit_bias": {"5": 1}}, "logit_bias"),
        ("/v1/completions", {"model": "remote", "prompt": "Hi", "echo": True}, "echo"),
        ("/v1/completions", {"model": "remote", "prompt": "Hi", "response_format": {"type": "grammar",
                                                                                 "grammar": "root ::= \"a\""}},
         "response_format"),
        ("/v1/embeddings", {"model": "remote", "input": "Hi"}, "model"),
    ):
        answer = httpx.post(base + path, json=body, timeout=30)
        assert answer.status_code == 400, (path, body, answer.text)
        assert answer.json()["error"]["param"] == param


# ---- a client that leaves ----------------------------------------------------------------------

def test_a_stream_the_client_leaves_stops_the_upstream(pair: Pair) -> None:
    body = {"model": "remote", "messages": [{"role": "user", "content": "Tell me a very long story."}],
            "max_tokens": 900, "ignore_eos": True, "stream": True}
    mark = pair.back_log.mark()
    with httpx.stream("POST", f"{pair.front.v1}/chat/completions", json=body, timeout=60) as response:
        first = next(line for line in response.iter_lines() if line.startswith("data:"))
        answer_id = json.loads(first[5:])["id"]
    # the upstream's own line says its client left, long before 900 tokens
    left = pair.back_log.wait_for(lambda line: "disconnected=true" in line and "model=smol" in line, timeout=60,
                                  since=mark)
    assert left is not None
    deadline = time.monotonic() + 30
    while pair.back.health()["models"][0]["busy_slots"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pair.back.health()["models"][0]["busy_slots"] == 0, pair.back_log.text(mark)
    line = pair.front_log.wait_for(lambda line: f"response_id={answer_id}" in line, timeout=30)
    assert line is not None and "disconnected=true" in line


def test_the_config_refuses_local_keys_on_an_upstream_model(tmp_path: Path) -> None:
    from app.settings.config import ConfigError, load_config

    config = tmp_path / "config.toml"
    config.write_text('[[models]]\nid = "x"\nupstream = "https://h/v1"\ncontext_size = 8\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="context_size does not apply"):
        load_config(config)
    config.write_text('[[models]]\nid = "x"\nupstraem = "https://h/v1"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="did you mean 'upstream'"):
        load_config(config)
    config.write_text('[[models]]\nid = "x"\nupstream = "https://h/v1/"\napi_key_env = "K"\n', encoding="utf-8")
    [entry] = load_config(config).models
    assert entry.upstream is not None and entry.upstream.url == "https://h/v1" and entry.upstream.api_key_env == "K"
