"""Recognition from cues: families and call syntaxes Fireside has never seen.

Three kinds of evidence that the rules generalise rather than memorise:
- the cue rules alone (no registry signature) rebuild the hand-written entries of the fixtures'
  families: the same markers, the same switch, the same parse of every recorded output;
- variants made from known templates (renamed markup, reordered parts, a thinking block added,
  call markers removed) are still read right;
- the held-out templates in `fixtures/chat-templates-unseen/` (see `test_unseen_templates.py`),
  gathered after the rules were written.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from templates.chat_format import ChatFormat, recognise_family
from templates.chat_template import CHATML_TEMPLATE
from templates.cues import ModelCues, family_from_cues
from templates.families import (
    GENERIC,
    REASONING_PAIRS,
    REGISTRY,
    ChatFamily,
    family_named,
)
from templates.reasoning import ReasoningError, ReasoningRequest, normalize_reasoning
from templates.tool_calls import GENERIC as GENERIC_CALLS
from templates.tool_calls import tool_syntax_for, tool_syntax_named
from tests.cli_runner import CliResult, run_cli
from tests.conftest import FIXTURES
from tests.test_families import FIXTURE_FAMILIES
from tests.test_tool_calls import CANONICAL, TOOLS
from tests.vocab_gguf import vocab_gguf

OUTPUTS = Path(__file__).parent / "reasoning_outputs"
WEATHER = {"city": "Paris", "days": 3, "unit": "celsius"}
NONE = ReasoningRequest(effort="none")


def source(fixture: str) -> str:
    return (FIXTURES / fixture).read_text(encoding="utf-8")


def parse(family: ChatFamily, prompt: str, output: str, *, chunk: int | None = None) -> tuple[str, str]:
    """(reasoning, content) of `output`, fed whole or `chunk` characters at a time."""
    parser = family.parser(prompt)
    pieces = [output] if chunk is None else [output[i:i + chunk] for i in range(0, len(output), chunk)]
    events = [e for piece in pieces for e in parser.feed(piece)] + parser.finish()
    return ("".join(t for k, t in events if k == "reasoning"), "".join(t for k, t in events if k == "content"))


# ------------------------------------------------------------------ the cue rules rebuild the registry's entries

PAIR_FIXTURES = sorted(
    fixture for fixture, name in FIXTURE_FAMILIES.items()
    if name != "generic" and (family_named(name).reasoning_start, family_named(name).reasoning_end) in REASONING_PAIRS)
# Where a family's entry does more than its cues show: Laguna's answers end with `</assistant>`,
# text its template writes as ordinary markup, not as a reasoning or answer marker.
PARSE_EXCEPTIONS = {"poolside-Laguna-S-2.1.jinja", "poolside-Laguna-XS.2.jinja"}
# Templates that never show their model's reasoning markers: the vocabulary's special tokens speak.
SILENT = {"MiMo-VL.jinja", "MiniMax-M1.jinja", "tencent-Hy3.jinja"}


def test_most_reasoning_fixtures_are_covered() -> None:
    reasoning = [f for f, name in FIXTURE_FAMILIES.items() if name != "generic" and family_named(name).reasons]
    assert len(PAIR_FIXTURES) >= 0.75 * len(reasoning), PAIR_FIXTURES


@pytest.mark.parametrize("fixture", PAIR_FIXTURES)
def test_cues_alone_rebuild_the_family(fixture: str) -> None:
    registered = family_named(FIXTURE_FAMILIES[fixture])
    derived = family_from_cues(ModelCues(source(fixture)))
    assert (derived is None) == (fixture in SILENT)
    if derived is None:
        markers = frozenset({registered.reasoning_start or "", registered.reasoning_end or ""})
        derived = family_from_cues(ModelCues(source(fixture), markers, markers))
        assert derived is not None
    assert (derived.reasoning_start, derived.reasoning_end) == (registered.reasoning_start, registered.reasoning_end)
    # the switch: every on/off variable the template reads and the entry sets for "none" is set the same way
    read = ModelCues(source(fixture)).variables
    wanted = {k: v for k, v in registered.variables("none", NONE).items() if isinstance(v, bool) and k in read}
    got = derived.variables("none", NONE)
    assert {k: got.get(k) for k in wanted} == wanted
    if fixture in PARSE_EXCEPTIONS:
        return
    for case in json.loads((OUTPUTS / f"{registered.name}.json").read_text(encoding="utf-8"))["cases"]:
        expected = (case["reasoning"], case["content"])
        assert parse(derived, case["prompt"], case["output"]) == expected, case["name"]
        assert parse(derived, case["prompt"], case["output"], chunk=3) == expected, case["name"]


def test_a_family_without_a_switch_gets_an_empty_block_for_none() -> None:
    chat = ChatFormat(source("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja"), bos_token="", eos_token="")
    derived = family_from_cues(ModelCues(chat.template.source))
    assert derived is not None and derived.empty_block_for_none
    messages = [{"role": "user", "content": "Hi"}]
    prompt = chat.template.render(messages, add_generation_prompt=True)
    assert prompt.endswith("<think>\n")  # the template opens the block itself
    assert derived.finish_prompt(prompt, NONE) == prompt + "</think>\n\n"
    assert derived.finish_prompt(prompt, ReasoningRequest(effort="high")) == prompt


# ------------------------------------------------------------------------------- variants of known templates

_MARKUP = re.compile(r"<\|[A-Za-z_]+\|>|<｜[^｜]+｜>|<(?:start|end)_of_turn>|\[gMASK\]<sop>")


def renamed(template: str) -> str:
    """The template with its role and turn markup renamed (`<|im_start|>` -> `<|im_start_v2|>`),
    reasoning markers and switches left as they are: a sibling release with new special tokens."""
    keep = {marker for pair in REASONING_PAIRS for marker in pair}
    return _MARKUP.sub(lambda m: m.group(0) if m.group(0) in keep else m.group(0)[:-2] + "_v2" + m.group(0)[-2:],
                       template)


RENAMABLE = [f for f in PAIR_FIXTURES if _MARKUP.search(source(f))]


@pytest.mark.parametrize("fixture", RENAMABLE)
def test_renamed_markup_keeps_the_reasoning(fixture: str) -> None:
    registered = family_named(FIXTURE_FAMILIES[fixture])
    family = recognise_family(ModelCues(renamed(source(fixture))))
    assert family.reasons, family.name
    assert (family.reasoning_start, family.reasoning_end) == (registered.reasoning_start, registered.reasoning_end)
    reasoning, content = parse(family, "", f"{family.reasoning_start}Check Rome.{family.reasoning_end}Sunny.")
    assert (reasoning, content) == ("Check Rome.", "Sunny.")


def kimi_k2_thinking() -> str:
    """Kimi K2 Instruct's template with a thinking block rendered before each assistant answer,
    as Kimi K2 Thinking's template does (the registry knows K2 only as a model without reasoning)."""
    template = source("Kimi-K2-Instruct.jinja")
    marker = "<|im_assistant|>{{role_name}}<|im_middle|>"
    assert marker in template
    thinking = marker + "<think>{{ message.get('reasoning_content') or '' }}</think>"
    return template.replace(marker, thinking, 1)


