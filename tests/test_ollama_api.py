"""Ollama's API on the shared SmolLM2 server, with the real `ollama` Python package as the client:
chat and generate (whole and streamed, Ollama's statistics, `context`), `format`, tools, embeddings,
the model listings, and errors in Ollama's `{"error": ...}` shape."""

from __future__ import annotations

import base64
import json

import httpx
import jsonschema
import numpy as np
import ollama
import pytest

from tests.images import png

# A request for a long answer: no greedy path ends it within 6 tokens (a short one, "Say hi", may end
# sooner on some CPU than on another), so the statistics below are those of an answer cut at 6.
STORY = "Tell me a long story about a dragon."
ASK = [{"role": "user", "content": STORY}]
GREEDY = {"temperature": 0, "num_predict": 6}
PIXEL = base64.b64encode(png(np.zeros((2, 2, 3), np.uint8))).decode()  # through the image path
TIMINGS = ("total_duration", "load_duration", "prompt_eval_duration", "eval_duration")
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture
def client(server) -> ollama.Client:
    return ollama.Client(host=server.base_url, timeout=120)


def assert_statistics(final, prompt_tokens: int | None = None, eval_count: int = GREEDY["num_predict"]) -> None:
    assert final.done is True and final.done_reason == "length"
    assert final.eval_count == eval_count
    assert final.prompt_eval_count > 0 and (prompt_tokens is None or final.prompt_eval_count == prompt_tokens)
    for name in TIMINGS:
        assert isinstance(final[name], int) and final[name] > 0, name
    assert final.total_duration >= final.eval_duration


def test_chat_whole_and_streamed(client, server) -> None:
    whole = client.chat(model=server.model, messages=ASK, options=GREEDY)
    assert whole.model == server.model and whole.message.role == "assistant" and whole.message.content
    assert whole.message.thinking is None and whole.message.tool_calls is None
    assert_statistics(whole)
    # `name:latest` finds the model `name`; the answer names the model as the request did
    parts = list(client.chat(model=f"{server.model}:latest", messages=ASK, options=GREEDY, stream=True))
    assert [part.done for part in parts] == [False] * (len(parts) - 1) + [True]
    assert {part.model for part in parts} == {f"{server.model}:latest"}
    assert "".join(part.message.content for part in parts) == whole.message.content
    assert parts[-1].message.content == ""
    assert_statistics(parts[-1], whole.prompt_eval_count)


def test_stream_is_newline_delimited_json_by_default(server) -> None:
    with httpx.stream("POST", f"{server.base_url}/api/chat", timeout=120,
                      json={"model": server.model, "messages": ASK, "options": GREEDY}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in response.iter_lines() if line]
    assert set(lines[0]) == {"model", "created_at", "message", "done"}
    assert set(lines[-1]) == {"model", "created_at", "message", "done", "done_reason", *TIMINGS, "prompt_eval_count",
                              "eval_count"}


def test_generate_whole_streamed_and_with_context(client, server) -> None:
    whole = client.generate(model=server.model, prompt=STORY, options=GREEDY)
    assert whole.response and whole.thinking is None
    assert_statistics(whole)
    # context: the prompt's tokens and the answer's
    assert len(whole.context) == whole.prompt_eval_count + whole.eval_count
    parts = list(client.generate(model=server.model, prompt=STORY, options=GREEDY, stream=True))
    assert "".join(part.response for part in parts) == whole.response
    assert parts[-1].context == whole.context and all(part.context is None for part in parts[:-1])
    assert_statistics(parts[-1], whole.prompt_eval_count)
    follow = client.generate(model=server.model, prompt="Again", context=whole.context, options=GREEDY)
    assert follow.context[:len(whole.context)] == whole.context  # the earlier exchange, then the new turn
    assert follow.prompt_eval_count > len(whole.context)
    raw = client.generate(model=server.model, prompt="The sky is", raw=True, options=GREEDY)
    assert raw.response and raw.context is None  # Ollama returns no context for raw prompts
    assert raw.prompt_eval_count < whole.prompt_eval_count  # no template around it


