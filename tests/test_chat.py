"""POST /v1/chat/completions on the real model over real HTTP."""

from __future__ import annotations

import pytest

from tests.fireworks_shapes import IM_END, IM_START
from tests.test_completions import sse_events

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
# QUESTION through SmolLM2's own template, which adds its default system prompt
RENDERED = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
)


def chat(http, model: str, **fields):
    return http.post("/v1/chat/completions", json={"model": model, **fields})


def test_chat_answers_with_an_assistant_message(http, server):
    response = chat(http, server.model, messages=QUESTION, max_tokens=30, temperature=0)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    [choice] = body["choices"]
    assert choice["message"]["role"] == "assistant"
    same_prompt = http.post("/v1/completions", json={
        "model": server.model, "prompt": RENDERED, "max_tokens": 30, "temperature": 0}).json()
    assert choice["message"]["content"] == same_prompt["choices"][0]["text"]
    assert body["usage"]["prompt_tokens"] == same_prompt["usage"]["prompt_tokens"]
    assert choice["finish_reason"] in ("stop", "length")
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]


def test_prompt_is_the_models_own_template(http, server):
    # SmolLM2's template adds its default system prompt when none is given: the prompt grows by it
    bare = chat(http, server.model, messages=QUESTION, max_tokens=1).json()["usage"]["prompt_tokens"]
    with_system = chat(http, server.model, max_tokens=1, messages=[
        {"role": "system", "content": "Be brief."}, *QUESTION,
    ]).json()["usage"]["prompt_tokens"]
    assert bare > with_system  # the default system text is longer than "Be brief."
    # rendered ChatML: <|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n...<|im_end|>\n<|im_start|>assistant\n
    completion_tokens = http.post("/v1/completions", json={
        "model": server.model, "max_tokens": 1,
        "prompt": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is the capital of France?"
                  "<|im_end|>\n<|im_start|>assistant\n",
    }).json()["usage"]["prompt_tokens"]
    assert with_system == completion_tokens


def test_text_parts_are_joined(http, server):
    parts = [{"type": "text", "text": "What is the capital"}, {"type": "text", "text": "of France?"}]
    as_parts = chat(http, server.model, messages=[{"role": "user", "content": parts}], max_tokens=8, temperature=0)
    as_text = chat(http, server.model, messages=[{"role": "user", "content": "What is the capital\nof France?"}],
                   max_tokens=8, temperature=0)
    assert as_parts.status_code == 200, as_parts.text
    assert as_parts.json()["choices"][0]["message"] == as_text.json()["choices"][0]["message"]


def test_all_roles_render(http, server):
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 2, \"b\": 2}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "4"},
        {"role": "assistant", "content": "It is 4."},
        {"role": "user", "content": "And 3+3?"},
    ]
    response = chat(http, server.model, messages=messages, max_tokens=5, raw_output=True)
    assert response.status_code == 200, response.text
    # SmolLM2's template, by hand: each message as <|im_start|>{role}\n{content}<|im_end|>\n, no default system
    # prompt when the first message is one, and nothing of the tool call but the assistant turn it was in.
    turns = ["system\nYou are terse.", "user\nWhat is 2+2?", "assistant\n", "tool\n4", "assistant\nIt is 4.",
             "user\nAnd 3+3?"]
    expected = [part for turn in turns for part in (IM_START, turn, IM_END, "\n")] + [IM_START, "assistant\n"]
    assert response.json()["choices"][0]["raw_output"]["prompt_fragments"] == expected


def test_unknown_role_is_400(http, server):
    response = chat(http, server.model, messages=[{"role": "wizard", "content": "hi"}])
    assert response.status_code == 400
    assert "wizard" in response.json()["error"]["message"]


def test_image_parts_on_a_text_only_model_are_400(http, server):
    content = [{"type": "text", "text": "What is this?"},
               {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    response = chat(http, server.model, messages=[{"role": "user", "content": content}])
    assert response.status_code == 400
    assert response.json()["error"]["message"] == ("this model does not accept images (serve it with its --mmproj "
                                                   "projector): messages[0].content[1] is an image")


def test_messages_are_required(http, server):
    response = chat(http, server.model, max_tokens=2)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "messages"
    assert chat(http, server.model, messages=[]).status_code == 400


def test_chat_seed_and_n(http, server):
    fields = dict(messages=QUESTION, max_tokens=12, temperature=1.0, seed=42, n=3)
    first = chat(http, server.model, **fields).json()
    second = chat(http, server.model, **fields).json()
    assert [c["index"] for c in first["choices"]] == [0, 1, 2]
    assert [c["message"]["content"] for c in first["choices"]] == [c["message"]["content"] for c in second["choices"]]


def test_chat_stop_sequence(http, server):
    # ignore_eos: 30 tokens (at least 7 characters) whenever this machine's model would end its answer
    full = chat(http, server.model, messages=QUESTION, max_tokens=30, temperature=0, ignore_eos=True).json()
    text = full["choices"][0]["message"]["content"]
    stop = text[3:7]
    cut = chat(http, server.model, messages=QUESTION, max_tokens=30, temperature=0, ignore_eos=True, stop=stop).json()
    assert cut["choices"][0]["message"]["content"] == text[: text.index(stop)]
    assert cut["choices"][0]["finish_reason"] == "stop"


def test_chat_stream_starts_with_role_and_ends_with_usage(http, server):
    with http.stream("POST", "/v1/chat/completions", json={
        "model": server.model, "messages": QUESTION, "max_tokens": 20, "temperature": 0, "stream": True,
    }) as response:
        events = sse_events(response)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] >= 1
    finishes = [c["choices"][0]["finish_reason"] for c in chunks[:-1] if c["choices"][0]["finish_reason"]]
    assert len(finishes) == 1
    streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1])
    whole = chat(http, server.model, messages=QUESTION, max_tokens=20, temperature=0).json()
    assert streamed == whole["choices"][0]["message"]["content"]


@pytest.mark.parametrize("tool_choice", ["auto", "none"])
def test_tool_choice_without_tools_is_a_no_op(http, server, tool_choice):
    response = chat(http, server.model, messages=QUESTION, max_tokens=8, temperature=0, tool_choice=tool_choice)
    assert response.status_code == 200, response.text
    plain = chat(http, server.model, messages=QUESTION, max_tokens=8, temperature=0).json()
    [choice] = response.json()["choices"]
    assert "tool_calls" not in choice["message"]
    assert choice["message"] == plain["choices"][0]["message"] and choice["message"]["content"]
    assert choice["finish_reason"] == plain["choices"][0]["finish_reason"]
