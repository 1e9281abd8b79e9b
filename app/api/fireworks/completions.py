"""`POST /v1/completions`: prompts as text or token ids as a plan, and the engine's events as
text completions, whole or streamed."""

from __future__ import annotations

from dataclasses import dataclass, field

from litestar.response import Response
from msgspec import UNSET, UnsetType

from app.api.common.decode import decode_body
from app.api.common.extras import ChoiceExtras
from app.api.common.outputs import ChoiceLogprobs, UsageInfo
from app.api.common.streams import OPENAI_SSE
from app.api.common.timings import Timings
from app.api.common.violations import AnswerWatch
from app.api.fireworks.plan import completion_plan
from app.api.fireworks.requests import CompletionRequest
from app.api.fireworks.responses import (
    CompletionChoice,
    CompletionResponse,
    CompletionStreamResponse,
)
from app.pipeline.answer_check import SchemaViolation
from app.pipeline.errors import ApiError, ErrorResponse
from app.pipeline.prepare import PreparedRequest
from app.pipeline.run import ChoiceResult, RequestContext, answer, new_id, now
from app.pipeline.stream_buffer import Entry, Piece
from app.pipeline.usage import RequestClock, UsageCounter
from app.settings.api import ApiSettings


async def create_completion(context: RequestContext, settings: ApiSettings, body: bytes) -> Response:
    request = decode_body(body, CompletionRequest)
    plan = completion_plan(request, settings.max_logprobs)
    return await answer(context, plan, lambda prepared, clock: CompletionShaper(prepared, clock, request.model),
                        OPENAI_SSE)


@dataclass
class CompletionShaper:
    prepared: PreparedRequest
    clock: RequestClock
    model: str  # as the request named it
    id: str = field(default_factory=lambda: new_id("cmpl"))
    created: int = field(default_factory=now)
    extras: ChoiceExtras = field(init=False)
    watch: AnswerWatch = field(init=False)

    def __post_init__(self) -> None:
        self.extras = ChoiceExtras.of(self.prepared, self.clock)
        self.watch = AnswerWatch(self.prepared.check)

    # ---- a stream ----------------------------------------------------------------------------

    def _chunk(self, choices: list[CompletionChoice], usage: UsageInfo | UnsetType = UNSET,
               perf: dict[str, object] | UnsetType = UNSET,
               timings: Timings | UnsetType = UNSET) -> CompletionStreamResponse:
        return CompletionStreamResponse(self.id, self.created, self.model, choices, usage, perf_metrics=perf,
                                        timings=timings)

    def _choice(self, choice: int, text: str, *, logprobs: ChoiceLogprobs = None, prompt_ids: bool = False,
                tokens: list[int] | None = None, finish_reason: str | None = None) -> CompletionChoice:
        extras = self.extras
        return CompletionChoice(
            choice, text, finish_reason, logprobs,  # type: ignore[arg-type]
            prompt_token_ids=extras.prompt_ids(choice) if prompt_ids else UNSET,
            token_ids=extras.token_ids(tokens) if tokens is not None else UNSET,
        )

    def opening(self) -> list[CompletionStreamResponse]:
        """The echoed prompts (unless their log-probabilities are still to come) and prompt ids."""
        chunks = []
        for choice in range(self.extras.choice_count):
            echo = self.extras.echo(choice)
            if echo and self.extras.scores_prompt:
                echo = ""  # it goes out with its log-probabilities
            if echo or self.extras.options.token_ids:
                chunks.append(self._chunk([self._choice(choice, echo, prompt_ids=True)]))
        return chunks

    def prompt_scored(self, choice: int, entries: list[Entry]) -> list[CompletionStreamResponse]:
        logprobs = self.extras.prompt_logprobs(choice, entries)
        return [self._chunk([self._choice(choice, self.extras.echo(choice), logprobs=logprobs)])]

    def piece(self, choice: int, piece: Piece) -> list[CompletionStreamResponse]:
        extras = self.extras
        if not piece.text and not (extras.per_token and piece.tokens):
            return []
        extras.observe(choice, piece)
        self.watch.saw_text(choice, piece.text)
        logprobs = extras.logprobs(choice, piece.logprobs)
        return [self._chunk([self._choice(choice, piece.text, logprobs=logprobs, tokens=piece.tokens)])]

    def finished(self, choice: int, reason: str, last: bool, counter: UsageCounter) -> list[CompletionStreamResponse]:
        final = self._choice(choice, "", finish_reason=reason)
        final.raw_output = self.extras.stream_raw_output(choice)
        final.schema_violations = self.watch.report(choice, reason)
        perf, timings = UNSET, UNSET
        if last:
            perf, timings = self.extras.stream_perf(counter), self.extras.timings(counter)
        return [self._chunk([final], perf=perf, timings=timings)]

    def usage(self, counter: UsageCounter) -> CompletionStreamResponse:
        return self._chunk([], self.extras.usage(counter))

    def failed(self, error: ApiError) -> ErrorResponse:
        return error.body()

    # ---- a whole answer ----------------------------------------------------------------------

    def _whole_violations(self, choice: int, result: ChoiceResult) -> list[SchemaViolation] | UnsetType:
        self.watch.saw_text(choice, result.text)
        return self.watch.report(choice, result.finish_reason or "stop")

    def whole(self, results: list[ChoiceResult], counter: UsageCounter) -> Response:
        extras = self.extras
        choices = [
            CompletionChoice(
                i, extras.echo(i) + result.text, result.finish_reason,  # type: ignore[arg-type]
                extras.whole_logprobs(i, result),
                raw_output=extras.whole_raw_output(i, result),
                prompt_token_ids=extras.prompt_ids(i),
                token_ids=extras.token_ids(result.tokens),
                schema_violations=self._whole_violations(i, result),
            )
            for i, result in enumerate(results)
        ]
        perf = extras.perf(counter)
        body = CompletionResponse(self.id, self.created, self.model, choices, extras.usage(counter),
                                  perf_metrics=extras.body_perf(perf), timings=extras.timings(counter))
        return Response(body, headers=extras.headers(perf))