def test_format_schema_gives_matching_json(client, server) -> None:
    schema = {"type": "object", "properties": {"age": {"type": "integer"}, "adult": {"type": "boolean"}},
              "required": ["age", "adult"]}
    # 160 tokens: the schema's grammar allows at most 147 bytes (`longest_sentence`), so the answer
    # ends whatever whitespace the model picks (its choice differs between CPUs)
    answer = client.chat(model=server.model, messages=[{"role": "user", "content": "Ann is 22. Reply in JSON."}],
                         format=schema, options={"temperature": 0, "num_predict": 160})
    assert answer.done_reason == "stop"
    jsonschema.validate(json.loads(answer.message.content), schema)
    closed = {**schema, "additionalProperties": False}
    generated = client.generate(model=server.model, prompt="Ann is 22. Reply in JSON.", format=closed,
                                options={"temperature": 0, "num_predict": 160})
    jsonschema.validate(json.loads(generated.response), closed)
    anything = client.generate(model=server.model, prompt="Reply in JSON.", format="json",
                               options={"temperature": 0, "num_predict": 3})
    assert anything.response.startswith("{")  # json mode: an object, whatever its keys


def said(city: str) -> dict:
    """An earlier answer that called the tool, in the model's own markup: a 135M model calls a tool
    when it has seen itself do so."""
    call = json.dumps({"name": "get_weather", "arguments": {"city": city}})
    return {"role": "assistant", "content": f"<tool_call>\n{call}\n</tool_call>"}


