"""Model families: how each chat template switches reasoning, and how its output marks it.

One `ChatFamily` per family, in `REGISTRY`: how to recognise it in the template text, which
template variables carry the reasoning controls (always passed explicitly: template defaults
differ), where the template reads past reasoning, and the markers its model writes. A new family
is one new entry. `family_for` picks the entry for a template; `GENERIC` (no reasoning, no
variables, but the common reasoning markers still parsed) serves every template that none
recognises; `templates.cues` reads families no entry describes from their cues.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from templates.reasoning import ReasoningError, ReasoningRequest
from templates.reasoning_parser import (
    ChannelParser,
    OpeningMarkerParser,
    ReasoningParser,
)

LEVELS = frozenset({"none", "low", "medium", "high", "xhigh", "max"})
"""Efforts a family takes unless it says otherwise ("adaptive" is MiniMax M3's alone)."""
STRING_LEVELS = frozenset({"low", "medium", "high"})
_LEVEL_ORDER = ["none", "low", "medium", "high", "xhigh", "max", "adaptive"]

Variables = Callable[[str | None, ReasoningRequest], dict[str, Any]]
HistoryVariables = Callable[[str], dict[str, Any]]


def _no_variables(effort: str | None, request: ReasoningRequest) -> dict[str, Any]:
    return {}


def _no_history_variables(history: str) -> dict[str, Any]:
    return {}


def flag(name: str) -> Variables:
    """A boolean variable: true unless the effort is "none" (None where the template's default is kept)."""
    return lambda effort, request: {name: None if effort is None else effort != "none"}


def levels(name: str, mapping: Mapping[str, str], on: str | None = None) -> Variables:
    """A variable taking the family's own level names; `on` also sets a boolean `on` variable."""
    def variables(effort: str | None, request: ReasoningRequest) -> dict[str, Any]:
        level = mapping.get(effort or "", None)
        return {name: level} if on is None else {on: effort != "none", name: level}
    return variables


@dataclass(frozen=True)
class TextSwitch:
    """Thinking switched by words in the conversation (`/think`, `/no_think`) that the template reads.

    When the request sets the effort, the words are removed from the messages of `roles` (so they
    cannot contradict it) and, with `append`, the wanted word is added to the last such message.
    """

    on: str | None
    off: str | None
    roles: tuple[str, ...] = ("system",)
    append: bool = False
    insert: bool = False
    """With `append`: where no message of `roles` exists, one is added first to carry the word."""

    def apply(self, messages: list[dict[str, Any]], thinking: bool) -> list[dict[str, Any]]:
        words = sorted((w for w in (self.on, self.off) if w), key=len, reverse=True)
        out = []
        for message in messages:
            text = message.get("content")
            if message.get("role") in self.roles and isinstance(text, str) and any(w in text for w in words):
                for word in words:
                    text = text.replace(word, "")
                message = {**message, "content": text.strip()}
            out.append(message)
        word = self.on if thinking else self.off
        if self.append and word:
            for i in range(len(out) - 1, -1, -1):
                text = out[i].get("content")
                if out[i].get("role") in self.roles and isinstance(text, str):
                    out[i] = {**out[i], "content": f"{text} {word}" if text else word}
                    break
            else:
                if self.insert:
                    out.insert(0, {"role": self.roles[0], "content": word})
        return out


@dataclass(frozen=True)
class ChatFamily:
    """One model family's chat conventions; the generic family when built with a name alone."""

    name: str
    detect: tuple[str, ...] = ()
    """Strings that all occur in this family's template text."""
    # How the request's reasoning controls reach the template.
    default_effort: str | None = "medium"
    """The effort when the request gives none (the model's default); None keeps the template's own."""
    efforts: frozenset[str] = LEVELS
    """The efforts the model accepts; others are refused with the spec's "Invalid reasoning effort: X"."""
    variables: Variables = _no_variables
    """Template variables for the effort (after the default), e.g. `{"enable_thinking": False}`."""
    text_switch: TextSwitch | None = None
    none_prompt: str | None = None
    """For templates that cannot switch reasoning off: appended to the prompt for effort "none"."""
    budgets: bool = True
    """Whether a token budget (integer effort, `thinking.budget_tokens`) is accepted."""
    booleans: bool = True
    """Whether a boolean effort is accepted (MiniMax M2 takes strings only)."""
    # Past reasoning.
    reasoning_field: str = "reasoning_content"
    keeps_history: bool = False
    """Whether the template can show reasoning from before the last user message ("preserved")."""
    history_variables: HistoryVariables = _no_history_variables
    # The model's output.
    reasoning_start: str | None = None
    """The marker that opens reasoning in the output (or in the prompt, where the template writes it)."""
    reasoning_end: str | None = None
    """The marker that ends reasoning; None: the family has no reasoning."""
    budget_close: str | None = None
    """Forced after the budget phrase when the reasoning budget runs out: ends reasoning, starts the answer."""
    content_markers: tuple[str, ...] = ()
    """Markers wrapping the answer (`<|START_RESPONSE|>`), removed from content."""
    implicit_start: bool = False
    """Output starts inside reasoning although the prompt shows no start marker (Apriel 1.5)."""
    special_markers: bool = True
    """Whether the markers are special tokens, which the engine must then render as text for the parser."""
    # For grammars that leave room for reasoning before a constrained answer.
    after_reasoning: str = ""
    """Text that always follows the end marker (harmony's next message header)."""
    answer_opener: str = ""
    """Text that opens a plain answer after reasoning (harmony's final channel)."""

    def __post_init__(self) -> None:
        if not self.reasons:  # no markers to show: leave the engine's rendering of special tokens alone
            object.__setattr__(self, "special_markers", False)

    @property
    def reasons(self) -> bool:
        return self.reasoning_end is not None

    def matches(self, template_source: str) -> bool:
        return bool(self.detect) and all(text in template_source for text in self.detect)

    def effort(self, request: ReasoningRequest) -> str | None:
        """The effort this family runs at (the request's, else its default); refuses what it cannot do."""
        if not self.reasons:
            return None
        if request.effort is not None:
            if request.effort not in self.efforts:
                raise ReasoningError(f"Invalid reasoning effort: {request.effort}", request.param)
            if isinstance(request.given, bool) and not self.booleans:
                allowed = ", ".join(f"'{e}'" for e in sorted(self.efforts, key=_LEVEL_ORDER.index))
                raise ReasoningError(f"Invalid reasoning effort: {str(request.given).lower()}; "
                                     f"this model accepts only {allowed}", request.param)
        if request.budget_tokens is not None and not self.budgets:
            if isinstance(request.given, int) and not isinstance(request.given, bool):
                raise ReasoningError(f"Invalid reasoning effort: {request.given}", request.param)
            raise ReasoningError("thinking.budget_tokens is not supported by this model", "thinking")
        return request.effort if request.effort is not None else self.default_effort

    def history(self, request: ReasoningRequest) -> str | None:
        """The request's `reasoning_history`; refuses "preserved" where the template cannot show it."""
        if request.history == "preserved" and self.reasons and not self.keeps_history:
            raise ReasoningError("reasoning_history 'preserved' is not supported by this model's chat template",
                                 "reasoning_history")
        return request.history

    def prepare(self, messages: list[dict[str, Any]],
                request: ReasoningRequest) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The messages to render (history applied, past reasoning where the template reads it)
        and the template variables for the request's reasoning controls."""
        effort = self.effort(request)
        history = self.history(request)
        messages = [self.place_reasoning(m) for m in strip_reasoning(messages, history)]
        if self.text_switch is not None and request.effort is not None:
            messages = self.text_switch.apply(messages, effort != "none")
        variables = self.variables(effort, request) if self.reasons else {}
        if history is not None and self.reasons:
            variables.update(self.history_variables(history))
        return messages, variables

    def place_reasoning(self, message: dict[str, Any]) -> dict[str, Any]:
        """`reasoning_content` moved to the field this template reads (dropped when empty)."""
        if "reasoning_content" not in message:
            return message
        message = dict(message)
        reasoning = message.pop("reasoning_content")
        if isinstance(reasoning, str) and reasoning:
            message[self.reasoning_field] = reasoning
        return message

    def finish_prompt(self, prompt: str, request: ReasoningRequest) -> str:
        """The rendered prompt, completed for what the template cannot express: effort "none"
        on a template without a switch gets an empty reasoning block (`none_prompt`)."""
        if self.none_prompt is None or self.effort(request) != "none" or self.closes_reasoning(prompt):
            return prompt
        start = self.reasoning_start
        if start and self.none_prompt.startswith(start) and self.opens_reasoning(prompt):
            return prompt + self.none_prompt[len(start):]  # the template opened the block already
        return prompt + self.none_prompt

    def closes_reasoning(self, prompt: str) -> bool:
        """Whether the prompt ends with a closed reasoning block (generation starts in the answer)."""
        return self.reasoning_end is not None and prompt.rstrip().endswith(self.reasoning_end.rstrip())

    def opens_reasoning(self, prompt: str) -> bool:
        """Whether the prompt ends inside an open reasoning block (generation starts in reasoning)."""
        if not self.reasons or self.closes_reasoning(prompt):
            return False
        if self.implicit_start:
            return True
        return self.reasoning_start is not None and prompt.rstrip().endswith(self.reasoning_start.rstrip())

    def parser(self, prompt: str) -> ReasoningParser:
        """A fresh parser for one choice generated after `prompt` (the rendered prompt)."""
        if not self.reasons:
            return ReasoningParser()
        return ReasoningParser(self.reasoning_start, self.reasoning_end, in_reasoning=self.opens_reasoning(prompt),
                               drop=self.content_markers)


def strip_reasoning(messages: list[dict[str, Any]], history: str | None) -> list[dict[str, Any]]:
    """`reasoning_history` applied: "disabled" strips past reasoning from every message,
    "interleaved" from the messages up to and including the last user message."""
    if history not in ("disabled", "interleaved"):
        return list(messages)
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    limit = len(messages) if history == "disabled" else last_user + 1
    stripped = []
    for index, message in enumerate(messages):
        if index < limit and "reasoning_content" in message:
            message = {k: v for k, v in message.items() if k != "reasoning_content"}
        stripped.append(message)
    return stripped


@dataclass(frozen=True)
class ThinkingChunkFamily(ChatFamily):
    """Past reasoning as a `{"type": "thinking"}` chunk in the message content (Mistral)."""

    def place_reasoning(self, message: dict[str, Any]) -> dict[str, Any]:
        reasoning = message.get("reasoning_content")
        message = {k: v for k, v in message.items() if k != "reasoning_content"}
        if not isinstance(reasoning, str) or not reasoning:
            return message
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}] if content else []
        message["content"] = [{"type": "thinking", "thinking": reasoning}, *(content or [])]
        return message