def test_kimi_k2_thinking_reasons_and_keeps_its_calls() -> None:
    chat = ChatFormat(kimi_k2_thinking(), bos_token="", eos_token="")
    assert chat.family.reasons and chat.tool_syntax.name == "kimi-k2"
    prompt = chat.render([{"role": "user", "content": "Weather in Rome?"}])
    message = chat.parse(prompt, "<think>Check Rome.</think>It is sunny.")
    assert (message["reasoning_content"], message["content"]) == ("Check Rome.", "It is sunny.")
    call = ('<think>Use the tool.</think><|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0'
            '<|tool_call_argument_begin|>{"city": "Rome"}<|tool_call_end|><|tool_calls_section_end|>')
    message = chat.parse(prompt, call, {"get_weather"})
    assert message["reasoning_content"] == "Use the tool."
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]
    # no switch in the template: effort "none" writes an empty block; the past reasoning is shown
    assert chat.render([{"role": "user", "content": "Hi"}], normalize_reasoning("none", None, None)).endswith(
        "<|im_middle|><think>\n</think>\n\n")
    history = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello", "reasoning_content": "Greet."},
               {"role": "user", "content": "Bye"}]
    assert "<think>Greet.</think>Hello" in chat.render(history)


def qwen3_reordered() -> str:
    """Qwen3's template with renamed turn markup and its tools section moved after the system
    prompt's text into a block of its own: nothing of the registry's signature is left."""
    template = renamed(source("Qwen-Qwen3-0.6B.jinja"))
    return template.replace("enable_thinking is defined and enable_thinking is false",
                            "enable_thinking is false and enable_thinking is defined")


