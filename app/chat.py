"""`POST /v1/chat/completions`: messages rendered with the model's own chat template."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import msgspec
from litestar.response import Response, Stream
from litestar.types import Receive
from msgspec import UNSET, UnsetType

from app.errors import BadRequest, NotSupportedYet
from app.generation import collect, new_id, now, resolve_model, sse_response, submit
from app.normalize import (
    ReasoningFirst,
    cache_keys,
    check_meaning,
    compile_grammar,
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
    FunctionCall,
    FunctionCallDelta,
    ToolCallDelta,
    ToolCallOut,
    UsageInfo,
)
from app.tools import ToolPlan, tool_plan
from backends.grammar import CompiledGrammar
from backends.jobs import GenerationJob, PromptSpec
from backends.llama_model import LlamaModel
from backends.reasoning_budget import ReasoningBudget
from backends.registry import ModelRegistry, ServedModel
from grammars.reasoning_prefix import OPTIONAL_ROOT, with_free_text_first
from grammars.schema_errors import SchemaError
from templates.chat_format import ChatFormat
from templates.chat_output import ChatOutput, OutputEvent
from templates.chat_template import CHATML_TEMPLATE, TemplateRenderError
from templates.families import ChannelFamily
from templates.reasoning import ReasoningError, ReasoningRequest, normalize_reasoning

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


def call_grammar(served: ServedModel, chat: ChatFormat, tools: ToolPlan, room: ReasoningFirst | None) -> CompiledGrammar:
    """The grammar that makes the answer a call (or calls) of the allowed tools, in the model's own
    syntax, with arguments valid under each tool's `parameters` (`auto`: text may come instead,
    or before the calls)."""
    allowed = [tool for tool in tools.tools if tool["function"]["name"] in tools.allowed]
    try:
        text = chat.tool_syntax.call_grammar(allowed, parallel=tools.parallel)
    except SchemaError as error:
        raise BadRequest(f"tools: {error}", param="tools") from None
    if tools.mode == "required":
        return compile_grammar(served, text, room, param="tools")
    # auto: text, or text and then calls; once the model writes the opener, the call must be valid
    text = with_free_text_first(text, opener=chat.tool_syntax.opener)
    return compile_grammar(served, text, room, param="tools", root=OPTIONAL_ROOT)


def reasoning_first(chat: ChatFormat, prompt: str) -> ReasoningFirst | None:
    """Where a `response_format` or tool-call grammar must leave room for reasoning first (None: nowhere)."""
    family = chat.family
    if not family.reasons or family.closes_reasoning(prompt):
        return None
    if isinstance(family, ChannelFamily) and not family.answer_opener:
        # the answer follows a channel header that this family does not describe
        raise NotSupportedYet(f"response_format or tools together with {family.name}'s reasoning channels")
    assert family.reasoning_end is not None
    return ReasoningFirst(None if family.opens_reasoning(prompt) else family.reasoning_start, family.reasoning_end,
                          family.after_reasoning, family.answer_opener)


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


def chat_prompt(model: LlamaModel, chat: ChatFormat, messages: list[ChatMessage], reasoning: ReasoningRequest,
                tools: list[dict[str, Any]] | None = None) -> ChatPrompt:
    try:
        text = chat.render(template_messages(messages), reasoning, tools=tools)
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


def _delta(event: OutputEvent) -> DeltaMessage:
    if event.kind == "content":
        return DeltaMessage(content=event.text)
    if event.kind == "reasoning":
        return DeltaMessage(reasoning_content=event.text)
    first = event.name is not None
    call = ToolCallDelta(event.index, FunctionCallDelta(event.text, event.name if first else UNSET),
                         event.id if first and event.id else UNSET, "function" if first else UNSET)
    return DeltaMessage(tool_calls=[call])


def _finish_reason(reason: str | None, output: ChatOutput) -> str | None:
    return "tool_calls" if reason == "stop" and output.calls else reason


@dataclass
class ChatStreamShape:
    id: str
    created: int
    model: str
    choice_count: int
    chat: ChatFormat
    prompt: str
    tool_names: set[str] | None
    outputs: dict[int, ChatOutput] = field(default_factory=dict)

    def _chunk(self, choices: list[ChatStreamChoice], usage: UsageInfo | UnsetType = UNSET) -> ChatCompletionStreamResponse:
        return ChatCompletionStreamResponse(self.id, self.created, self.model, choices, usage)

    def opening(self) -> list[ChatCompletionStreamResponse]:
        return [
            self._chunk([ChatStreamChoice(i, DeltaMessage(role="assistant", content=""), None, None)])
            for i in range(self.choice_count)
        ]

    def _output(self, choice: int) -> ChatOutput:
        output = self.outputs.get(choice)
        if output is None:
            output = self.outputs[choice] = self.chat.output(self.prompt, self.tool_names)
        return output

    def _deltas(self, choice: int, events: list[OutputEvent]) -> list[ChatCompletionStreamResponse]:
        return [self._chunk([ChatStreamChoice(choice, _delta(event), None, None)]) for event in events]

    def text(self, choice: int, text: str) -> list[ChatCompletionStreamResponse]:
        return self._deltas(choice, self._output(choice).feed(text))

    def finished(self, choice: int, reason: str) -> list[ChatCompletionStreamResponse]:
        output = self._output(choice)
        rest = self._deltas(choice, output.finish())
        return [*rest, self._chunk([ChatStreamChoice(choice, DeltaMessage(), _finish_reason(reason, output), None)])]

    def usage(self, usage: UsageInfo) -> ChatCompletionStreamResponse:
        return self._chunk([], usage)


def _message(chat: ChatFormat, prompt: str, text: str, tool_names: set[str] | None) -> tuple[AssistantMessage, ChatOutput]:
    output = chat.output(prompt, tool_names)
    events = output.feed(text) + output.finish()
    content = "".join(e.text for e in events if e.kind == "content")
    reasoning = "".join(e.text for e in events if e.kind == "reasoning")
    calls = [ToolCallOut(call.id or output.call_id(i), FunctionCall(call.name, call.arguments))
             for i, call in enumerate(output.calls)]
    message = AssistantMessage(role="assistant", content=content or (None if calls else ""),
                               reasoning_content=reasoning or UNSET, tool_calls=calls or UNSET)
    return message, output


async def create_chat_completion(registry: ModelRegistry, body: bytes, receive: Receive) -> Response | Stream:
    request = decode_request(body, ChatCompletionRequest)
    check_meaning(request)
    reject_unsupported(request)
    served = resolve_model(registry, request.model)
    assert request.messages is not None  # prompt_token_ids is refused above until supported
    tools = tool_plan(request)
    shown_tools = tools.tools if tools is not None and tools.mode != "none" else None
    chat = chat_format(served)
    prompt = chat_prompt(served.model, chat, request.messages, reasoning_controls(request), shown_tools)
    tokens = prompt.tokens
    max_tokens = fit_max_tokens(
        len(tokens), requested_max_tokens(request), None, served.engine.ctx_size,
        request.context_length_exceeded_behavior,
    )
    wants_grammar = request.response_format is not None and request.response_format.type != "text"
    if shown_tools is not None and wants_grammar:
        raise NotSupportedYet("response_format together with tools")
    if tools is not None and tools.mode != "none":
        grammar = await asyncio.to_thread(call_grammar, served, chat, tools, reasoning_first(chat, prompt.text))
    else:
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
        # tool-call markup is often made of special tokens: the parser must see it as text
        special_text=chat.family.special_markers or shown_tools is not None,
        reasoning_budget=prompt.reasoning_budget,
    )
    handle = submit(served, job)
    response_id, created = new_id("chatcmpl"), now()
    tool_names = set(tools.allowed) if tools is not None and tools.mode != "none" else None
    if request.stream:
        shape = ChatStreamShape(response_id, created, request.model, job.choice_count, chat, prompt.text, tool_names)
        return sse_response(handle, shape, include_usage=include_usage(request))
    results, usage = await collect(handle, receive)
    choices = []
    for i, result in enumerate(results):
        message, output = _message(chat, prompt.text, result.text, tool_names)
        choices.append(ChatChoice(i, message, _finish_reason(result.finish_reason, output), None))
    return Response(ChatCompletionResponse(response_id, created, request.model, choices, usage))
