"""Reasoning end to end: the default model's weights under reasoning families' templates.

One GGUF is rewritten with the `gguf` package to carry DeepSeek-R1's template (its generation
prompt opens `<think>`), one served with `--chat-template` Qwen3's, one with GPT-OSS's. The tiny
model never closes a think block by itself, which makes the budget's forced closing visible.
"""

from __future__ import annotations

import json

import httpx
import pytest

from templates.reasoning import DEFAULT_BUDGET_END
from tests.built import with_template
from tests.cli_runner import run_cli
from tests.conftest import GPT_OSS, POOL, QWEN3, R1, TWO_SLOTS
from tests.grammar_support import longest_sentence

ASK = [{"role": "user", "content": "Why is the sky blue?"}]


@pytest.fixture(scope="module")
def r1_gguf(model_path):
    return with_template(model_path, R1)


@pytest.fixture(scope="module")
def reasoning_server(r1_gguf, model_path):
    return POOL.get("--model", str(r1_gguf), "--alias", "r1",
                    "--model", str(model_path), "--alias", "qwen3", "--chat-template", str(QWEN3),
                    "--model", str(model_path), "--alias", "gpt-oss", "--chat-template", str(GPT_OSS), *TWO_SLOTS)


def chat(server, model: str, **fields) -> httpx.Response:
    body = {"model": model, "messages": ASK, "temperature": 0, "max_tokens": 40, **fields}
    return httpx.post(f"{server.v1}/chat/completions", json=body, timeout=120)


def streamed(server, model: str, **fields) -> tuple[str, str, str]:
    body = {"model": model, "messages": ASK, "temperature": 0, "max_tokens": 40, "stream": True, **fields}
    reasoning, content, finish = "", "", ""
    with httpx.stream("POST", f"{server.v1}/chat/completions", json=body, timeout=120) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    reasoning += choice["delta"].get("reasoning_content", "")
                    content += choice["delta"].get("content", "")
                    finish = choice["finish_reason"] or finish
    return reasoning, content, finish


def test_open_think_block_comes_back_as_reasoning(reasoning_server) -> None:
    # ignore_eos: 40 tokens on any machine (where this model would end its answer is its own)
    message = chat(reasoning_server, "r1", ignore_eos=True).json()["choices"][0]["message"]
    assert message["reasoning_content"] and message["content"] == ""  # never closed: all of it is reasoning
    reasoning, content, finish = streamed(reasoning_server, "r1", ignore_eos=True)
    assert (reasoning, content, finish) == (message["reasoning_content"], "", "length")


def test_a_spent_budget_closes_reasoning_and_the_answer_follows(reasoning_server) -> None:
    message = chat(reasoning_server, "r1", reasoning_effort=12).json()["choices"][0]["message"]
    assert message["reasoning_content"].endswith(DEFAULT_BUDGET_END.strip())
    assert message["content"] and "</think>" not in message["content"] + message["reasoning_content"]
    reasoning, content, _ = streamed(reasoning_server, "r1", reasoning_effort=12)
    assert (reasoning, content) == (message["reasoning_content"], message["content"])


def test_an_empty_bridge_closes_at_once(reasoning_server) -> None:
    response = chat(reasoning_server, "r1", reasoning_effort=12, thinking={"type": "enabled", "budget_end_str": ""})
    assert response.status_code == 200, response.text
    message = response.json()["choices"][0]["message"]
    assert message["reasoning_content"] and message["content"]
    assert "Considering" not in message["reasoning_content"]


def test_budget_tokens_below_1024_is_400(reasoning_server) -> None:
    response = chat(reasoning_server, "r1", thinking={"type": "enabled", "budget_tokens": 100})
    assert response.status_code == 400 and "1024" in response.json()["error"]["message"]