@dataclass(frozen=True)
class ChannelFamily(ChatFamily):
    """Messages on channels (`HEADER<|message|>BODY<|end|>`): OpenAI harmony and its relatives."""

    classify: Callable[[str], str] = lambda header: "content"
    terminators: tuple[str, ...] = ()
    header_starts: tuple[str, ...] = ("<|start|>",)
    message_marker: str = "<|message|>"

    def _prompt_state(self, prompt: str) -> tuple[str, str | None]:
        """The header the prompt left open, and the kind of body it opened (if it did)."""
        start = prompt.rfind(self.header_starts[0])
        tail = prompt[start:] if start >= 0 else ""
        if not tail or any(t in tail for t in self.terminators):
            return "", None
        if self.message_marker in tail:
            return "", self.classify(tail.split(self.message_marker, 1)[0])
        return tail, None

    def closes_reasoning(self, prompt: str) -> bool:
        return self._prompt_state(prompt)[1] == "content"

    def opens_reasoning(self, prompt: str) -> bool:
        return self._prompt_state(prompt)[1] == "reasoning"

    def parser(self, prompt: str) -> ReasoningParser:
        header, kind = self._prompt_state(prompt)
        return ChannelParser(self.classify, terminators=self.terminators, header_starts=self.header_starts,
                             message=self.message_marker, header=header, kind=kind)


