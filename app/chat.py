"""`POST /v1/chat/completions`: messages rendered with the model's own chat template."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType
from litestar.response import Response, Stream
from litestar.types import Receive

from app.errors import BadRequest, NotSupportedYet
from app.generation import collect, new_id, now, resolve_model, sse_response, submit
from app.normalize import (
    ReasoningFirst,
    cache_keys,
    check_meaning,
    decode_request,
    fit_max_tokens,
    include_usage,
    output_grammar,
    reject_unsupported,
    requested_max_tokens,
    sampling_params,
    stop_sequences,
)
from app.request_types import ChatCompletionRequest, ChatMessage
from app.response_types import (
    AssistantMessage,
    ChatChoice,
    ChatCompletionResponse,
    ChatCompletionStreamResponse,
    ChatStreamChoice,
    DeltaMessage,
    UsageInfo,
)
from backends.jobs import GenerationJob, PromptSpec
from backends.llama_model import LlamaModel
from backends.registry import ModelRegistry, ServedModel
from backends.reasoning_budget import ReasoningBudget
from templates.chat_format import ChatFormat
from templates.families import ChannelFamily
from templates.chat_template import CHATML_TEMPLATE, TemplateRenderError
from templates.reasoning import ReasoningError, ReasoningRequest, normalize_reasoning
from templates.reasoning_parser import ReasoningParser

ROLES = ("system", "developer", "user", "assistant", "tool")

_formats: dict[str, ChatFormat] = {}


def chat_format(served: ServedModel) -> ChatFormat:
    """The model's chat format: `--chat-template`, else the GGUF's own template (ChatML when it
    has none), with its family; built once per model."""
    chat = _formats.get(served.id)
    if chat is None:
        model = served.model
        bos = model.token_text(model.bos_token_id) if model.bos_token_id >= 0 else ""
        eos = model.token_text(model.eos_token_id) if model.eos_token_id >= 0 else ""
        source = served.chat_template or model.chat_template() or CHATML_TEMPLATE
        chat = _formats[served.id] = ChatFormat(source, bos_token=bos, eos_token=eos)
    return chat


def _content_text(message: ChatMessage, index: int) -> str | None:
    content = message.content
    if content is None or isinstance(content, str):
        return content
    texts = []
    for j, part in enumerate(content):
        if part.type == "text":
            if part.text is None:
                raise BadRequest(f"messages[{index}].content[{j}] is a text part without text", param="messages")
            texts.append(part.text)
        elif part.type in ("image_url", "video_url"):
            raise NotSupportedYet(f"messages[{index}].content[{j}].{part.type}")
        else:
            raise BadRequest(f"messages[{index}].content[{j}] has unknown type {part.type!r}", param="messages")
    return "\n".join(texts)  # text parts joined as vLLM joins them for string-content templates


def template_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """The conversation as the plain dicts that chat templates read."""
    if not messages:
        raise BadRequest("messages must hold at least one message", param="messages")
    rendered = []
    for i, message in enumerate(messages):
        if message.role not in ROLES:
            raise BadRequest(f"messages[{i}].role {message.role!r} is not one of {', '.join(ROLES)}", param="messages")
        item = msgspec.to_builtins(message)
        item["content"] = _content_text(message, i) or ""
        if message.role == "developer":
            item["role"] = "system"  # OpenAI's newer name for the system role
        rendered.append(item)
    return rendered


def reasoning_first(chat: ChatFormat, prompt: str) -> ReasoningFirst | None:
    """Where a `response_format` grammar must leave room for reasoning first (None: nowhere)."""
    family = chat.family
    if not family.reasons or family.closes_reasoning(prompt):
        return None
    if isinstance(family, ChannelFamily):
        # the answer follows a channel header, not just the end of the reasoning
        raise NotSupportedYet(f"response_format together with {family.name}'s reasoning channels")
    assert family.reasoning_end is not None
    return ReasoningFirst(None if family.opens_reasoning(prompt) else family.reasoning_start, family.reasoning_end)


@dataclass
class ChatPrompt:
    text: str
    tokens: list[int]
    reasoning_budget: ReasoningBudget | None


def reasoning_controls(request: ChatCompletionRequest) -> ReasoningRequest:
    try:
        return normalize_reasoning(request.reasoning_effort, request.thinking, request.reasoning_history)
    except ReasoningError as error:
        raise BadRequest(str(error), param=error.param) from None


def chat_prompt(served: ServedModel, messages: list[ChatMessage], reasoning: ReasoningRequest) -> ChatPrompt:
    model: LlamaModel = served.model
    chat = chat_format(served)
    try:
        text = chat.render(template_messages(messages), reasoning)
    except ReasoningError as error:
        raise BadRequest(str(error), param=error.param) from None
    except TemplateRenderError as error:
        raise BadRequest(str(error), param="messages", code="chat_template_error") from None
    # Templates usually write the BOS token themselves; do not add a second one.
    add_special = model.add_bos
    bos = chat.template.bos_token
    tokens = model.tokenize(text[len(bos):] if add_special and bos and text.startswith(bos) else text,
                            add_special=add_special, parse_special=True)
    budget = None
    capped = chat.reasoning_budget(text, reasoning)
    if capped is not None:
        start, end, closing = capped
        assert reasoning.budget_tokens is not None
        budget = ReasoningBudget(reasoning.budget_tokens, start, end,
                                 tuple(model.tokenize(closing, add_special=False, parse_special=True)))
    return ChatPrompt(text, tokens, budget)


@dataclass
class ChatStreamShape:
    id: str
    created: int
    model: str
    choice_count: int
    chat: ChatFormat
    prompt: str
    parsers: dict[int, ReasoningParser] = field(default_factory=dict)

    def _chunk(self, choices: list[ChatStreamChoice], usage: UsageInfo | UnsetType = UNSET) -> ChatCompletionStreamResponse:
        return ChatCompletionStreamResponse(self.id, self.created, self.model, choices, usage)

    def opening(self) -> list[ChatCompletionStreamResponse]:
        return [
            self._chunk([ChatStreamChoice(i, DeltaMessage(role="assistant", content=""), None, None)])
            for i in range(self.choice_count)
        ]

    def _parser(self, choice: int) -> ReasoningParser:
        parser = self.parsers.get(choice)
        if parser is None:
            parser = self.parsers[choice] = self.chat.parser(self.prompt)
        return parser

    def _deltas(self, choice: int, pieces: list[tuple[str, str]]) -> list[ChatCompletionStreamResponse]:
        return [
            self._chunk([ChatStreamChoice(choice, DeltaMessage(content=text) if kind == "content"
                                          else DeltaMessage(reasoning_content=text), None, None)])
            for kind, text in pieces if text
        ]

    def text(self, choice: int, text: str) -> list[ChatCompletionStreamResponse]:
        return self._deltas(choice, self._parser(choice).feed(text))

    def finished(self, choice: int, reason: str) -> list[ChatCompletionStreamResponse]:
        rest = self._deltas(choice, self._parser(choice).finish())
        return [*rest, self._chunk([ChatStreamChoice(choice, DeltaMessage(), reason, None)])]

    def usage(self, usage: UsageInfo) -> ChatCompletionStreamResponse:
        return self._chunk([], usage)


async def create_chat_completion(registry: ModelRegistry, body: bytes, receive: Receive) -> Response | Stream:
    request = decode_request(body, ChatCompletionRequest)
    check_meaning(request)
    reject_unsupported(request)
    served = resolve_model(registry, request.model)
    assert request.messages is not None  # prompt_token_ids is refused above until supported
    prompt = chat_prompt(served, request.messages, reasoning_controls(request))
    tokens = prompt.tokens
    max_tokens = fit_max_tokens(
        len(tokens), requested_max_tokens(request), None, served.engine.ctx_size,
        request.context_length_exceeded_behavior,
    )
    chat = chat_format(served)
    wants_grammar = request.response_format is not None and request.response_format.type != "text"
    room = reasoning_first(chat, prompt.text) if wants_grammar else None
    grammar = await output_grammar(request, served, room)
    job = GenerationJob(
        prompts=(PromptSpec(tuple(tokens), max_tokens),),
        n=request.n,
        sampling=sampling_params(request, served.model.n_vocab),
        stop=stop_sequences(request),
        cache=cache_keys(request),
        stream=bool(request.stream),
        grammar=grammar,
        special_text=chat.family.special_markers,
        reasoning_budget=prompt.reasoning_budget,
    )
    handle = submit(served, job)
    response_id, created = new_id("chatcmpl"), now()
    if request.stream:
        shape = ChatStreamShape(response_id, created, request.model, job.choice_count, chat, prompt.text)
        return sse_response(handle, shape, include_usage=include_usage(request))
    results, usage = await collect(handle, receive)
    choices = []
    for i, result in enumerate(results):
        content, reasoning = chat.split(prompt.text, result.text)
        message = AssistantMessage(role="assistant", content=content, reasoning_content=reasoning or UNSET)
        choices.append(ChatChoice(i, message, result.finish_reason, None))
    return Response(ChatCompletionResponse(response_id, created, request.model, choices, usage))
