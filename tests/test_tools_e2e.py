"""Tool calling end to end on the default model: forced calls always validate; the OpenAI SDK
agent loop (call, tool result, answer) completes."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import jsonschema
import openai
import pytest

from tests.conftest import POOL
from tests.grammar_support import longest_sentence
from tests.schema_corpus.check_corpus import format_checker
from tests.tool_schemas import ASKS, TOOLS

FORMATS = format_checker(jsonschema.Draft202012Validator)
BY_NAME = {tool["function"]["name"]: tool for tool in TOOLS}


@pytest.fixture(scope="module")
def server():
    """Room for 22 tools in the prompt (about 2,000 tokens, prefilled once: every request shares them)."""
    return POOL.get("--ctx-size", "3072", "--parallel", "4")


def ask(server, question: str, **fields) -> dict:
    body = {"model": server.model, "temperature": 0, "max_tokens": 150, "tools": TOOLS,
            "messages": [{"role": "user", "content": question}], **fields}
    response = httpx.post(f"{server.v1}/chat/completions", json=body, timeout=300)
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]


def ask_all(server, requests: list[tuple[str, dict]]) -> list[dict]:
    """The answers to (question, fields) pairs, decoded side by side in one batch; the first alone,
    so that the others start from the tools' prefill it leaves in its slot."""
    first = ask(server, requests[0][0], **requests[0][1])
    with ThreadPoolExecutor(4) as pool:
        return [first, *pool.map(lambda request: ask(server, request[0], **request[1]), requests[1:])]


def valid_call(call: dict, expected: str | None = None) -> None:
    assert call["type"] == "function" and call["id"]
    name = call["function"]["name"]
    assert name in BY_NAME and (expected is None or name == expected)
    arguments = json.loads(call["function"]["arguments"])
    jsonschema.validate(arguments, BY_NAME[name]["function"]["parameters"], format_checker=FORMATS)


# The budget of a forced call: every slot's room beside the tools' 2,050-token prompt. A single call
# to any tool but send_email is at most 772 bytes (its grammar's `longest_sentence`), so it ends
# whatever whitespace and strings the model picks (its choices differ between CPUs); send_email's
# bound (1,127 bytes) is reached only with its strings written all in `\u00XX` escapes.
CALL_BUDGET = 1000


def _whole_json(call: dict) -> bool:
    try:
        json.loads(call["function"]["arguments"])
    except ValueError:
        return False
    return True


# One tool of each kind of parameter the 22 have (their grammars differ only in these): a plain
# string, integer and number ranges, enums, the email, date, time, uri and ipv4 formats, patterns,
# a boolean, an array of enums, an optional property. The other tools repeat these kinds.
EACH_KIND = ("get_weather", "get_forecast", "send_email", "create_event", "convert_currency", "add_todo", "read_file",
             "open_url", "list_files", "create_issue", "ping_host")


def test_required_and_named_calls_always_validate(server) -> None:
    assert len(TOOLS) >= 20  # all of them in the prompt
    # one call each: with parallel calls allowed, a 135M model may go on calling until max_tokens
    # (parallel calls: tests/test_tool_calls.py::test_parallel_calls_only_when_asked)
    named = [(ASKS[name], {"tool_choice": {"type": "function", "function": {"name": name}}, "parallel_tool_calls": False},
              name) for name in EACH_KIND]
    required = [(ASKS[name], {"tool_choice": "required", "parallel_tool_calls": False}, None) for name in list(ASKS)[:2]]
    jobs = [(question, {**fields, "max_tokens": CALL_BUDGET}, name) for question, fields, name in named + required]
    answers = zip(ask_all(server, [(question, fields) for question, fields, _ in jobs]), [job[2] for job in jobs])
    failures = []
    for choice, expected in answers:
        try:
            # "length": the grammar lets parallel calls follow, and a sampled run may spend the
            # rest of max_tokens on the newlines between them; the calls made stand either way
            assert choice["finish_reason"] in ("tool_calls", "length"), choice
            calls = choice["message"]["tool_calls"]
            assert calls, choice
            if choice["finish_reason"] == "length" and len(calls) > 1 and not _whole_json(calls[-1]):
                calls = calls[:-1]  # a parallel call that max_tokens cut: reported as written, partial
            for call in calls:
                valid_call(call, expected)
        except (AssertionError, ValueError, jsonschema.ValidationError) as error:
            failures.append(f"{expected}: {str(error)[:300]}")
    assert not failures, "\n".join(failures)


def test_one_call_when_parallel_calls_are_off(server) -> None:
    choice = ask(server, "Weather in Paris and in Rome?", tool_choice="required", parallel_tool_calls=False,
                 max_tokens=CALL_BUDGET)
    assert choice["finish_reason"] == "tool_calls", choice
    assert len(choice["message"]["tool_calls"]) == 1
    valid_call(choice["message"]["tool_calls"][0])