def _harmony_kind(header: str) -> str:
    """GPT-OSS: analysis is reasoning, a message to a recipient is a tool call, the rest the answer."""
    if re.search(r"\bto=", header):
        return "raw"
    channel = header.split("<|channel|>", 1)[1] if "<|channel|>" in header else ""
    return "reasoning" if channel.strip().startswith("analysis") else "content"


def _recipient_kind(header: str) -> str:
    """Muse Glimmer: `to=self` is reasoning, `to=user` (or no recipient) the answer, others tools."""
    match = re.search(r"\bto=(\S+)", header)
    recipient = match.group(1) if match else "user"
    return {"self": "reasoning", "user": "content"}.get(recipient, "raw")


THINK = {"reasoning_start": "<think>", "reasoning_end": "</think>"}

REASONING_PAIRS: tuple[tuple[str, str], ...] = (
    ("<seed:think>", "</seed:think>"),
    ("<think:opensource>", "</think:opensource>"),
    ("<|START_THINKING|>", "<|END_THINKING|>"),
    ("[THINK]", "[/THINK]"),
    ("<|channel>thought", "<channel|>"),
    ("<|inner_prefix|>", "<|inner_suffix|>"),
    ("◁think▷", "◁/think▷"),
    ("<thinking>", "</thinking>"),
    ("<thought>", "</thought>"),
    ("<reasoning>", "</reasoning>"),
    ("<think>", "</think>"),
)
"""The marker pairs models write around their reasoning, more specific spellings first."""



