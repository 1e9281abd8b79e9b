"""Chat templates rendered the way Hugging Face renders them, in a sandbox: every real template in the
shared fixtures with standard conversations, the features templates rely on, and escape attempts."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from templates.chat_template import CHATML_TEMPLATE, ChatTemplate, TemplateRenderError
from tests.conftest import FIXTURES as FIXTURES_DIR

FIXTURE_DIR = FIXTURES_DIR
FIXTURES = sorted(path.stem for path in FIXTURE_DIR.glob("*.jinja"))

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]

SYSTEM_USER = [
    {"role": "system", "content": "You are a terse assistant."},
    {"role": "user", "content": "Name a prime number."},
]
USER_ONLY = [{"role": "user", "content": "Name a prime number."}]
TOOL_ROUND_TRIP = [
    {"role": "system", "content": "You are a terse assistant."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {
        # app/chat.py hands templates "" for an assistant message without text, as most templates expect.
        "role": "assistant",
        "content": "",
        "reasoning_content": "The user wants the weather; I should call get_weather.",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
    {"role": "user", "content": "And what should I wear?"},
]

# name: (messages, tools)
CONVERSATIONS: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]] | None]] = {
    "system_user": (SYSTEM_USER, None),
    "user_only": (USER_ONLY, None),
    "tool_round_trip": (TOOL_ROUND_TRIP, TOOLS),
}

ALTERNATION = "conversation roles must alternate user"
NEEDS_TOOLS = "'NoneType' object is not iterable"
NEEDS_FUNCTIONS = "'functions' is undefined"

# (fixture, conversation): (raised by the template's raise_exception?, part of the message, why)
EXPECTED_FAILURES: dict[tuple[str, str], tuple[bool, str, str]] = {
    ("google-gemma-2-2b-it", "system_user"): (True, "System role not supported", "Gemma 2 has no system role"),
    ("google-gemma-2-2b-it", "tool_round_trip"): (True, "System role not supported", "Gemma 2 has no system role"),
    ("Mistral-Small-3.2-24B-Instruct-2506", "tool_round_trip"): (
        True, ALTERNATION, "a user message may not follow a tool result without an assistant reply between"),
    ("mistralai-Mistral-Nemo-Instruct-2407", "tool_round_trip"): (
        True, ALTERNATION, "a user message may not follow a tool result without an assistant reply between"),
    ("mistralai-Ministral-3-14B-Reasoning-2512", "tool_round_trip"): (
        True, "roles must alternate user and assistant roles except for tool calls and results",
        "a user message may not follow a tool result without an assistant reply between"),
    # Tool-use variants (a GGUF's `tokenizer.chat_template.tool_use`) are only chosen when there are tools;
    # Hugging Face's renderer fails on them the same way without tools.
    ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "system_user"): (
        False, NEEDS_TOOLS, "tool-use template: iterates `tools`, which is none without tools"),
    ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "user_only"): (
        False, NEEDS_TOOLS, "tool-use template: iterates `tools`, which is none without tools"),
    ("CohereForAI-c4ai-command-r-plus-tool_use", "system_user"): (
        False, NEEDS_TOOLS, "tool-use template: iterates `tools`, which is none without tools"),
    ("CohereForAI-c4ai-command-r-plus-tool_use", "user_only"): (
        False, NEEDS_TOOLS, "tool-use template: iterates `tools`, which is none without tools"),
    ("CohereForAI-c4ai-command-r-plus-tool_use", "tool_round_trip"): (
        False, "has no attribute 'description'", "needs a description on every tool parameter"),
    # llama.cpp renders FireFunction v2 with its own `functions` (the tools as JSON) and `datetime` variables.
    ("fireworks-ai-llama-3-firefunction-v2", "system_user"): (
        False, NEEDS_FUNCTIONS, "needs the `functions` and `datetime` variables"),
    ("fireworks-ai-llama-3-firefunction-v2", "user_only"): (
        False, NEEDS_FUNCTIONS, "needs the `functions` and `datetime` variables"),
    ("fireworks-ai-llama-3-firefunction-v2", "tool_round_trip"): (
        False, NEEDS_FUNCTIONS, "needs the `functions` and `datetime` variables"),
}

_compiled: dict[str, ChatTemplate] = {}


def fixture_template(name: str) -> ChatTemplate:
    template = _compiled.get(name)
    if template is None:
        source = (FIXTURE_DIR / f"{name}.jinja").read_text(encoding="utf-8")
        template = _compiled[name] = ChatTemplate(source, bos_token="<s>", eos_token="</s>")
    return template


def render(source: str, messages: list[dict[str, Any]] | None = None, **variables: Any) -> str:
    template = ChatTemplate(source, bos_token="<s>", eos_token="</s>")
    return template.render(messages if messages is not None else USER_ONLY, **variables)


def assert_in_order(prompt: str, texts: list[str]) -> None:
    start = 0
    for text in texts:
        found = prompt.find(text, start)
        assert found >= 0, f"{text!r} is not in the prompt after position {start}: {prompt!r}"
        start = found + len(text)


def test_the_fixtures_are_there():
    assert len(FIXTURES) >= 50, FIXTURE_DIR
    assert {fixture for fixture, _ in EXPECTED_FAILURES} <= set(FIXTURES)


@pytest.mark.parametrize("conversation", list(CONVERSATIONS))
@pytest.mark.parametrize("fixture", FIXTURES)
def test_fixture_renders_conversation(fixture: str, conversation: str):
    messages, tools = CONVERSATIONS[conversation]
    original = copy.deepcopy(messages)
    template = fixture_template(fixture)
    assert template.compile_error is None
    expected = EXPECTED_FAILURES.get((fixture, conversation))
    if expected is None:
        prompt = template.render(messages, add_generation_prompt=True, tools=tools)
        # Templates differ in how (and whether) they show tool calls and results, but every one
        # that renders a conversation holds each system and user text verbatim, in its order.
        texts = [message["content"] for message in messages if message["role"] in ("system", "user")]
        assert_in_order(prompt, texts)
    else:
        raised_by_template, message, _reason = expected
        with pytest.raises(TemplateRenderError) as failure:
            template.render(messages, add_generation_prompt=True, tools=tools)
        assert message in str(failure.value)
        assert failure.value.raised_by_template is raised_by_template
    assert messages == original  # the caller's conversation is never changed


def test_tool_use_templates_render_with_what_they_need():
    hermes = fixture_template("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use")
    assert "get_weather" in hermes.render(USER_ONLY, tools=TOOLS)

    described = copy.deepcopy(TOOLS)
    described[0]["function"]["parameters"]["properties"]["city"]["description"] = "The city's name."
    command_r = fixture_template("CohereForAI-c4ai-command-r-plus-tool_use")
    prompt = command_r.render(TOOL_ROUND_TRIP, tools=described)
    assert "def get_weather(city: str)" in prompt
    assert "And what should I wear?" in prompt

    firefunction = fixture_template("fireworks-ai-llama-3-firefunction-v2")
    prompt = firefunction.render(
        TOOL_ROUND_TRIP, tools=TOOLS, functions=json.dumps(TOOLS, indent=2), datetime="Jan 01 2026")
    assert "get_weather" in prompt
    assert "And what should I wear?" in prompt


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("Qwen-Qwen3-0.6B", '{"name": "get_weather", "arguments": {"city": "Paris"}}'),  # arguments | tojson
        ("GLM-4.6", "<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>"),  # arguments.items()
        ("Apertus-8B-Instruct", '[{"get_weather": {"city": "Paris"}}]'),  # '...' + arguments + '...'
        ("meetkai-functionary-medium-v3.2", '>>>get_weather\n{"city": "Paris"}'),  # arguments printed
        ("Spark2.5", "<arg_key>city</arg_key><arg_value>Paris</arg_value>"),  # requires a mapping
        ("llama-cpp-deepseek-r1", '```json\n{"city": "Paris"}\n```'),
    ],
)
def test_tool_call_arguments_serve_objects_and_strings(fixture: str, expected: str):
    assert expected in fixture_template(fixture).render(TOOL_ROUND_TRIP, tools=TOOLS)


TOOL_CALL = [
    {"role": "user", "content": "hi"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c", "type": "function",
                        "function": {"name": "f", "arguments": '{"b": 1,  "a": "\\u00e9"}'}}],
    },
]
ARGUMENTS = "{% set arguments = messages[1].tool_calls[0].function.arguments %}"


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("{{ arguments is mapping }}", "True"),
        ("{{ arguments is string }}", "False"),
        ("{% for k, v in arguments.items() %}{{ k }}={{ v }};{% endfor %}", "b=1;a=é;"),
        ("{% for k, v in arguments|dictsort %}{{ k }}={{ v }};{% endfor %}", "a=é;b=1;"),
        ("{{ arguments.b }}", "1"),
        ("{{ arguments|tojson }}", '{"b": 1, "a": "é"}'),
        # as a string it is exactly what the client sent
        ("{{ '<' + arguments + '>' }}", '<{"b": 1,  "a": "\\u00e9"}>'),
        ("{{ '<' ~ arguments ~ '>' }}", '<{"b": 1,  "a": "\\u00e9"}>'),
        ("{{ arguments }}", '{"b": 1,  "a": "\\u00e9"}'),
        ("{{ arguments|string|length }}", "24"),
        ("{{ (arguments|from_json).a }}", "é"),
        # a template that needs the plain string gets it on the second try
        ("{{ arguments.strip()[1:4] }}", '"b"'),
    ],
)
def test_tool_arguments(expression: str, expected: str):
    assert render(ARGUMENTS + expression, TOOL_CALL) == expected


def test_tool_arguments_that_are_not_a_json_object_stay_strings():
    messages = copy.deepcopy(TOOL_CALL)
    for arguments in ("not json", "[1, 2]", '"text"'):
        messages[1]["tool_calls"][0]["function"]["arguments"] = arguments
        assert render(ARGUMENTS + "{{ arguments is string }}:{{ arguments }}", messages) == f"True:{arguments}"


def test_the_template_error_is_reported_when_both_tries_fail():
    with pytest.raises(TemplateRenderError) as failure:
        render(ARGUMENTS + "{% if arguments is mapping %}{{ raise_exception('no mappings') }}{% endif %}"
               "{{ arguments.nope() }}", TOOL_CALL)
    assert str(failure.value) == "no mappings"
    assert failure.value.raised_by_template


@pytest.mark.parametrize(
    "source",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ ''.__class__ }}",
        "{{ messages.__class__ }}",
        "{{ messages['__class__'] }}",
        "{{ messages|attr('__class__') }}",
        "{{ messages|map(attribute='__class__')|list }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ joiner.__init__.__globals__ }}",
        "{{ namespace.__init__ }}",
        "{{ lipsum.__globals__['os'] }}",
        "{{ raise_exception.__globals__ }}",
        "{{ strftime_now.__globals__ }}",
        "{{ self.__dict__ }}",
        "{{ self._TemplateReference__context }}",
        "{{ messages.pop.__self__ }}",
        "{{ messages.__len__() }}",
        "{{ dict.mro() }}",
        "{{ '{0.__class__}'.format('') }}",
        "{{ ''.ljust(1000000000) }}",
        "{{ 'a' * 1000000000 }}",
        "{{ 7 ** 10000000 }}",
        "{% set l = [1] %}{% for x in l %}{% set _ = l.append(x) %}{% endfor %}",
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
    ],
)
def test_escapes_and_exhaustion_fail_the_render(source: str):
    with pytest.raises(TemplateRenderError) as failure:
        render(source)
    assert "unsafe operation" in str(failure.value)
    assert not failure.value.raised_by_template


@pytest.mark.parametrize(
    "source",
    [
        "{{ messages.append({'role': 'user', 'content': 'injected'}) }}",
        "{% set _ = messages.pop() %}",
        "{% set _ = messages[0].update({'content': 'changed'}) %}",
        "{% set _ = messages[1].pop('content') %}",
        "{% set _ = messages[2]['tool_calls'][0].function.arguments.update({'city': 'Rome'}) %}",
        "{% set _ = messages[2].tool_calls.clear() %}",
        "{% set _ = tools[0].function.pop('parameters') %}",
        "{% set _ = extra['items'].append(2) %}",
        "{% for m in messages[1:] %}{% set _ = m.setdefault('name', 'x') %}{% endfor %}",
        "{{ messages|map(attribute='clear')|list }}",
    ],
)
def test_the_requests_data_is_read_only(source: str):
    messages = copy.deepcopy(TOOL_ROUND_TRIP)
    tools = copy.deepcopy(TOOLS)
    extra = {"items": [1]}
    with pytest.raises(TemplateRenderError, match="read-only") as failure:
        render(source, messages, tools=tools, extra=extra)
    assert not failure.value.raised_by_template
    assert messages == TOOL_ROUND_TRIP
    assert tools == TOOLS
    assert extra == {"items": [1]}


def test_a_template_changes_only_its_own_copies():
    messages = copy.deepcopy(TOOL_ROUND_TRIP)
    tools = copy.deepcopy(TOOLS)
    source = (
        "{% set own = messages|list %}{% set _ = own.append({'role': 'user', 'content': 'injected'}) %}"
        "{% set rest = messages[1:] %}{% set _ = rest.pop() %}"
        "{% set first = dict(messages[0]) %}{% set _ = first.update({'content': 'changed'}) %}"
        "{% set arguments = messages[2].tool_calls[0].function.arguments.copy() %}"
        "{% set _ = arguments.update({'city': 'Rome'}) %}"
        "{% set names = tools|map(attribute='function')|map(attribute='name')|list %}{% set _ = names.clear() %}"
        "{{ own|length }} {{ rest|length }} {{ first.content }} {{ arguments.city }} {{ names|length }}"
        " {{ messages|length }} {{ messages[0].content }} {{ messages[2].tool_calls[0].function.arguments.city }}"
    )
    expected = "6 3 changed Rome 0 5 You are a terse assistant. Paris"
    assert render(source, messages, tools=tools) == expected
    assert render(source, messages, tools=tools) == expected  # the compiled template keeps no state
    assert messages == TOOL_ROUND_TRIP
    assert tools == TOOLS


def test_lists_the_template_builds_can_change():
    source = (
        "{% set names = [] %}{% for m in messages %}{% set _ = names.append(m.role) %}{% endfor %}"
        "{% set _ = names.extend(['x', 'y']) %}{% set last = names.pop() %}{% set _ = names.insert(0, 'first') %}"
        "{% set d = {} %}{% set _ = d.update({'k': 1}) %}{% set _ = d.setdefault('j', 2) %}"
        "{{ names|join(',') }} {{ last }} {{ d|tojson }}"
    )
    assert render(source, SYSTEM_USER) == 'first,system,user,x y {"k": 1, "j": 2}'


def test_generation_block_renders_its_body():
    source = (
        "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}[{{ m.content }}]{% endgeneration %}"
        "{% else %}{{ m.content }}{% endif %}{% endfor %}"
    )
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert render(source, messages) == "hi[hello]"


def test_from_json():
    assert render("{% set x = '{\"a\": [1, 2], \"b\": null}' | from_json %}{{ x.a[1] }} {{ x.b is none }}") == "2 True"
    assert render("{{ ('[3, 4]' | from_json)|sum }}") == "7"


def test_tojson_keywords_and_no_html_escaping():
    data = "{% set d = {'b': 1, 'a': ['<é>', \"it's & done\"]} %}"
    assert render(data + "{{ d|tojson }}") == '{"b": 1, "a": ["<é>", "it\'s & done"]}'
    assert render(data + "{{ d|tojson(ensure_ascii=True) }}") == '{"b": 1, "a": ["<\\u00e9>", "it\'s & done"]}'
    assert render(data + "{{ d|tojson(sort_keys=True) }}") == '{"a": ["<é>", "it\'s & done"], "b": 1}'
    assert render(data + "{{ d|tojson(separators=(',', ':')) }}") == '{"b":1,"a":["<é>","it\'s & done"]}'
    assert render("{{ {'a': 1}|tojson(indent=2) }}") == '{\n  "a": 1\n}'
    assert render("{{ tools|map(attribute='function')|map(attribute='name')|tojson }}", tools=TOOLS) == '["get_weather"]'


def test_loop_controls_and_namespace():
    source = (
        "{% set ns = namespace(count=0, seen='') %}"
        "{% for i in range(10) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}"
        "{% set ns.count = ns.count + 1 %}{% set ns.seen = ns.seen ~ i %}{% endfor %}"
        "{{ ns.count }}:{{ ns.seen }}"
    )
    assert render(source) == "3:023"


def test_string_and_dict_methods():
    source = (
        "{% set text = '\\n  <think>x</think>answer  ' %}"
        "{{ text.lstrip('\\n').startswith('  <think>') }} {{ text.split('</think>')[-1].strip() }} "
        "{{ text.strip().endswith('answer') }} {{ 'a-b'.replace('-', '+').upper() }} "
        "{% for k, v in {'x': 1}.items() %}{{ k }}{{ v }}{% endfor %} {{ {'y': 2}.get('y') }}"
    )
    assert render(source) == "True answer True A+B x1 2"


def test_globals_and_variables():
    source = (
        "{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ tools is none }}|{{ documents is none }}"
        "|{{ enable_thinking }}|{{ strftime_now('%Y') | length }}"
    )
    template = ChatTemplate(source, bos_token="<s>", eos_token="</s>")
    assert template.render(USER_ONLY, enable_thinking=False) == "<s>|</s>|True|True|True|False|4"
    assert template.render(USER_ONLY, add_generation_prompt=False, enable_thinking=True).startswith("<s>|</s>|False")


def test_trim_and_lstrip_blocks_like_hugging_face():
    source = "{% for m in messages %}\n    {% if m.role == 'user' %}\n[{{ m.content }}]\n    {% endif %}\n{% endfor %}"
    assert render(source) == "[Name a prime number.]\n"


def test_raise_exception_carries_the_templates_message():
    with pytest.raises(TemplateRenderError) as failure:
        render("{% if messages[0].role != 'system' %}{{ raise_exception('A system message comes first.') }}{% endif %}")
    assert str(failure.value) == "A system message comes first."
    assert failure.value.raised_by_template


def test_other_failures_are_template_render_errors():
    with pytest.raises(TemplateRenderError, match="the chat template failed"):
        render("{{ messages[0].content + 1 }}")
    with pytest.raises(TemplateRenderError, match="the chat template failed"):
        render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}")  # unbounded recursion
    broken = ChatTemplate("{% for m in messages %}", bos_token="", eos_token="")
    assert broken.compile_error is not None
    with pytest.raises(TemplateRenderError, match="does not compile"):
        broken.render(USER_ONLY)


def test_chatml_fallback():
    prompt = ChatTemplate(CHATML_TEMPLATE, bos_token="", eos_token="").render(SYSTEM_USER, add_generation_prompt=True)
    assert prompt == (
        "<|im_start|>system\nYou are a terse assistant.<|im_end|>\n"
        "<|im_start|>user\nName a prime number.<|im_end|>\n<|im_start|>assistant\n"
    )
