"""`POST /v1/chat/completions`: the body as a plan, and the engine's events as chat completions
(whole, or `chat.completion.chunk` events). The model's output is parsed into content,
`reasoning_content` and `tool_calls` by its chat format."""

from __future__ import annotations

from dataclasses import dataclass, field

from litestar.response import Response
from msgspec import UNSET, UnsetType

from app.api.common.decode import decode_body
from app.api.common.extras import ChoiceExtras
from app.api.common.outputs import UsageInfo
from app.api.common.streams import OPENAI_SSE
from app.api.common.timings import Timings
from app.api.common.violations import AnswerWatch
from app.api.fireworks.plan import chat_plan
from app.api.fireworks.requests import ChatCompletionRequest
from app.api.fireworks.responses import (
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
)
from app.pipeline.errors import ApiError, ErrorResponse
from app.pipeline.output import OutputReader
from app.pipeline.prepare import PreparedRequest
from app.pipeline.run import ChoiceResult, RequestContext, answer, new_id, now
from app.pipeline.stream_buffer import Entry, Piece
from app.pipeline.usage import RequestClock, UsageCounter
from app.settings.api import ApiSettings
from templates.chat_output import OutputEvent


async def create_chat_completion(context: RequestContext, settings: ApiSettings, body: bytes) -> Response:
    request = decode_body(body, ChatCompletionRequest)
    plan = chat_plan(request, settings.max_logprobs)
    return await answer(context, plan, lambda prepared, clock: ChatShaper(prepared, clock, request.model),
                        OPENAI_SSE)


def _delta(event: OutputEvent) -> DeltaMessage:
    if event.kind == "content":
        return DeltaMessage(content=event.text)
    if event.kind == "reasoning":
        return DeltaMessage(reasoning_content=event.text)
    first = event.name is not None
    call = ToolCallDelta(event.index, FunctionCallDelta(event.text, event.name if first else UNSET),
                         event.id if first and event.id else UNSET, "function" if first else UNSET)
    return DeltaMessage(tool_calls=[call])


def _finish_reason(reason: str | None, output: OutputReader) -> str | None:
    return "tool_calls" if reason == "stop" and output.calls else reason


@dataclass
class ChatShaper:
    prepared: PreparedRequest
    clock: RequestClock
    model: str  # as the request named it
    id: str = field(default_factory=lambda: new_id("chatcmpl"))
    created: int = field(default_factory=now)
    outputs: dict[int, OutputReader] = field(default_factory=dict)
    extras: ChoiceExtras = field(init=False)
    watch: AnswerWatch = field(init=False)

    def __post_init__(self) -> None:
        self.extras = ChoiceExtras.of(self.prepared, self.clock)
        self.watch = AnswerWatch(self.prepared.check)

    # ---- a stream ----------------------------------------------------------------------------

    def _chunk(self, choices: list[ChatStreamChoice], usage: UsageInfo | UnsetType = UNSET, *,
               perf: dict[str, object] | UnsetType = UNSET, timings: Timings | UnsetType = UNSET,
               prompt_ids: list[int] | UnsetType = UNSET) -> ChatCompletionStreamResponse:
        return ChatCompletionStreamResponse(self.id, self.created, self.model, choices, usage, perf_metrics=perf,
                                            timings=timings, prompt_token_ids=prompt_ids)

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

    def _output(self, choice: int) -> OutputReader:
        output = self.outputs.get(choice)
        if output is None:
            output = self.outputs[choice] = self.prepared.output_parser()
        return output

    def _deltas(self, choice: int, events: list[OutputEvent]) -> list[ChatCompletionStreamResponse]:
        self.watch.saw(choice, events)
        return [self._chunk([ChatStreamChoice(choice, _delta(event), None, None)]) for event in events]

    def piece(self, choice: int, piece: Piece) -> list[ChatCompletionStreamResponse]:
        chunks = self._deltas(choice, self._output(choice).feed(piece))
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
                                 raw_output=self.extras.stream_raw_output(choice),
                                 schema_violations=self.watch.report(choice, reason, output.calls))
        perf: dict[str, object] | UnsetType = UNSET
        timings: Timings | UnsetType = UNSET
        if last:
            perf, timings = self.extras.stream_perf(counter), self.extras.timings(counter)
        return [*rest, self._chunk([final], perf=perf, timings=timings)]

    def usage(self, counter: UsageCounter) -> ChatCompletionStreamResponse:
        return self._chunk([], self.extras.usage(counter))

    def failed(self, error: ApiError) -> ErrorResponse:
        return error.body()

    # ---- a whole answer ----------------------------------------------------------------------

    def _message(self, choice: int, result: ChoiceResult) -> tuple[AssistantMessage, OutputReader]:
        output = self.prepared.output_parser()
        events = output.feed(result.piece()) + output.finish()
        self.watch.saw(choice, events)
        content = "".join(e.text for e in events if e.kind == "content")
        reasoning = "".join(e.text for e in events if e.kind == "reasoning")
        calls = [ToolCallOut(call.id or output.call_id(i), FunctionCall(call.name, call.arguments))
                 for i, call in enumerate(output.calls)]
        message = AssistantMessage(role="assistant", content=content or (None if calls else ""),
                                   reasoning_content=reasoning or UNSET, tool_calls=calls or UNSET)
        return message, output

    def whole(self, results: list[ChoiceResult], counter: UsageCounter) -> Response:
        extras = self.extras
        choices = []
        for i, result in enumerate(results):
            message, output = self._message(i, result)
            violations = self.watch.report(i, result.finish_reason or "stop", output.calls)
            if extras.options.echo is not None:
                message.content = extras.echo(i) + (message.content or "")
            choices.append(ChatChoice(i, message, _finish_reason(result.finish_reason, output),
                                      extras.whole_logprobs(i, result), raw_output=extras.whole_raw_output(i, result),
                                      token_ids=extras.token_ids(result.tokens), schema_violations=violations))
        perf = extras.perf(counter)
        body = ChatCompletionResponse(self.id, self.created, self.model, choices, extras.usage(counter),
                                      perf_metrics=extras.body_perf(perf), timings=extras.timings(counter),
                                      prompt_token_ids=extras.prompt_ids(0))
        return Response(body, headers=extras.headers(perf))