def test_tools_come_back_as_calls_with_argument_objects(client, server) -> None:
    messages = [{"role": "user", "content": "What is the weather in Rome?"}, said("Rome"),
                {"role": "user", "content": "What is the weather in Oslo?"}, said("Oslo"),
                {"role": "user", "content": "What is the weather in Paris?"}]
    # the model repeats its own call markup (large margins: the same text on any CPU); 120 tokens leave
    # room for any whitespace the call grammar allows beside the 31 tokens it takes
    answer = client.chat(model=server.model, messages=messages, tools=[WEATHER],
                         options={"temperature": 0, "num_predict": 120})
    assert answer.message.content == "" and answer.done_reason == "stop"
    [call] = answer.message.tool_calls
    assert (call.function.name, call.function.arguments) == ("get_weather", {"city": "Paris"})
    parts = list(client.chat(model=server.model, messages=messages, tools=[WEATHER],
                             options={"temperature": 0, "num_predict": 120}, stream=True))
    calls = [call for part in parts for call in part.message.tool_calls or []]
    assert [(c.function.name, c.function.arguments) for c in calls] == [("get_weather", {"city": "Paris"})]
    # the call and its result in the history (Ollama's shapes), then an answer in words
    history = [*messages, {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_name": "get_weather", "content": "Rain, 12 C"}]
    after = client.chat(model=server.model, messages=history, tools=[WEATHER], options=GREEDY)
    assert after.done is True and (after.message.content or after.message.tool_calls)


def test_embed_and_embeddings_match_v1(client, server) -> None:
    texts = ["hello there", "the sky is blue"]
    embedded = client.embed(model=server.model, input=texts)
    assert embedded.model == server.model and len(embedded.embeddings) == 2
    assert embedded.prompt_eval_count > 0 and embedded.total_duration > 0 and embedded.load_duration > 0
    v1 = httpx.post(f"{server.v1}/embeddings", json={"model": server.model, "input": texts, "normalize": True},
                    timeout=120).json()
    for ours, reference in zip(embedded.embeddings, v1["data"], strict=True):
        assert np.allclose(ours, reference["embedding"], atol=1e-5)
        assert abs(np.linalg.norm(ours) - 1) < 1e-4  # /api/embed normalises, as Ollama's does
    old = client.embeddings(model=server.model, prompt=texts[0])
    raw = httpx.post(f"{server.v1}/embeddings", json={"model": server.model, "input": texts[0]}, timeout=120).json()
    assert np.allclose(old.embedding, raw["data"][0]["embedding"], atol=1e-5)
    cut = client.embed(model=server.model, input=texts[0], dimensions=8)
    assert len(cut.embeddings[0]) == 8 and abs(np.linalg.norm(cut.embeddings[0]) - 1) < 1e-4


def test_tags_show_ps_and_version(client, server) -> None:
    tags = httpx.get(f"{server.base_url}/api/tags").json()
    [listed] = tags["models"]
    assert listed["name"] == listed["model"] == server.model
    assert listed["size"] > 50_000_000 and len(listed["digest"]) == 64 and listed["modified_at"].endswith("Z")
    assert listed["details"] == {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
                                 "parameter_size": "135M", "quantization_level": "Q4_1"}
    shown = client.show(f"{server.model}:latest")
    assert shown.details.family == "llama" and "{% for message in messages %}" in shown.template
    assert shown.modelinfo["general.architecture"] == "llama" and shown.modelinfo["llama.block_count"] == 30
    assert shown.capabilities == ["completion", "tools"]
    [running] = client.ps().models
    assert running.model == server.model and running.context_length == 1024 and running.size > listed["size"]
    assert running.expires_at.year == 9999  # the command line's model stays loaded
    assert httpx.get(f"{server.base_url}/api/version").json() == {"version": "0.12.0"}
    assert httpx.head(f"{server.base_url}/").status_code == 200
    paths = httpx.get(f"{server.base_url}/openapi.json").json()["paths"]
    assert {"/api/chat", "/api/generate", "/api/embed", "/api/tags", "/api/pull", "/api/delete"} <= set(paths)


@pytest.mark.parametrize(("body", "status", "message"), [
    ({"model": "nope", "messages": ASK}, 404, "model 'nope' not found"),
    ({"model": "{model}", "messages": "hi"}, 400, "messages: Expected `array | null`, got `str`"),
    ({"model": "{model}", "messages": ASK, "stream": False, "options": {"num_gpu": 1}}, 400, "options.num_gpu is a load-time"),
    ({"model": "{model}", "messages": ASK, "options": {"bogus": 1}}, 400, "options.bogus is not an option"),
    ({"model": "{model}", "messages": ASK, "options": {"mirostat": 1}}, 400, "options.mirostat 1 cannot be honoured"),
    ({"model": "{model}", "messages": ASK, "options": {"num_ctx": 8192}}, 400, "options.num_ctx 8192 is more than"),
    ({"model": "{model}", "messages": ASK, "think": True}, 400, "this model's chat template has no reasoning to control"),
    ({"model": "{model}", "messages": ASK, "keep_alive": "soon"}, 400, "keep_alive is a duration"),
    ({"model": "{model}", "messages": [{"role": "user", "content": "What is it?", "images": [PIXEL]}]}, 400,
     "this model does not accept images (serve it with its --mmproj projector): messages[0].images[0] is an image"),
])
def test_chat_errors_in_ollama_shape(server, body, status, message) -> None:
    body = {**body, "model": body["model"].format(model=server.model)}
    response = httpx.post(f"{server.base_url}/api/chat", json=body, timeout=60)
    assert response.status_code == status, response.text
    assert list(response.json()) == ["error"] and response.json()["error"].startswith(message), response.text


@pytest.mark.parametrize(("fields", "message"), [
    ({"template": "{{ .Prompt }}"}, "template cannot apply"),
    ({"suffix": "return x"}, "suffix needs a model trained for fill-in-the-middle"),
    ({"raw": True, "system": "be brief"}, "system cannot apply to a raw prompt"),
    ({"context": [10 ** 6]}, "context holds token id 1000000, outside the vocabulary"),
])
def test_generate_refusals_name_their_reason(client, server, fields, message) -> None:
    with pytest.raises(ollama.ResponseError) as refused:
        client.generate(model=server.model, prompt="x", options=GREEDY, **fields)
    assert refused.value.status_code == 400 and message in refused.value.error


def test_other_dialects_keep_their_error_shape(server) -> None:
    response = httpx.post(f"{server.v1}/chat/completions", json={"model": "nope", "messages": ASK}, timeout=30)
    assert response.status_code == 404 and response.json()["error"]["code"] == "model_not_found"
