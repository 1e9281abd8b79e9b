"""`POST /v1/chat/completions`: messages rendered with the model's own chat template."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

import msgspec
from litestar.response import Response, Stream
from litestar.types import Receive
from msgspec import UNSET, UnsetType

from app.chat_formats import chat_format
from app.choice_extras import ChoiceExtras, RequestLog
from app.errors import BadRequest
from app.generation import (
    StreamOptions,
    UsageCounter,
    collect,
    new_id,
    now,
    sse_response,
    submit,
    with_model,
)
from app.logprobs import Entry
from app.normalize import (
    NO_IMAGES,
    ReasoningFirst,
    answer_grammar,
    cache_keys,
    check_meaning,
    check_token_ids,
    compile_grammar,
    decode_request,
    draft_tokens,
    fit_max_tokens,
    include_usage,
    output_grammar,
    output_options,
    requested_max_tokens,
    sampling_params,
    stop_sequences,
    stream_buffer,
)
from app.perf_metrics import RequestClock
from app.reasoning_controls import prompt_reasoning_budget, reasoning_controls
from app.request_types import ChatCompletionRequest, ChatMessage, ResponseFormat
from app.response_types import (
    AssistantMessage,
    ChatChoice,
    ChatCompletionResponse,
    ChatCompletionStreamResponse,
    ChatStreamChoice,
    DeltaMessage,
    FunctionCall,
    FunctionCallDelta,
    InternalContent,
    ToolCallDelta,
    ToolCallOut,
    UsageInfo,
)
from app.settings import ApiSettings
from app.stream_buffer import Piece
from app.tools import ToolPlan, tool_plan
from backends.grammar import CompiledGrammar
from backends.jobs import GenerationJob, PromptSpec
from backends.llama_model import LlamaModel
from backends.reasoning_budget import ReasoningBudget
from backends.registry import Lease, ModelRegistry, ServedModel
from grammars.gbnf import prefix_rules
from grammars.reasoning_prefix import OPTIONAL_ROOT, with_free_text_first
from grammars.schema_errors import SchemaError
from templates.chat_format import ChatFormat
from templates.chat_output import ChatOutput, OutputEvent
from templates.chat_template import TemplateRenderError
from templates.families import ChannelFamily
from templates.prompt_fragments import fragment_tokens, special_vocab
from templates.reasoning import ReasoningError, ReasoningRequest
from templates.safe_prompt import (
    RenderedPrompt,
    SafeTokenizationError,
    prompt_from_render,
)
from templates.truncation import Truncation, truncate_conversation

log = logging.getLogger("fireside.chat")

ROLES = ("system", "developer", "user", "assistant", "tool")

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
            raise BadRequest(f"{NO_IMAGES}: messages[{index}].content[{j}] is {part.type}", param="messages")
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


FORMAT_PREFIX = "fireside-format-"
EITHER_ROOT = "fireside-either"


def call_grammar(served: ServedModel, chat: ChatFormat, tools: ToolPlan, room: ReasoningFirst | None,
                 response_format: ResponseFormat | None = None) -> CompiledGrammar:
    """The grammar that makes the answer a call (or calls) of the allowed tools, in the model's own
    syntax, with arguments valid under each tool's `parameters` (`auto`: text may come instead,
    or before the calls; with a `response_format`, the answer that is not a call follows it)."""
    allowed = [tool for tool in tools.tools if tool["function"]["name"] in tools.allowed]
    try:
        text = chat.tool_syntax.call_grammar(allowed, parallel=tools.parallel)
    except SchemaError as error:
        raise BadRequest(f"tools: {error}", param="tools") from None
    if tools.mode == "required":
        return compile_grammar(served, text, room, param="tools")
    answer = answer_grammar(response_format, room) if response_format is not None else None
    if answer is not None:
        # auto: the calls, or an answer in the requested format (each grammar keeps its own rules)
        text = (f"{text.rstrip()}\n{prefix_rules(answer.text, FORMAT_PREFIX).rstrip()}\n"
                f"{EITHER_ROOT} ::= root | {FORMAT_PREFIX}{answer.root}\n")
        return compile_grammar(served, text, room, param="response_format", root=EITHER_ROOT)
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
        raise BadRequest(f"{family.name} writes its answer after a channel header that Fireside cannot predict, so "
                         "its answer cannot be constrained: response_format and tools are refused for this "
                         "model's reasoning channels", param="response_format")
    assert family.reasoning_end is not None
    return ReasoningFirst(None if family.opens_reasoning(prompt) else family.reasoning_start, family.reasoning_end,
                          family.after_reasoning, family.answer_opener)


@dataclass
class ChatPrompt:
    text: str  # as the model sees it (the rendered template, or the given token ids as text)
    tokens: list[int]
    fragments: list[str | int]  # markup tokens and plain text (`raw_output.prompt_fragments`)
    reasoning_budget: ReasoningBudget | None
    truncation: Truncation | None = None


def _render(chat: ChatFormat, reasoning: ReasoningRequest):  # noqa: ANN202
    def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        try:
            return chat.render(messages, reasoning, tools=tools)
        except ReasoningError as error:
            raise BadRequest(str(error), param=error.param) from None
        except TemplateRenderError as error:
            raise BadRequest(str(error), param="messages", code="chat_template_error") from None
    return render


def chat_prompt(model: LlamaModel, chat: ChatFormat, messages: list[ChatMessage], reasoning: ReasoningRequest,
                tools: list[dict[str, Any]] | None = None, *, safe: bool | None = None,
                truncate_to: int | None = None) -> ChatPrompt:
    """The rendered, tokenized prompt. `safe` (`safe_tokenization`): True: user text never makes
    special tokens, or 400 when the template hides it; None: the same where it can apply; False:
    special-token text is a special token wherever it is. `truncate_to`: `prompt_truncate_len`."""
    render = _render(chat, reasoning)
    vocab = special_vocab(model)
    conversation = template_messages(messages)

    def build(conversation: list[dict[str, Any]]) -> RenderedPrompt:
        if safe is False:
            return prompt_from_render(render, conversation, tools, vocab, safe=False)
        try:
            return prompt_from_render(render, conversation, tools, vocab, safe=True)
        except SafeTokenizationError as error:
            if safe:
                raise BadRequest(f"safe_tokenization: {error}", param="safe_tokenization") from None
            return prompt_from_render(render, conversation, tools, vocab, safe=False)

    truncation = None
    if truncate_to is not None:
        truncation = truncate_conversation(conversation, lambda c: len(fragment_tokens(model, build(c).fragments)),
                                           truncate_to, model)
        conversation = truncation.messages
    rendered = build(conversation)
    return ChatPrompt(rendered.text, fragment_tokens(model, rendered.fragments), rendered.fragments,
                      prompt_reasoning_budget(model, chat, rendered.text, reasoning), truncation)


def token_prompt(model: LlamaModel, chat: ChatFormat, tokens: list[int], reasoning: ReasoningRequest) -> ChatPrompt:
    """`prompt_token_ids`: the prompt as given, no template; its text only tells the output parser
    where the prompt left off (inside a reasoning block, say)."""
    check_token_ids(tokens, model.n_vocab, "prompt_token_ids")
    if not tokens:
        raise BadRequest("prompt_token_ids must not be empty", param="prompt_token_ids")
    text = model.detokenize(tokens, special=True)
    return ChatPrompt(text, list(tokens), list(tokens), prompt_reasoning_budget(model, chat, text, reasoning))


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
    chat: ChatFormat
    prompt: str
    tool_names: set[str] | None
    extras: ChoiceExtras
    outputs: dict[int, ChatOutput] = field(default_factory=dict)

    def _chunk(self, choices: list[ChatStreamChoice], usage: UsageInfo | UnsetType = UNSET, *,
               perf: dict[str, object] | UnsetType = UNSET,
               prompt_ids: list[int] | UnsetType = UNSET) -> ChatCompletionStreamResponse:
        return ChatCompletionStreamResponse(self.id, self.created, self.model, choices, usage, perf_metrics=perf,
                                            prompt_token_ids=prompt_ids)

    def opening(self) -> list[ChatCompletionStreamResponse]:
        chunks = []
        for i in range(self.extras.choice_count):
            echo = "" if self.extras.scores_prompt else self.extras.echo(i)  # else it comes with its logprobs
            opening = ChatStreamChoice(i, DeltaMessage(role="assistant", content=echo), None, None)
            chunks.append(self._chunk([opening], prompt_ids=self.extras.prompt_ids(i)))
        return chunks

    def prompt_scored(self, choice: int, entries: list[Entry]) -> list[ChatCompletionStreamResponse]:
        logprobs = self.extras.prompt_logprobs(choice, entries)
        return [self._chunk([ChatStreamChoice(choice, DeltaMessage(content=self.extras.echo(choice)), None, logprobs)])]

    def _output(self, choice: int) -> ChatOutput:
        output = self.outputs.get(choice)
        if output is None:
            output = self.outputs[choice] = self.chat.output(self.prompt, self.tool_names)
        return output

    def _deltas(self, choice: int, events: list[OutputEvent]) -> list[ChatCompletionStreamResponse]:
        return [self._chunk([ChatStreamChoice(choice, _delta(event), None, None)]) for event in events]

    def piece(self, choice: int, piece: Piece) -> list[ChatCompletionStreamResponse]:
        chunks = self._deltas(choice, self._output(choice).feed(piece.text))
        extras = self.extras
        if not extras.per_token or not piece.tokens:
            return chunks
        # The piece's tokens ride on its first chunk (an empty delta while the parser holds text).
        extras.observe(choice, piece)
        if not chunks:
            chunks = [self._chunk([ChatStreamChoice(choice, DeltaMessage(), None, None)])]
        first = chunks[0].choices[0]
        first.logprobs = extras.logprobs(choice, piece.logprobs)
        first.token_ids = extras.token_ids(piece.tokens)
        if extras.options.internal_content:
            first.delta.internal_content = InternalContent(token_id=piece.tokens)
        return chunks

    def finished(self, choice: int, reason: str, last: bool, counter: UsageCounter) -> list[ChatCompletionStreamResponse]:
        output = self._output(choice)
        rest = self._deltas(choice, output.finish())
        final = ChatStreamChoice(choice, DeltaMessage(), _finish_reason(reason, output), None,
                                 raw_output=self.extras.stream_raw_output(choice))
        perf: dict[str, object] | UnsetType = UNSET
        if last:
            perf = self.extras.stream_perf(counter)
        return [*rest, self._chunk([final], perf=perf)]

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


def _safe_tokenization(request: ChatCompletionRequest) -> bool | None:
    if request.prompt_token_ids is not None:
        if request.safe_tokenization:
            raise BadRequest("safe_tokenization cannot apply to prompt_token_ids: there is no text to tokenize",
                             param="safe_tokenization")
        if request.prompt_truncate_len is not None:
            raise BadRequest("prompt_truncate_len evicts messages; it cannot apply to prompt_token_ids",
                             param="prompt_truncate_len")
    if request.prompt_truncate_len is not None and request.prompt_truncate_len < 1:
        raise BadRequest(f"prompt_truncate_len must be 1 or more, got {request.prompt_truncate_len}",
                         param="prompt_truncate_len")
    return request.safe_tokenization


async def create_chat_completion(registry: ModelRegistry, settings: ApiSettings, body: bytes,
                                 receive: Receive) -> Response | Stream:
    clock = RequestClock()
    request = decode_request(body, ChatCompletionRequest)
    check_meaning(request)
    return await with_model(registry, request.model, lambda lease: _chat(lease, request, settings, receive, clock))


async def _chat(lease: Lease, request: ChatCompletionRequest, settings: ApiSettings, receive: Receive,
                clock: RequestClock) -> Response | Stream:
    served = lease.served
    model = served.model
    options = output_options(request, settings.max_logprobs)
    safe = _safe_tokenization(request)
    tools = tool_plan(request)
    shown_tools = tools.tools if tools is not None and tools.mode != "none" else None
    chat = chat_format(served)
    reasoning = reasoning_controls(request)
    if request.prompt_token_ids is not None:
        prompt = token_prompt(model, chat, request.prompt_token_ids, reasoning)
    else:
        assert request.messages is not None
        prompt = await asyncio.to_thread(chat_prompt, model, chat, request.messages, reasoning, shown_tools,
                                         safe=safe, truncate_to=request.prompt_truncate_len)
        if prompt.truncation is not None and prompt.truncation.changed:
            log.info("prompt_truncate_len %d: left out %d messages, cut %d tokens of the system prompt",
                     request.prompt_truncate_len, prompt.truncation.evicted, prompt.truncation.system_tokens_cut)
    tokens = prompt.tokens
    max_tokens = fit_max_tokens(
        len(tokens), requested_max_tokens(request, served.defaults), None, served.engine.ctx_size,
        request.context_length_exceeded_behavior,
    )
    wants_grammar = request.response_format is not None and request.response_format.type != "text"
    if tools is not None and tools.mode != "none":
        room = reasoning_first(chat, prompt.text)
        grammar = await asyncio.to_thread(call_grammar, served, chat, tools, room, request.response_format)
    else:
        room = reasoning_first(chat, prompt.text) if wants_grammar else None
        grammar = await output_grammar(request, served, room)
    job = GenerationJob(
        prompts=(PromptSpec(tuple(tokens), max_tokens),),
        n=request.n,
        sampling=sampling_params(request, model.n_vocab, served.defaults),
        stop=stop_sequences(request, served.defaults),
        cache=cache_keys(request),
        stream=bool(request.stream),
        grammar=grammar,
        # tool-call markup is often made of special tokens: the parser must see it as text
        special_text=chat.family.special_markers or shown_tools is not None,
        reasoning_budget=prompt.reasoning_budget,
        logprobs=options.logprobs,
        draft=draft_tokens(request, model),
        priority=request.service_tier == "priority",
    )
    extras = ChoiceExtras.for_job(options, served, job, clock, request_log=RequestLog(request.metadata, request.user),
                                  fragments=[prompt.fragments], prompt_texts=[prompt.text])
    handle = submit(served, job)
    response_id, created = new_id("chatcmpl"), now()
    tool_names = set(tools.allowed) if tools is not None and tools.mode != "none" else None
    if request.stream:
        shape = ChatStreamShape(response_id, created, request.model, chat, prompt.text, tool_names, extras)
        return sse_response(handle, shape, StreamOptions(include_usage(request), stream_buffer(request)), clock,
                            on_close=lease.release)
    try:
        results, counter = await collect(handle, receive, clock)
    finally:
        lease.release()
    choices = []
    for i, result in enumerate(results):
        message, output = _message(chat, prompt.text, result.text, tool_names)
        if options.echo is not None:
            message.content = extras.echo(i) + (message.content or "")
        choices.append(ChatChoice(i, message, _finish_reason(result.finish_reason, output),
                                  extras.whole_logprobs(i, result), raw_output=extras.whole_raw_output(i, result),
                                  token_ids=extras.token_ids(result.tokens)))
    perf = extras.perf(counter)
    return Response(ChatCompletionResponse(response_id, created, request.model, choices, counter.usage(),
                                           perf_metrics=extras.body_perf(perf),
                                           prompt_token_ids=extras.prompt_ids(0)),
                    headers=extras.headers(perf))