def test_reordered_qwen3_keeps_its_switch() -> None:
    chat = ChatFormat(qwen3_reordered(), bos_token="", eos_token="")
    assert chat.family.name != "qwen3" and chat.family.reasons
    messages = [{"role": "user", "content": "Hi"}]
    off = chat.render(messages, normalize_reasoning("none", None, None))
    assert off.endswith("<think>\n\n</think>\n\n"), off[-60:]  # the template's own switch did it
    assert not chat.render(messages, normalize_reasoning("high", None, None)).endswith("</think>\n\n")
    assert chat.tool_syntax.name == "hermes"  # `<tool_call>` is still in its text


LFM_INSTRUCT = (
    "{{- bos_token -}}{%- for message in messages -%}{{- '<|im_start|>' + message.role + '\n' -}}"
    "{%- if message.role == 'system' and tools -%}{{- 'List of tools: ' + (tools | tojson) + '\n' -}}{%- endif -%}"
    "{{- message.content + '<|im_end|>\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}")
"""An LFM2.5 Instruct-style template: tools listed as `List of tools: [...]`, no call markers."""
LFM_CALL = '<|tool_call_start|>[get_weather(city="Rome")]<|tool_call_end|>'


def test_template_without_call_markers_reads_every_common_syntax() -> None:
    chat = ChatFormat(LFM_INSTRUCT, bos_token="<|startoftext|>", eos_token="<|im_end|>")
    assert chat.tool_syntax is GENERIC_CALLS
    prompt = chat.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Rome?"}],
                         tools=TOOLS)
    assert "List of tools: [" in prompt
    message = chat.parse(prompt, f"Checking. {LFM_CALL}", {"get_weather"})
    assert message["content"] == "Checking."
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]] == [
        ("get_weather", {"city": "Rome"})]


# -------------------------------------------------------------------------------- the vocabulary's cues

@pytest.mark.parametrize(("token", "syntax"), [
    ("<|tool_call_start|>", "lfm2"), ("[TOOL_CALLS]", "mistral"), ("<|python_tag|>", "llama3"),
    ("<|tool_calls_section_begin|>", "kimi-k2"), ("<｜tool▁calls▁begin｜>", "deepseek-v3.1"), ("<tool_call>", "hermes"),
    ("<|tool_call>", "gemma-4"), ("<|START_ACTION|>", "cohere-action"),
])
def test_a_silent_template_takes_the_syntax_its_vocabulary_opens(token: str, syntax: str) -> None:
    assert tool_syntax_for(CHATML_TEMPLATE, frozenset({token, "<|im_start|>"})).name == syntax
    assert tool_syntax_for(CHATML_TEMPLATE, frozenset({"<|im_start|>"})) is GENERIC_CALLS


def test_the_template_speaks_before_the_vocabulary() -> None:
    qwen = source("Qwen3-Coder.jinja")
    assert tool_syntax_for(qwen, frozenset({"[TOOL_CALLS]"})).name == "qwen3-coder"
    assert recognise_family(ModelCues(source("Qwen-Qwen3-0.6B.jinja"), frozenset({"[THINK]", "[/THINK]"}))).name == "qwen3"


