"""A plan's input as the model's tokens: a chat rendered with the model's template (safe
tokenization, `prompt_truncate_len`), a chat given as token ids, or prompts used as written.

Each prompt keeps its text (what `echo` returns and where the output parser starts) and its
fragments (`raw_output.prompt_fragments`: the template's markup tokens apart from plain text).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from app.pipeline.errors import BadRequest
from app.pipeline.plan import Conversation
from backends.jobs import PromptImage
from backends.llama_model import LlamaModel
from backends.model_cache import per_model
from backends.vocab import special_tokens
from templates.chat_format import ChatFormat
from templates.chat_template import TemplateRenderError
from templates.prompt_fragments import Fragment, SpecialVocab, fragment_tokens
from templates.reasoning import ReasoningError, ReasoningRequest
from templates.safe_prompt import (
    RenderedPrompt,
    SafeTokenizationError,
    prompt_from_render,
)
from templates.truncation import Truncation, truncate_conversation

log = logging.getLogger("fireside.prompts")

Fragments = list[Fragment]


def _special_vocab(model: LlamaModel) -> SpecialVocab:
    return SpecialVocab(special_tokens(model))


special_vocab = per_model(_special_vocab)  # built once per model, dropped with it


@dataclass(frozen=True)
class Prompt:
    tokens: list[int]
    text: str  # as the model sees it (a text prompt exactly as given: echo returns it verbatim)
    fragments: Fragments  # markup tokens and plain text (`raw_output.prompt_fragments`)
    truncation: Truncation | None = None
    images: tuple[PromptImage, ...] = ()  # where `tokens` hold an image's placeholders


def check_token_ids(tokens: list[int] | tuple[int, ...], n_vocab: int, param: str) -> None:
    for token in tokens:
        if not 0 <= token < n_vocab:
            raise BadRequest(f"token id {token} is outside the vocabulary (0..{n_vocab - 1})", param=param)


def _renderer(chat: ChatFormat, reasoning: ReasoningRequest):
    def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        try:
            return chat.render(messages, reasoning, tools=tools)
        except ReasoningError as error:
            raise BadRequest(str(error), param=error.param) from None
        except TemplateRenderError as error:
            raise BadRequest(str(error), param="messages", code="chat_template_error") from None
    return render


def chat_prompt(model: LlamaModel, chat: ChatFormat, conversation: Conversation,
                reasoning: ReasoningRequest) -> Prompt:
    """The conversation rendered and tokenized. `safe_tokenization`: True: user text never makes
    special tokens, or 400 when the template hides it; None: the same where it can apply; False:
    special-token text is a special token wherever it is. `truncate_to`: `prompt_truncate_len`."""
    if conversation.token_ids is not None:
        return _token_prompt(model, conversation.token_ids)
    assert conversation.messages is not None
    render = _renderer(chat, reasoning)
    vocab = special_vocab(model)
    tools, safe = conversation.shown_tools, conversation.safe_tokenization

    def build(messages: list[dict[str, Any]]) -> RenderedPrompt:
        if safe is False:
            return prompt_from_render(render, messages, tools, vocab, safe=False)
        try:
            return prompt_from_render(render, messages, tools, vocab, safe=True)
        except SafeTokenizationError as error:
            if safe:
                raise BadRequest(f"safe_tokenization: {error}", param="safe_tokenization") from None
            return prompt_from_render(render, messages, tools, vocab, safe=False)

    messages, truncation = conversation.messages, None
    if conversation.truncate_to is not None:
        truncation = truncate_conversation(messages, lambda m: len(fragment_tokens(model, build(m).fragments)),
                                           conversation.truncate_to, model)
        messages = truncation.messages
        if truncation.changed:
            log.info("prompt_truncate_len %d: left out %d messages, cut %d tokens of the system prompt",
                     conversation.truncate_to, truncation.evicted, truncation.system_tokens_cut)
    rendered = build(messages)
    return Prompt(fragment_tokens(model, rendered.fragments), rendered.text, rendered.fragments, truncation)


def answer_start(model: LlamaModel, chat: ChatFormat, prompt: Prompt, reasoning: ReasoningRequest) -> tuple[int, ...]:
    """Where a chat prompt's generation prompt starts, in tokens (none when unknown): the next
    turn renders the conversation up to there, then this turn's answer. A model whose cache cannot
    be cut back saves a checkpoint there (backends/checkpoints.py)."""
    suffix = chat.generation_prompt(reasoning)
    if not suffix or not prompt.text.endswith(suffix):
        return ()
    count = len(model.tokenize(suffix, add_special=False, parse_special=True))
    return (len(prompt.tokens) - count,) if 0 < count < len(prompt.tokens) else ()


def _token_prompt(model: LlamaModel, tokens: tuple[int, ...]) -> Prompt:
    """`prompt_token_ids`: the prompt as given, no template; its text only tells the output parser
    where the prompt left off (inside a reasoning block, say)."""
    check_token_ids(tokens, model.n_vocab, "prompt_token_ids")
    if not tokens:
        raise BadRequest("prompt_token_ids must not be empty", param="prompt_token_ids")
    return Prompt(list(tokens), model.detokenize(list(tokens), special=True), list(tokens))


def written_prompts(prompts: tuple[str | tuple[int, ...], ...], model: LlamaModel,
                    keep_last: int | None = None) -> list[Prompt]:
    """Prompts used as written: text tokenized with the model's special tokens, or token ids;
    with `keep_last`, only the last that many tokens of each."""
    out = []
    for i, item in enumerate(prompts):
        if isinstance(item, str):
            tokens = model.tokenize(item, add_special=True, parse_special=True)
        else:
            check_token_ids(item, model.n_vocab, "prompt")
            tokens = list(item)
        if keep_last is not None and len(tokens) > keep_last:
            tokens = tokens[-keep_last:]
            item = tuple(tokens)  # the prompt as read is what is left of it
        if not tokens:
            if model.bos_token_id < 0:
                raise BadRequest(f"prompt {i} is empty", param="prompt")
            tokens = [model.bos_token_id]  # an empty prompt starts from the beginning of text
        if isinstance(item, str):
            out.append(Prompt(tokens, item, [item]))
        else:
            out.append(Prompt(tokens, model.detokenize(tokens), list(tokens)))
    return out