def test_allowed_tools_restrict_the_call_but_not_the_prompt(server) -> None:
    # one call (set_timer's: at most 241 bytes), so that it ends within max_tokens on any machine
    choice = ask(server, "What's the weather in Paris?", tool_choice={
        "type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
            {"type": "function", "function": {"name": "set_timer"}}]}}, parallel_tool_calls=False, max_tokens=256,
        raw_output=True)
    assert longest_sentence(choice["raw_output"]["grammar"]) <= 256
    assert choice["finish_reason"] == "tool_calls", choice
    valid_call(choice["message"]["tool_calls"][0], "set_timer")


def test_streamed_call_deltas_assemble_into_the_call(server) -> None:
    # a get_weather call is at most 479 bytes: it ends within 512 tokens on any machine
    body = {"model": server.model, "temperature": 0, "max_tokens": 512, "tools": TOOLS, "stream": True,
            "messages": [{"role": "user", "content": ASKS["get_weather"]}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    calls: dict[int, dict] = {}
    finish = None
    with httpx.stream("POST", f"{server.v1}/chat/completions", json=body, timeout=300) as response:
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            for choice in json.loads(line[6:])["choices"]:
                finish = choice["finish_reason"] or finish
                for delta in choice["delta"].get("tool_calls", []):
                    call = calls.setdefault(delta["index"], {"id": None, "type": None, "function": {
                        "name": None, "arguments": ""}})
                    call["id"] = call["id"] or delta.get("id")
                    call["type"] = call["type"] or delta.get("type")
                    call["function"]["name"] = call["function"]["name"] or delta["function"].get("name")
                    call["function"]["arguments"] += delta["function"].get("arguments", "")
    assert finish == "tool_calls" and list(calls) == [0]
    valid_call(calls[0], "get_weather")
    whole = ask(server, ASKS["get_weather"], tool_choice={"type": "function", "function": {"name": "get_weather"}},
                max_tokens=512)
    assert whole["message"]["tool_calls"][0]["function"] == calls[0]["function"]


def test_openai_sdk_agent_loop(server) -> None:
    tools = [BY_NAME["get_weather"]]
    messages: list = [{"role": "user", "content": "What's the weather in Paris?"}]
    with openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0) as client:
        first = client.chat.completions.create(model=server.model, messages=messages, tools=tools,
                                               tool_choice="required", parallel_tool_calls=False,
                                               temperature=0, max_tokens=512)  # the call: <= 479 bytes
        call = first.choices[0].message.tool_calls[0]
        assert first.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
        messages.append(first.choices[0].message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"celsius": 21, "sky": "clear"})})
        answer = client.chat.completions.create(model=server.model, messages=messages, tools=tools,
                                                tool_choice="none", temperature=0, max_tokens=60)
    assert answer.choices[0].finish_reason in ("stop", "length")
    assert answer.choices[0].message.content and not answer.choices[0].message.tool_calls


def test_auto_answers_in_text_or_with_a_valid_call(server) -> None:
    answers = ask_all(server, [(ASKS[name], {"parallel_tool_calls": False, "max_tokens": 60}) for name in list(ASKS)[:8]])
    for choice in answers:  # the 135M model mostly answers in text; whatever it does holds
        message = choice["message"]
        if choice["finish_reason"] == "tool_calls":
            for call in message["tool_calls"]:
                valid_call(call)
        assert "<tool_call>" not in (message["content"] or "")  # an opener is always a (valid) call


ANSWER_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["answer", "confidence"],
                 "properties": {"answer": {"type": "string", "maxLength": 60},
                                "confidence": {"type": "integer", "minimum": 0, "maximum": 100}}}


@pytest.mark.parametrize("question", ["What is the capital of France?", ASKS[next(iter(ASKS))]])
def test_tools_with_a_response_format_answer_in_the_format_or_call(server, question) -> None:
    """tool_choice auto with a response_format: the answer is a valid call, or JSON valid under the
    format's schema (never free text)."""
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER_SCHEMA}}
    # 512 tokens: an answer under ANSWER_SCHEMA (at most 495 bytes) ends on any machine
    fields = {"response_format": fmt, "temperature": 0.8, "max_tokens": 512}
    for choice in ask_all(server, [(question, {**fields, "seed": seed}) for seed in range(3)]):
        if choice["message"].get("tool_calls"):
            # "length": the grammar lets parallel calls follow, and a sampled run may spend the
            # rest of max_tokens on the newlines between them; the calls made stand either way
            assert choice["finish_reason"] in ("tool_calls", "length"), choice
            for call in choice["message"]["tool_calls"]:
                valid_call(call)
        else:
            assert choice["finish_reason"] == "stop", choice
            jsonschema.validate(json.loads(choice["message"]["content"]), ANSWER_SCHEMA)
