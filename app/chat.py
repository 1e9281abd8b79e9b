"""`POST /v1/chat/completions`: messages rendered with the model's own chat template."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType
from litestar.response import Response, Stream
from litestar.types import Receive

from app.errors import BadRequest, NotSupportedYet
from app.generation import collect, new_id, now, resolve_model, sse_response, submit
from app.normalize import (
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
from templates.chat_template import CHATML_TEMPLATE, ChatTemplate, TemplateRenderError

ROLES = ("system", "developer", "user", "assistant", "tool")

_templates: dict[str, ChatTemplate] = {}


def chat_template(served: ServedModel) -> ChatTemplate:
    """The model's own template from its GGUF metadata (ChatML when it has none), compiled once."""
    template = _templates.get(served.id)
    if template is None:
        model = served.model
        bos = model.token_text(model.bos_token_id) if model.bos_token_id >= 0 else ""
        eos = model.token_text(model.eos_token_id) if model.eos_token_id >= 0 else ""
        template = ChatTemplate(model.chat_template() or CHATML_TEMPLATE, bos_token=bos, eos_token=eos)
        _templates[served.id] = template
    return template


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


def chat_prompt_tokens(served: ServedModel, messages: list[ChatMessage]) -> list[int]:
    model: LlamaModel = served.model
    template = chat_template(served)
    try:
        text = template.render(template_messages(messages), add_generation_prompt=True)
    except TemplateRenderError as error:
        raise BadRequest(str(error), param="messages", code="chat_template_error") from None
    # Templates usually write the BOS token themselves; do not add a second one.
    add_special = model.add_bos
    if add_special and template.bos_token and text.startswith(template.bos_token):
        text = text[len(template.bos_token):]
    return model.tokenize(text, add_special=add_special, parse_special=True)


@dataclass
class ChatStreamShape:
    id: str
    created: int
    model: str
    choice_count: int

    def _chunk(self, choices: list[ChatStreamChoice], usage: UsageInfo | UnsetType = UNSET) -> ChatCompletionStreamResponse:
        return ChatCompletionStreamResponse(self.id, self.created, self.model, choices, usage)

    def opening(self) -> list[ChatCompletionStreamResponse]:
        return [
            self._chunk([ChatStreamChoice(i, DeltaMessage(role="assistant", content=""), None, None)])
            for i in range(self.choice_count)
        ]

    def text(self, choice: int, text: str) -> ChatCompletionStreamResponse:
        return self._chunk([ChatStreamChoice(choice, DeltaMessage(content=text), None, None)])

    def finished(self, choice: int, reason: str) -> ChatCompletionStreamResponse:
        return self._chunk([ChatStreamChoice(choice, DeltaMessage(), reason, None)])

    def usage(self, usage: UsageInfo) -> ChatCompletionStreamResponse:
        return self._chunk([], usage)


async def create_chat_completion(registry: ModelRegistry, body: bytes, receive: Receive) -> Response | Stream:
    request = decode_request(body, ChatCompletionRequest)
    check_meaning(request)
    reject_unsupported(request)
    served = resolve_model(registry, request.model)
    assert request.messages is not None  # prompt_token_ids is refused above until supported
    tokens = chat_prompt_tokens(served, request.messages)
    max_tokens = fit_max_tokens(
        len(tokens), requested_max_tokens(request), None, served.engine.ctx_size,
        request.context_length_exceeded_behavior,
    )
    grammar = await output_grammar(request, served)
    job = GenerationJob(
        prompts=(PromptSpec(tuple(tokens), max_tokens),),
        n=request.n,
        sampling=sampling_params(request, served.model.n_vocab),
        stop=stop_sequences(request),
        cache=cache_keys(request),
        stream=bool(request.stream),
        grammar=grammar,
    )
    handle = submit(served, job)
    response_id, created = new_id("chatcmpl"), now()
    if request.stream:
        shape = ChatStreamShape(response_id, created, request.model, job.choice_count)
        return sse_response(handle, shape, include_usage=include_usage(request))
    results, usage = await collect(handle, receive)
    choices = [
        ChatChoice(i, AssistantMessage(role="assistant", content=result.text), result.finish_reason, None)
        for i, result in enumerate(results)
    ]
    return Response(ChatCompletionResponse(response_id, created, request.model, choices, usage))