@dataclass(frozen=True)
class GenericFamily(ChatFamily):
    """Every template that none recognises: no reasoning controls (they are refused), but output
    that opens with one of the common reasoning marker pairs is still read as reasoning, so that
    markup never reaches the answer."""

    def parser(self, prompt: str) -> ReasoningParser:
        opened = prompt.rstrip()
        for start, end in REASONING_PAIRS:
            if opened.endswith(start):
                return ReasoningParser(start, end, in_reasoning=True)
        return OpeningMarkerParser(REASONING_PAIRS)


GENERIC = GenericFamily(name="generic")

REGISTRY: tuple[ChatFamily, ...] = (
    ChannelFamily(
        name="gpt-oss", detect=("<|channel|>", "<|start|>", "reasoning_effort"),
        efforts=STRING_LEVELS, budgets=False, variables=levels("reasoning_effort", {e: e for e in STRING_LEVELS}),
        reasoning_field="thinking", reasoning_start="<|channel|>analysis<|message|>", reasoning_end="<|end|>",
        budget_close="<|end|><|start|>assistant<|channel|>final<|message|>", classify=_harmony_kind,
        after_reasoning="<|start|>assistant", answer_opener="<|channel|>final<|message|>",
        terminators=("<|end|>", "<|return|>", "<|call|>"), header_starts=("<|start|>", "<|channel|>")),
    ChannelFamily(
        name="muse-glimmer", detect=("to=self", "<|eom|>"), default_effort="high",
        variables=levels("reasoning_strength", {"none": "low", "low": "low", "medium": "medium", "high": "high",
                                                "xhigh": "high", "max": "high"}),
        none_prompt=" to=user<|message|>", keeps_history=True,
        reasoning_start=" to=self<|message|>", reasoning_end="<|eom|>",
        budget_close="<|eom|><|start|>assistant to=user<|message|>", classify=_recipient_kind,
        terminators=("<|eom|>", "<|eot|>")),
    ChatFamily(
        name="nemotron-3", detect=("truncate_history_thinking",), variables=flag("enable_thinking"),
        keeps_history=True, history_variables=lambda h: {"truncate_history_thinking": h != "preserved"},
        budget_close="</think>\n", **THINK),
    ChatFamily(
        name="deepseek-v4", detect=("<｜Assistant｜>", "drop_thinking"), default_effort="high",
        variables=levels("reasoning_effort", {"none": "none", "low": "high", "medium": "high", "high": "high",
                                              "xhigh": "max", "max": "max"}, on="thinking"),
        keeps_history=True, history_variables=lambda h: {"drop_thinking": h != "preserved"},
        budget_close="</think>", special_markers=False, **THINK),
    ChatFamily(
        name="deepseek-v3.1", detect=("<｜Assistant｜>", "not thinking is defined"), default_effort="none",
        variables=flag("thinking"), budget_close="</think>", special_markers=False, **THINK),
    ChatFamily(
        name="deepseek-r1", detect=("<｜Assistant｜><think>\\n",), variables=flag("enable_thinking"),
        none_prompt="</think>\n\n", budget_close="</think>\n\n", special_markers=False, **THINK),
    ChatFamily(
        name="minicpm5", detect=("<tool_def_sep>", "enable_thinking"), default_effort=None,
        variables=flag("enable_thinking"), budget_close="</think>\n\n", **THINK),
    ChatFamily(
        name="qwq", detect=("<|im_start|>assistant\\n<think>\\n", "enable_thinking"),
        variables=flag("enable_thinking"), budget_close="</think>\n\n", special_markers=False, **THINK),
    ChatFamily(
        name="qwen3", detect=("<|im_start|>", "enable_thinking is defined and enable_thinking is false"),
        variables=flag("enable_thinking"), budget_close="</think>\n\n", special_markers=False, **THINK),
    ChatFamily(name="qwen3-coder", detect=("You are Qwen", "<function=example_function_name>")),
    ChatFamily(
        name="stepfun", detect=("<im_patch>", "<|im_start|>assistant\\n<think>\\n"),
        none_prompt="</think>\n", budget_close="</think>\n", **THINK),
    ChatFamily(
        name="mimo", detect=("You are MiMo",), text_switch=TextSwitch(None, "/no_think", ("user",), append=True),
        budget_close="</think>\n\n", **THINK),
    ChatFamily(
        name="glm-4.6", detect=("[gMASK]<sop>", "<think>"), variables=flag("enable_thinking"),
        budget_close="</think>\n", **THINK),
    ChatFamily(
        name="granite-3.3", detect=("<|start_of_role|>", "<response>"), default_effort="none",
        variables=flag("thinking"), budget_close="</think>\n<response>", content_markers=("<response>", "</response>"),
        special_markers=False, **THINK),
    ChatFamily(
        name="smollm3", detect=("SmolLM", "/no_think"), variables=flag("enable_thinking"),
        text_switch=TextSwitch("/think", "/no_think"), budget_close="</think>\n", **THINK),
    ThinkingChunkFamily(
        name="ministral-reasoning", detect=("[SYSTEM_PROMPT]", "[THINK]"), none_prompt="[THINK][/THINK]",
        keeps_history=True, reasoning_start="[THINK]", reasoning_end="[/THINK]", budget_close="[/THINK]"),
    ChatFamily(
        name="seed-oss", detect=("<seed:think>",),
        variables=lambda effort, request: {
            "thinking_budget": 0 if effort == "none" else request.budget_tokens or -1},
        keeps_history=True, reasoning_start="<seed:think>", reasoning_end="</seed:think>",
        budget_close="</seed:think>"),
    ChatFamily(
        name="cohere2", detect=("<|START_THINKING|>", "skip_thinking"), variables=flag("reasoning"),
        keeps_history=True, history_variables=lambda h: {"skip_thinking": h == "disabled"},
        reasoning_start="<|START_THINKING|>", reasoning_end="<|END_THINKING|>", budget_close="<|END_THINKING|>",
        content_markers=("<|START_TEXT|>", "<|END_TEXT|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>")),
    ChatFamily(
        name="command-r7b", detect=("<|START_THINKING|>", "enable_thinking"), default_effort="none",
        variables=flag("enable_thinking"), reasoning_start="<|START_THINKING|>", reasoning_end="<|END_THINKING|>",
        budget_close="<|END_THINKING|>", content_markers=("<|START_RESPONSE|>", "<|END_RESPONSE|>")),
    ChatFamily(
        name="minimax-m2", detect=("]~b]ai", "<think>"), efforts=STRING_LEVELS, booleans=False, budgets=False,
        budget_close="</think>\n\n", **THINK),
    ChatFamily(
        name="minimax-m1", detect=("<beginning_of_sentence>", "MiniMax-M1"), none_prompt="<think>\n</think>\n\n",
        budget_close="</think>\n\n", **THINK),
    ChatFamily(name="kimi-k2", detect=("<|im_assistant|>", "<|tool_calls_section_begin|>")),
    ChatFamily(
        name="kimi-k3", detect=("<|open|>", "thinking_effort"), default_effort="max",
        variables=levels("thinking_effort", {"low": "low", "medium": "high", "high": "high", "xhigh": "max",
                                             "max": "max"}, on="thinking"),
        keeps_history=True, reasoning_start="<|open|>think<|sep|>", reasoning_end="<|close|>think<|sep|>",
        budget_close="<|close|>think<|sep|><|open|>response<|sep|>",
        content_markers=("<|open|>response<|sep|>", "<|close|>response<|sep|>", "<|close|>message<|sep|>",
                         "<|end_of_msg|>")),
    ChatFamily(
        name="apriel-1.6", detect=("Here are my reasoning steps:", "[BEGIN FINAL RESPONSE]"),
        none_prompt="[BEGIN FINAL RESPONSE]\n", reasoning_start="Here are my reasoning steps:\n",
        reasoning_end="[BEGIN FINAL RESPONSE]", budget_close="\n[BEGIN FINAL RESPONSE]\n",
        content_markers=("[END FINAL RESPONSE]", "<|end|>"), special_markers=False),
    ChatFamily(
        name="apriel-1.5", detect=("[END FINAL RESPONSE]", "ServiceNow"), none_prompt="[BEGIN FINAL RESPONSE]\n",
        implicit_start=True, reasoning_start="Here are my reasoning steps:", reasoning_end="[BEGIN FINAL RESPONSE]",
        budget_close="\n[BEGIN FINAL RESPONSE]\n", content_markers=("[END FINAL RESPONSE]", "<|end|>"),
        special_markers=False),
    ChatFamily(
        name="gemma-4", detect=("<|channel>thought",), default_effort="none", variables=flag("enable_thinking"),
        reasoning_start="<|channel>thought", reasoning_end="<channel|>", budget_close="<channel|>"),
    ChatFamily(
        name="nemotron-nano-v2", detect=("<SPECIAL_11>Assistant", "/no_think"),
        text_switch=TextSwitch("/think", "/no_think", ("user", "system"), append=True),
        budget_close="</think>\n", **THINK),
    ChatFamily(
        name="lfm2.5", detect=("preserve_thinking", "<|tool_call_start|>"), none_prompt="<think></think>",
        reasoning_field="thinking", keeps_history=True,
        history_variables=lambda h: {"preserve_thinking": h == "preserved"}, budget_close="</think>", **THINK),
    ChatFamily(
        name="hy3", detect=("hy_Assistant", "reasoning_effort"), default_effort="none",
        variables=levels("reasoning_effort", {"none": "no_think", "low": "low", "medium": "high", "high": "high",
                                              "xhigh": "high", "max": "high"}),
        keeps_history=True, history_variables=lambda h: {"preserved_thinking": h == "preserved"},
        reasoning_start="<think:opensource>", reasoning_end="</think:opensource>",
        budget_close="</think:opensource>"),
    ChatFamily(
        name="laguna-s", detect=("〈|EOS|〉", "preserve_thinking"), variables=flag("enable_thinking"),
        keeps_history=True, history_variables=lambda h: {"preserve_thinking": h == "preserved"},
        budget_close="</think>", content_markers=("</assistant>",), **THINK),
    ChatFamily(
        name="laguna-xs", detect=("〈|EOS|〉", "render_assistant_messages_raw"), default_effort="none",
        variables=flag("enable_thinking"), keeps_history=True, budget_close="</think>\n",
        content_markers=("</assistant>",), **THINK),
    ChatFamily(
        name="ling", detect=("detailed thinking", "<role>ASSISTANT</role>"), variables=flag("enable_thinking"),
        text_switch=TextSwitch("detailed thinking on", "detailed thinking off"), keeps_history=True,
        budget_close="</think>", **THINK),
    ChatFamily(
        name="solar-open", detect=("think_render_option", "<|think|>"), default_effort="high",
        variables=levels("reasoning_effort", {"none": "minimal", "low": "low", "medium": "high", "high": "high",
                                              "xhigh": "high", "max": "high"}),
        reasoning_field="reasoning", keeps_history=True,
        history_variables=lambda h: {"think_render_option": "all" if h == "preserved" else "lastthink"},
        reasoning_start="<|think|>", reasoning_end="<|end|>", budget_close="<|end|><|begin|>assistant<|content|>",
        content_markers=("<|begin|>assistant", "<|content|>", "<|end|>")),
    ChatFamily(
        name="spark", detect=("<|Bot|>", "enable_thinking"), variables=flag("enable_thinking"), keeps_history=True,
        budget_close="</think>", **THINK),
    ChatFamily(
        name="reka", detect=("human: ", "<sep>", "enable_thinking"), default_effort="none",
        variables=flag("enable_thinking"), budget_close="\n</think>\n\n", **THINK),
    ChatFamily(
        name="bielik", detect=("Bielik", "enable_thinking"), default_effort="none", variables=flag("enable_thinking"),
        keeps_history=True, budget_close="\n</think>\n", **THINK),
    ChatFamily(
        name="apertus", detect=("<|inner_prefix|>", "Deliberation: "), default_effort="none",
        variables=flag("enable_thinking"), reasoning_start="<|inner_prefix|>", reasoning_end="<|inner_suffix|>",
        budget_close="<|inner_suffix|>"),
    ChatFamily(
        name="rwkv-world", detect=("' <think>'", "'Assistant:'"), default_effort=None,
        variables=flag("enable_thinking"), budget_close="\n</think>", special_markers=False, **THINK),
)


def family_for(template_source: str) -> ChatFamily:
    """The family whose template this is; `GENERIC` when none recognises it."""
    return next((family for family in REGISTRY if family.matches(template_source)), GENERIC)


def family_named(name: str) -> ChatFamily:
    """The registry entry called `name` (KeyError if there is none)."""
    for family in (*REGISTRY, GENERIC):
        if family.name == name:
            return family
    raise KeyError(name)

