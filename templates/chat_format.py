"""A model's chat format: its Jinja template together with its family (reasoning switches and
markers). Turns a conversation and the reasoning controls into the prompt, and the model's raw
output back into content and reasoning. The server and `fireside template` both use it."""

from __future__ import annotations

import json
from typing import Any

from templates.chat_template import ChatTemplate
from templates.families import ChatFamily, family_for
from templates.reasoning import DEFAULT_BUDGET_END, ReasoningError, ReasoningRequest
from templates.reasoning_parser import ReasoningParser

NO_REASONING_CONTROLS = ReasoningRequest(effort=None, budget_tokens=None, history=None, budget_end=None)


class ChatFormat:
    def __init__(self, source: str, *, bos_token: str, eos_token: str):
        self.template = ChatTemplate(source, bos_token=bos_token, eos_token=eos_token)
        self.family: ChatFamily = family_for(source)

    def render(self, messages: list[dict[str, Any]], reasoning: ReasoningRequest = NO_REASONING_CONTROLS,
               *, tools: list[dict[str, Any]] | None = None) -> str:
        """The prompt, ending with the generation prompt. Raises `ReasoningError` for controls
        the family refuses and `TemplateRenderError` for what the template refuses."""
        if not self.family.reasons and _asks_for_reasoning(reasoning):
            raise ReasoningError(
                f"this model's chat template has no reasoning to control: {reasoning.param} "
                f"{_shown(reasoning)} cannot be honoured", reasoning.param)
        messages, variables = self.family.prepare(messages, reasoning)
        if tools:
            variables["tools"] = tools
        prompt = self.template.render(messages, add_generation_prompt=True, **variables)
        return self.family.finish_prompt(prompt, reasoning)

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

    def parser(self, prompt: str) -> ReasoningParser:
        """A fresh output parser for one choice generated after `prompt`."""
        return self.family.parser(prompt)

    def split(self, prompt: str, completion: str) -> tuple[str, str]:
        """(content, reasoning) of a whole raw output generated after `prompt`."""
        parser = self.parser(prompt)
        pieces = parser.feed(completion) + parser.finish()
        content = "".join(text for kind, text in pieces if kind == "content")
        reasoning = "".join(text for kind, text in pieces if kind == "reasoning")
        return content, reasoning

    def parse(self, prompt: str, completion: str) -> dict[str, Any]:
        """The assistant message the server returns for this raw output."""
        content, reasoning = self.split(prompt, completion)
        return {"role": "assistant", "content": content, "reasoning_content": reasoning or None, "tool_calls": []}


def _asks_for_reasoning(reasoning: ReasoningRequest) -> bool:
    return reasoning.budget_tokens is not None or reasoning.effort not in (None, "none")


def _shown(reasoning: ReasoningRequest) -> str:
    given = reasoning.given if reasoning.given is not None else reasoning.effort
    return json.dumps(given) if not isinstance(given, str) else given