def test_reasoning_tokens_in_the_vocabulary_make_a_silent_template_reason() -> None:
    tokens = frozenset({"<think>", "</think>", "<|im_start|>", "<|im_end|>"})
    chat = ChatFormat(CHATML_TEMPLATE, bos_token="", eos_token="", special_tokens=tokens, control_tokens=tokens)
    assert chat.family.reasons and chat.family.special_markers  # the engine must render the control tokens
    messages = [{"role": "user", "content": "Hi"}]
    assert chat.render(messages, normalize_reasoning("none", None, None)).endswith(
        "<|im_start|>assistant\n<think>\n</think>\n\n")
    prompt = chat.render(messages)
    assert chat.parse(prompt, "<think>Greet back.</think>Hello!")["reasoning_content"] == "Greet back."
    assert chat.reasoning_budget(prompt, normalize_reasoning(2048, None, None)) is not None
    # the same markers as plain text (not special tokens): parsed, and the engine keeps special tokens hidden
    plain = ChatFormat(CHATML_TEMPLATE, bos_token="", eos_token="", special_tokens=tokens,
                       control_tokens=frozenset({"<|im_start|>", "<|im_end|>"}))
    assert plain.family.reasons and not plain.family.special_markers


# ------------------------------------------------------------------------------------ the generic fallback

@pytest.mark.parametrize(("start", "end"), REASONING_PAIRS)
def test_generic_reads_every_common_reasoning_pair(start: str, end: str) -> None:
    output = f"\n{start}\nThe user greets me.\n{end}\n\nHello!"
    for chunk in (None, 1, 4):
        assert parse(GENERIC, "<|im_start|>assistant\n", output, chunk=chunk) == ("The user greets me.", "Hello!")
    # a prompt that opened the block
    assert parse(GENERIC, f"assistant\n{start}\n", f"Greet.{end}Hello!") == ("Greet.", "Hello!")


@pytest.mark.parametrize("output", [" Hello <think>x</think>\n", "Use <think> tags.", "<thin", "", "[THINKING] no"])
def test_generic_leaves_other_output_unchanged(output: str) -> None:
    for chunk in (None, 1):
        assert parse(GENERIC, "", output, chunk=chunk) == ("", output)


def test_generic_refuses_reasoning_controls() -> None:
    chat = ChatFormat(CHATML_TEMPLATE, bos_token="", eos_token="")
    assert chat.family is GENERIC and not chat.family.reasons
    messages = [{"role": "user", "content": "Hi"}]
    for effort in ("high", 2048):
        with pytest.raises(ReasoningError, match="no reasoning to control"):
            chat.render(messages, normalize_reasoning(effort, None, None))
    assert chat.render(messages, normalize_reasoning("none", None, None)) == chat.render(messages)


GENERIC_SAMPLES = sorted(m.name for m in GENERIC_CALLS.members if m.name in CANONICAL and m.name != "llama3")


def test_generic_members_cover_the_common_syntaxes() -> None:
    assert {"hermes", "qwen3-coder", "lfm2", "mistral", "kimi-k2", "deepseek-v3.1", "granite"} <= set(GENERIC_SAMPLES)


@pytest.mark.parametrize("name", GENERIC_SAMPLES)
def test_generic_reads_each_member_s_calls(name: str) -> None:
    text = f"Let me check.\n{CANONICAL[name]}"
    for chunk in (len(text), 1, 7):
        parser = GENERIC_CALLS.parser({"get_weather", "get_time"})
        items = [i for start in range(0, len(text), chunk) for i in parser.feed(text[start:start + chunk])]
        items += parser.finish()
        content = "".join(i for i in items if isinstance(i, str))
        assert content == "Let me check.", (name, chunk)
        assert [(c.name, json.loads(c.arguments)) for c in parser.calls] == [("get_weather", WEATHER)], (name, chunk)


def test_generic_python_tag_and_unknown_names() -> None:
    parser = GENERIC_CALLS.parser({"get_weather"})
    out = parser.feed('<|python_tag|>get_weather(city="Paris")') + parser.finish()
    assert [c.name for c in parser.calls] == ["get_weather"] and not [i for i in out if isinstance(i, str)]
    parser = GENERIC_CALLS.parser({"get_time"})
    text = CANONICAL["hermes"]
    out = parser.feed(text) + parser.finish()
    assert parser.calls == [] and "".join(i for i in out if isinstance(i, str)) == text  # not a tool it offered


def test_generic_forces_calls_in_hermes_syntax() -> None:
    assert GENERIC_CALLS.call_grammar(TOOLS, parallel=False) == tool_syntax_named("hermes").call_grammar(
        TOOLS, parallel=False)


