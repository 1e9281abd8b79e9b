"""A model's chat format: its Jinja template together with its family (reasoning switches and
markers) and tool-call syntax. Turns a conversation and the reasoning controls into the prompt,
and the model's raw output back into content, reasoning and calls. The server and `fireside
template` both use it.

Recognition: a family the registry knows by its template's signature keeps its entry; where that
entry (or none) describes no reasoning but the template or the vocabulary shows reasoning markers,
the family is read from those cues (`templates.cues`). The tool-call syntax comes from the
template, else the vocabulary, else every common syntax is read."""

from __future__ import annotations

import json
from typing import Any

from templates.chat_output import ChatOutput
from templates.chat_template import ChatTemplate, TemplateRenderError
from templates.cues import ModelCues, family_from_cues
from templates.families import ChatFamily, family_for
from templates.reasoning import DEFAULT_BUDGET_END, ReasoningError, ReasoningRequest
from templates.tool_calls import ToolSyntax, tool_syntax_for

NO_REASONING_CONTROLS = ReasoningRequest(effort=None, budget_tokens=None, history=None, budget_end=None)


class ChatFormat:
    def __init__(self, source: str, *, bos_token: str, eos_token: str,
                 special_tokens: frozenset[str] = frozenset(), control_tokens: frozenset[str] = frozenset()):
        """`special_tokens`: the texts of the model's special vocabulary entries (CONTROL and
        USER_DEFINED), `control_tokens` the CONTROL ones; empty when the vocabulary is unknown."""
        self.template = ChatTemplate(source, bos_token=bos_token, eos_token=eos_token)
        self.family: ChatFamily = recognise_family(ModelCues(source, special_tokens, control_tokens))
        self.tool_syntax: ToolSyntax = tool_syntax_for(source, special_tokens)
        # Templates that never read `tools` get them described in a system message instead.
        self.renders_tools = "tools" in source
        turn_stop = _turn_stop(_turn_end(self.template), special_tokens)
        self.turn_stops: tuple[str, ...] = (turn_stop,) if turn_stop else ()
        """Stop sequences every chat request gets (see `_turn_stop`)."""
        self._generation_prompts: dict[tuple[object, ...], str | None] = {}

    def render(self, messages: list[dict[str, Any]], reasoning: ReasoningRequest = NO_REASONING_CONTROLS,
               *, tools: list[dict[str, Any]] | None = None) -> str:
        """The prompt, ending with the generation prompt. Raises `ReasoningError` for controls
        the family refuses and `TemplateRenderError` for what the template refuses."""
        if not self.family.reasons and _asks_for_reasoning(reasoning):
            raise ReasoningError(
                f"this model's chat template has no reasoning to control: {reasoning.param} "
                f"{_shown(reasoning)} cannot be honoured", reasoning.param)
        messages, variables = self.family.prepare(self.tool_syntax.history(messages), reasoning)
        if tools:
            if self.renders_tools:
                variables["tools"] = tools
            else:
                messages = with_tools_described(messages, tools, self.tool_syntax.opener)
        prompt = self.template.render(messages, add_generation_prompt=True, **variables)
        return self.family.finish_prompt(prompt, reasoning)

    def generation_prompt(self, reasoning: ReasoningRequest = NO_REASONING_CONTROLS) -> str | None:
        """The text the template writes for the answer to follow (`<|im_start|>assistant\n`), as a
        one-message chat shows it; None when the template does not add it at the end."""
        key = (reasoning.effort, reasoning.history, reasoning.given)
        if key not in self._generation_prompts:
            probe = [{"role": "user", "content": "Hello."}]
            try:
                whole = self.render(probe, reasoning)
                messages, variables = self.family.prepare(self.tool_syntax.history(probe), reasoning)
                bare = self.template.render(messages, add_generation_prompt=False, **variables)
            except (ReasoningError, TemplateRenderError):
                bare = whole = ""
            self._generation_prompts[key] = whole[len(bare):] if len(whole) > len(bare) and whole.startswith(
                bare) else None
        return self._generation_prompts[key]

    def reasoning_budget(self, prompt: str, reasoning: ReasoningRequest) -> tuple[str | None, str, str] | None:
        """(start marker or None when the prompt opened the block, end marker, forced closing
        text) when the request caps reasoning; None otherwise."""
        family = self.family
        if reasoning.budget_tokens is None or not family.reasons or family.budget_close is None:
            return None
        assert family.reasoning_end is not None
        bridge = DEFAULT_BUDGET_END if reasoning.budget_end is None else reasoning.budget_end
        start = None if family.opens_reasoning(prompt) else family.reasoning_start
        return start, family.reasoning_end, bridge + family.budget_close

    def output(self, prompt: str, tool_names: set[str] | None = None) -> ChatOutput:
        """A fresh parser of one choice's whole output: reasoning, content and, when the request
        offers tools, tool calls."""
        tools = self.tool_syntax.parser(tool_names) if tool_names else None
        return ChatOutput(self.family.parser(prompt), tools)

    def parse(self, prompt: str, completion: str, tool_names: set[str] | None = None) -> dict[str, Any]:
        """The assistant message the server returns for this raw output."""
        output = self.output(prompt, tool_names)
        events = output.feed(completion) + output.finish()
        content = "".join(e.text for e in events if e.kind == "content")
        reasoning = "".join(e.text for e in events if e.kind == "reasoning")
        calls = [{"id": call.id or output.call_id(i), "type": "function",
                  "function": {"name": call.name, "arguments": call.arguments}} for i, call in enumerate(output.calls)]
        return {"role": "assistant", "content": content or (None if calls else ""),
                "reasoning_content": reasoning or None, "tool_calls": calls}