def test_qwen3_switches_thinking_off_in_the_prompt(reasoning_server) -> None:
    off = chat(reasoning_server, "qwen3", reasoning_effort="none").json()["choices"][0]["message"]
    assert off["content"] and "reasoning_content" not in off
    reasoning, content, _ = streamed(reasoning_server, "qwen3", reasoning_effort=False)
    assert (reasoning, content) == ("", off["content"])


def test_gpt_oss_refuses_none_in_the_specs_words(reasoning_server) -> None:
    response = chat(reasoning_server, "gpt-oss", reasoning_effort="none")
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith("Invalid reasoning effort: none")
    assert chat(reasoning_server, "gpt-oss", reasoning_effort="high").status_code == 200


def test_template_render_and_parse_commands(tmp_path, r1_gguf) -> None:
    messages = tmp_path / "messages.json"
    messages.write_text(json.dumps(ASK))
    for template in (R1, r1_gguf):
        rendered = run_cli("template", "render", "--template", str(template), "--messages", str(messages))
        assert rendered.returncode == 0, rendered.stderr
        assert "Why is the sky blue?" in rendered.stdout and rendered.stdout.endswith("<think>\n")
    completion = tmp_path / "completion.txt"
    completion.write_text("Light scatters.\n</think>\n\nRayleigh scattering.")
    parsed = run_cli("template", "parse", "--template", str(R1), "--completion", str(completion))
    assert parsed.returncode == 0, parsed.stderr
    message = json.loads(parsed.stdout)
    assert message["reasoning_content"] == "Light scatters." and message["content"] == "Rayleigh scattering."
    refused = run_cli("template", "render", "--template", str(GPT_OSS), "--messages", str(messages),
                      "--reasoning-effort", "none")
    assert refused.returncode == 1 and "Invalid reasoning effort: none" in refused.stderr
    assert refused.stderr.startswith("fireside template: ") and refused.stdout == ""


PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}}, "required": ["name"],
          "additionalProperties": False}
AS_JSON = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
# Budgets that hold the longest answer the grammars allow (`longest_sentence`: 194 bytes for PERSON,
# 269 for the GPT-OSS call), after a 12-token reasoning budget and its ~18-token closing where there is
# one: the answer ends whatever whitespace the model picks (its choice differs between CPUs).
STRUCTURED_BUDGET = 256


def test_structured_answer_after_reasoning_the_prompt_opened(reasoning_server) -> None:
    choice = chat(reasoning_server, "r1", reasoning_effort=12, response_format=AS_JSON, max_tokens=STRUCTURED_BUDGET,
                  messages=[{"role": "user", "content": "Name a person, as JSON."}]).json()["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    assert choice["message"]["reasoning_content"]
    assert json.loads(choice["message"]["content"]).keys() == {"name"}


def test_structured_answer_where_reasoning_is_optional(reasoning_server) -> None:
    for effort in ("medium", "none"):
        choice = chat(reasoning_server, "qwen3", reasoning_effort=effort, response_format=AS_JSON,
                      max_tokens=STRUCTURED_BUDGET, raw_output=True,
                      messages=[{"role": "user", "content": "Name a person, as JSON."}]).json()["choices"][0]
        assert longest_sentence(choice["raw_output"]["grammar"]) <= STRUCTURED_BUDGET
        assert choice["finish_reason"] == "stop", choice
        assert json.loads(choice["message"]["content"]).keys() == {"name"}


def test_forced_tool_call_in_gpt_oss_commentary_channel(reasoning_server) -> None:
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather now", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"],
        "additionalProperties": False}}}
    choice = chat(reasoning_server, "gpt-oss", tools=[tool], tool_choice="required", parallel_tool_calls=False,
                  max_tokens=STRUCTURED_BUDGET + 32, raw_output=True,
                  messages=[{"role": "user", "content": "Weather in Paris?"}]).json()["choices"][0]
    assert longest_sentence(choice["raw_output"]["grammar"]) <= STRUCTURED_BUDGET + 32
    assert choice["finish_reason"] == "tool_calls", choice
    [call] = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather" and json.loads(call["function"]["arguments"]).keys() == {"city"}