def test_every_registered_family_still_wins_over_its_cues() -> None:
    for fixture, name in FIXTURE_FAMILIES.items():
        family = recognise_family(ModelCues(source(fixture)))
        if name == "generic" or family_named(name).reasons:
            assert family.name == name or (name == "generic" and not family.reasons), fixture
    assert all(f.name for f in REGISTRY)


# ----------------------------------------------------------------------------- `fireside template` with a vocabulary

def _template(*args: str) -> CliResult:
    """`fireside template ARGS`, in this process (tests/cli_runner.py)."""
    return run_cli("template", *args)


@pytest.fixture(scope="module")
def lfm_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("lfm")
    jinja = folder / "lfm-instruct.jinja"
    jinja.write_text(LFM_INSTRUCT, encoding="utf-8")
    special = ["<|tool_call_start|>", "<|tool_call_end|>", "<|tool_list_start|>", "<|tool_list_end|>"]
    gguf = vocab_gguf("lfm-instruct", special, LFM_INSTRUCT)
    vocab = vocab_gguf("lfm-vocab", special)
    tools = folder / "tools.json"
    tools.write_text(json.dumps(TOOLS), encoding="utf-8")
    completion = folder / "completion.txt"
    completion.write_text(LFM_CALL, encoding="utf-8")
    return {"jinja": jinja, "gguf": gguf, "vocab": vocab, "tools": tools, "completion": completion}


@pytest.mark.parametrize("how", ["gguf", "jinja+vocab", "jinja"])
def test_template_parse_reads_the_call(lfm_files: dict[str, Path], how: str) -> None:
    files = lfm_files
    source_args = {"gguf": ["--template", str(files["gguf"])],
                   "jinja+vocab": ["--template", str(files["jinja"]), "--vocab", str(files["vocab"])],
                   "jinja": ["--template", str(files["jinja"])]}[how]
    result = _template("parse", *source_args, "--tools", str(files["tools"]), "--completion", str(files["completion"]))
    assert result.returncode == 0, result.stderr
    message: dict[str, Any] = json.loads(result.stdout)
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]] == [
        ("get_weather", {"city": "Rome"})]
    assert message["content"] is None


def test_vocabulary_chooses_the_forced_call_syntax(lfm_files: dict[str, Path]) -> None:
    """With the vocabulary, the syntax is LFM2's (what a forced call is written in); without, Hermes's."""
    from app.cli.template import _chat_format

    with_vocab = _chat_format(lfm_files["jinja"], lfm_files["vocab"], "", "")
    assert with_vocab.tool_syntax.name == "lfm2"
    assert _chat_format(lfm_files["gguf"], None, "", "").tool_syntax.name == "lfm2"
    assert _chat_format(lfm_files["jinja"], None, "", "").tool_syntax is GENERIC_CALLS


def test_vocab_needs_a_jinja_template(lfm_files: dict[str, Path]) -> None:
    result = _template("render", "--template", str(lfm_files["gguf"]), "--vocab", str(lfm_files["vocab"]),
                       "--messages", str(lfm_files["tools"]))
    assert result.returncode == 1 and "--vocab goes with a Jinja file" in result.stderr


# ------------------------------------------------------------------------------------ served end to end

@pytest.fixture(scope="module")
def cue_server(tmp_path_factory: pytest.TempPathFactory, model_path: Path):
    from tests.conftest import POOL, TWO_SLOTS

    folder = tmp_path_factory.mktemp("cue-templates")
    kimi, lfm = folder / "kimi-k2-thinking.jinja", folder / "lfm-instruct.jinja"
    kimi.write_text(kimi_k2_thinking(), encoding="utf-8")
    lfm.write_text(LFM_INSTRUCT, encoding="utf-8")
    return POOL.get("--model", str(model_path), "--alias", "smol",
                    "--model", str(model_path), "--alias", "kimi-thinking", "--chat-template", str(kimi),
                    "--model", str(model_path), "--alias", "lfm-instruct", "--chat-template", str(lfm), *TWO_SLOTS)