_PROBE = "\x00fireside-answer\x00"


def _turn_end(template: ChatTemplate) -> str | None:
    """The markup the template writes after an assistant message (`<|im_end|>`, `<end_of_turn>`),
    None when it writes none or cannot render a short exchange."""
    try:
        text = template.render([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": _PROBE}],
                               add_generation_prompt=False)
    except TemplateRenderError:
        return None
    if text.count(_PROBE) != 1:
        return None
    tail = text.split(_PROBE, 1)[1].strip()
    return tail or None


def _turn_stop(turn_end: str | None, special_tokens: frozenset[str]) -> str | None:
    """A stop sequence for a template whose turn-end markup the model's vocabulary does not know
    (ChatML's `<|im_end|>` given to a Gemma): the model can only write it as text, never as the
    end-of-generation token, and would run on into a turn of its own. None where the markup
    starts with one of the model's special tokens, or the vocabulary is unknown."""
    if turn_end is None or not special_tokens:
        return None
    first = turn_end.splitlines()[0].strip()
    if not first or any(first.startswith(token) for token in special_tokens):
        return None
    return first


def recognise_family(cues: ModelCues) -> ChatFamily:
    """The registry's family for the template, or the one its cues describe where the registry's
    shows no reasoning."""
    family = family_for(cues.template)
    if family.reasons:
        return family
    return family_from_cues(cues, family.name) or family


def _asks_for_reasoning(reasoning: ReasoningRequest) -> bool:
    return reasoning.budget_tokens is not None or reasoning.effort not in (None, "none")


def _shown(reasoning: ReasoningRequest) -> str:
    given = reasoning.given if reasoning.given is not None else reasoning.effort
    return json.dumps(given) if not isinstance(given, str) else given


def with_tools_described(messages: list[dict[str, Any]], tools: list[dict[str, Any]], opener: str) -> list[dict[str, Any]]:
    """The tools in the system message, for templates that never read `tools` (Hermes's wording)."""
    listing = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    closer = opener.replace("<", "</", 1) if opener.startswith("<") else ""
    text = ("You may call one or more functions to assist with the user query. The functions are listed in "
            f"<tools></tools> XML tags:\n<tools>\n{listing}\n</tools>\nFor each function call, return a JSON "
            f'object with the function name and arguments: {opener}{{"name": <function-name>, '
            f'"arguments": <args-json-object>}}{closer}')
    if messages and messages[0].get("role") == "system":
        first = dict(messages[0])
        first["content"] = f"{first.get('content') or ''}\n\n{text}".strip()
        return [first, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]
