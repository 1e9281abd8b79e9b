"""The request's reasoning controls (`reasoning_effort`, `thinking`, `reasoning_history`) turned
into a `ReasoningRequest`, and a reasoning token budget into what the engine forces."""

from __future__ import annotations

from collections.abc import Sequence

from app.chat_formats import chat_format
from app.errors import BadRequest
from app.request_types import GenerationFields
from backends.llama_model import LlamaModel
from backends.reasoning_budget import ReasoningBudget
from backends.registry import ServedModel
from templates.chat_format import ChatFormat
from templates.reasoning import ReasoningError, ReasoningRequest, normalize_reasoning


def reasoning_controls(request: GenerationFields) -> ReasoningRequest:
    try:
        return normalize_reasoning(request.reasoning_effort, request.thinking, request.reasoning_history)
    except ReasoningError as error:
        raise BadRequest(str(error), param=error.param) from None


def prompt_reasoning_budget(model: LlamaModel, chat: ChatFormat, prompt: str,
                            reasoning: ReasoningRequest) -> ReasoningBudget | None:
    """What the engine needs to cap reasoning after `prompt`; None when the request sets no budget."""
    capped = chat.reasoning_budget(prompt, reasoning)
    if capped is None:
        return None
    start, end, closing = capped
    assert reasoning.budget_tokens is not None
    return ReasoningBudget(reasoning.budget_tokens, start, end,
                           tuple(model.tokenize(closing, add_special=False, parse_special=True)))


def completion_reasoning_budget(served: ServedModel, request: GenerationFields,
                                prompts: Sequence[str]) -> ReasoningBudget | None:
    """`/v1/completions` uses its prompt as written, so of the reasoning controls only a token
    budget (an integer `reasoning_effort`, `thinking.budget_tokens`) can apply: the engine closes
    the model's reasoning block after that many tokens. The other controls choose how a chat
    template renders messages; here they are refused with the reason."""
    if request.reasoning_history is not None:
        raise BadRequest("reasoning_history chooses how chat messages are rendered; /v1/completions uses its "
                         "prompt as written (use /v1/chat/completions)", param="reasoning_history")
    if request.reasoning_effort is None and request.thinking is None:
        return None
    reasoning = reasoning_controls(request)
    chat = chat_format(served)
    if not chat.family.reasons:
        raise BadRequest(f"this model's chat template has no reasoning to control: {reasoning.param} cannot be "
                         "honoured", param=reasoning.param)
    if reasoning.budget_tokens is None:
        raise BadRequest(f"{reasoning.param}: on /v1/completions the prompt is used as written, so only a reasoning "
                         "token budget (an integer reasoning_effort or thinking.budget_tokens) applies; effort "
                         "levels and on/off choose how /v1/chat/completions renders the chat template",
                         param=reasoning.param)
    budgets = {prompt_reasoning_budget(served.model, chat, prompt, reasoning) for prompt in prompts}
    if len(budgets) > 1:
        raise BadRequest("the prompts differ in whether they already open the reasoning block; send them "
                         "separately", param="prompt")
    return budgets.pop()