def _chat(server: Any, model: str, **fields: Any) -> Any:
    import httpx

    body = {"model": model, "messages": [{"role": "user", "content": "Weather in Rome?"}], "temperature": 0,
            "max_tokens": 40, **fields}
    return httpx.post(f"{server.v1}/chat/completions", json=body, timeout=120)


FORCED = {"type": "grammar", "grammar": 'root ::= "<think>Check Rome.</think>It is sunny."'}


def test_generic_model_s_reasoning_markup_never_reaches_content(cue_server: Any) -> None:
    response = _chat(cue_server, "smol", response_format=FORCED)
    assert response.status_code == 200, response.text
    message = response.json()["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == ("Check Rome.", "It is sunny.")
    import httpx

    reasoning, content = "", ""
    body = {"model": "smol", "messages": [{"role": "user", "content": "Rome?"}], "max_tokens": 40,
            "response_format": FORCED, "stream": True}
    with httpx.stream("POST", f"{cue_server.v1}/chat/completions", json=body, timeout=120) as stream:
        for line in stream.iter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    reasoning += choice["delta"].get("reasoning_content") or ""
                    content += choice["delta"].get("content") or ""
    assert (reasoning, content) == ("Check Rome.", "It is sunny.")


def test_generic_model_refuses_reasoning_controls(cue_server: Any) -> None:
    response = _chat(cue_server, "smol", reasoning_effort="high")
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "reasoning_effort"


def test_cue_family_switches_reasoning_off_in_the_prompt(cue_server: Any) -> None:
    response = _chat(cue_server, "kimi-thinking", reasoning_effort="none", raw_output=True, max_tokens=4)
    assert response.status_code == 200, response.text
    raw = response.json()["choices"][0]["raw_output"]
    text = "".join(f for f in raw["prompt_fragments"] if isinstance(f, str))  # special tokens come as ids
    assert text.endswith("<|im_middle|><think>\n</think>\n\n"), text[-60:]
    forced = _chat(cue_server, "kimi-thinking", reasoning_effort="none", response_format={
        "type": "grammar", "grammar": 'root ::= "It is sunny."'}).json()["choices"][0]["message"]
    assert forced["content"] == "It is sunny."


# Tools whose calls have a bounded length: enum and empty arguments, no other keys. With one call
# (`parallel_tool_calls: false`) the grammar admits at most 8 places of up to 21 whitespace characters
# each beside some 80 fixed ones (244 bytes), so 300 tokens finish the call whatever whitespace the
# model picks (the model's own choice of indentation differs between CPUs).
BOUNDED_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"enum": ["Rome", "Paris"]}}, "required": ["city"],
        "additionalProperties": False}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {}, "additionalProperties": False}}},
]


def test_template_without_call_markup_gets_calls_back(cue_server: Any) -> None:
    from tests.grammar_support import longest_sentence

    response = _chat(cue_server, "lfm-instruct", tools=BOUNDED_TOOLS, tool_choice="required",
                     parallel_tool_calls=False, max_tokens=300, raw_output=True)
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    message = choice["message"]
    assert longest_sentence(choice["raw_output"]["grammar"]) <= 300  # the budget holds any call it allows
    assert choice["finish_reason"] == "tool_calls", choice
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]]
    assert calls in ([("get_weather", {"city": "Rome"})], [("get_weather", {"city": "Paris"})], [("get_time", {})]), calls
    assert not message.get("content")


def test_turn_end_markup_the_vocabulary_lacks_is_a_stop() -> None:
    gemma_vocab = frozenset({"<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>"})
    assert ChatFormat(CHATML_TEMPLATE, bos_token="<bos>", eos_token="<eos>",
                      special_tokens=gemma_vocab).turn_stops == ("<|im_end|>",)
    chatml_vocab = frozenset({"<|im_start|>", "<|im_end|>"})
    assert ChatFormat(CHATML_TEMPLATE, bos_token="", eos_token="", special_tokens=chatml_vocab).turn_stops == ()
    gemma = source("google-gemma-2-2b-it.jinja")
    assert ChatFormat(gemma, bos_token="<bos>", eos_token="<eos>", special_tokens=gemma_vocab).turn_stops == ()
    assert ChatFormat(CHATML_TEMPLATE, bos_token="", eos_token="").turn_stops == ()  # vocabulary unknown
