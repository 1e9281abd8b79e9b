"""The engine's events as TGI's answers: one `GenerateResponse` (a list of one on `POST /`, as
TGI's compatibility route answers), or server-sent `StreamResponse` events, one per token.

A stream's last event carries the last token together with `generated_text` and `details`, so
each token event goes out when the next one arrives (or the choice ends): the one-token lag
lets every event carry a real token, as TGI's do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from litestar.response import Response
from msgspec import UNSET

from app.api.common.extras import ChoiceExtras
from app.api.common.logprobs import TokenTexts, token_texts
from app.api.common.violations import AnswerWatch
from app.api.tgi.plan import TgiAnswer
from app.api.tgi.wire import (
    BestOfSequence,
    Details,
    FinishReason,
    GenerateResponse,
    PrefillToken,
    StreamDetails,
    StreamResponse,
    TgiError,
    Token,
)
from app.pipeline.errors import ApiError
from app.pipeline.prepare import PreparedRequest
from app.pipeline.run import ChoiceResult
from app.pipeline.stream_buffer import Entry, Piece
from app.pipeline.usage import RequestClock, UsageCounter

# TGI's `error_type` by status: its validation errors are 422, an overloaded queue 429
ERROR_TYPES = {404: "not_found", 429: "overloaded", 503: "overloaded", 401: "authentication"}


UNKNOWN_TOKEN = -1  # the id of a token an upstream server generated (it sends text, not ids)


def error_body(status: int, message: str) -> TgiError:
    return TgiError(message, ERROR_TYPES.get(status, "generation" if status >= 500 else "validation"))


def finish_reason(reason: str, stop_sequence: str | None) -> FinishReason:
    if reason == "length":
        return "length"
    return "stop_sequence" if stop_sequence is not None else "eos_token"


@dataclass
class TgiShaper:
    prepared: PreparedRequest
    clock: RequestClock
    answer: TgiAnswer
    listed: bool = False  # `POST /` answers a list of one response
    extras: ChoiceExtras = field(init=False)
    texts: TokenTexts | None = field(init=False)  # None: an upstream answers (no vocabulary here)
    pending: StreamResponse | None = None  # the latest token event, held until the next one
    parts: list[str] = field(default_factory=list)  # the streamed text so far
    watch: AnswerWatch = field(init=False)

    def __post_init__(self) -> None:
        self.extras = ChoiceExtras.of(self.prepared, self.clock)
        self.watch = AnswerWatch(self.prepared.check)
        served = self.prepared.served
        self.texts = token_texts(served.model) if served is not None else None

    def _token(self, token: int, logprob: float | None, text: str | None = None) -> Token:
        assert self.texts is not None
        known = self.texts.get(token)
        return Token(token, known.text if text is None else text, logprob, bool(known.piece) and not known.plain)

    def _tokens(self, entries: list[Entry]) -> tuple[list[Token], list[list[Token]]]:
        tokens, tops = [], []
        for token, scored in entries:
            assert scored is not None  # generated tokens always have their scores when asked for
            tokens.append(self._token(token, scored.logprob))
            tops.append([self._token(top, logprob) for top, logprob in scored.top])
        return tokens, tops

    # ---- a stream ----------------------------------------------------------------------------

    def opening(self) -> list[StreamResponse]:
        return []

    def prompt_scored(self, choice: int, entries: list[Entry]) -> list[StreamResponse]:
        return []  # the plan refuses prompt scores on a stream

    def piece(self, choice: int, piece: Piece) -> list[StreamResponse]:
        self.extras.observe(choice, piece)
        self.parts.append(piece.text)
        if self.texts is None:  # an upstream's chunk: its text, with no token id or score known here
            if not piece.text:
                return []
            out = [self.pending] if self.pending is not None else []
            self.pending = StreamResponse(0, Token(UNKNOWN_TOKEN, piece.text, None, False))
            return out
        if not piece.tokens:  # text held back for a stop sequence, released: it joins the held token
            if self.pending is not None:
                self.pending.token.text += piece.text
            return []
        out = [self.pending] if self.pending is not None else []
        (token, scored), = piece.logprobs
        assert scored is not None
        event = StreamResponse(0, self._token(token, scored.logprob, piece.text))
        if self.answer.top_n:
            event.top_tokens = [self._token(top, logprob) for top, logprob in scored.top]
        self.pending = event
        return out

    def finished(self, choice: int, reason: str, last: bool, counter: UsageCounter) -> list[StreamResponse]:
        event = self.pending
        self.pending = None
        if event is None:  # ended before any token of text: the end-of-text token is the event
            served = self.prepared.served
            event = StreamResponse(0, Token(served.model.eos_token_id if served is not None else UNKNOWN_TOKEN, "",
                                            None, True))
        event.generated_text = self.answer.full_text + "".join(self.parts)
        event.details = StreamDetails(finish_reason(reason, counter.stop_sequences.get(choice)),
                                      counter.generated.get(choice, 0), self.answer.seed,
                                      len(self.prepared.job.prompts[0].tokens) or counter.prompt_tokens)
        event.raw_output = self.extras.stream_raw_output(choice)
        event.perf_metrics = self.extras.stream_perf(counter)
        self.watch.saw_text(choice, "".join(self.parts))
        event.schema_violations = self.watch.report(choice, reason)
        return [event]

    def usage(self, counter: UsageCounter) -> None:
        return None  # TGI's streams carry no usage event (the plan never asks for one)

    def failed(self, error: ApiError) -> TgiError:
        return error_body(error.status_code, error.message)

    # ---- a whole answer ----------------------------------------------------------------------

    def _prefill(self, result: ChoiceResult) -> list[PrefillToken]:
        if not self.answer.prefill:
            return []
        prompt = self.prepared.job.prompts[0].tokens
        scored = {len(prompt) - len(result.prompt_logprobs or []) + i: entry
                  for i, entry in enumerate(result.prompt_logprobs or [])}
        out = []
        for position, token in enumerate(prompt):
            entry = scored.get(position)
            logprob = entry[1].logprob if entry is not None and entry[1] is not None else None
            out.append(PrefillToken(token, self.texts.get(token).text, logprob))
        return out

    def _sequence(self, result: ChoiceResult, choice: int, counter: UsageCounter) -> BestOfSequence:
        tokens, tops = self._tokens(result.logprobs) if self.answer.tokens else ([], [])
        return BestOfSequence(
            self.answer.full_text + result.text,
            finish_reason(result.finish_reason or "length", counter.stop_sequences.get(choice)),
            counter.generated.get(choice, len(result.tokens)), self.answer.seed, self._prefill(result), tokens,
            tops if self.answer.top_n else UNSET)

    def whole(self, results: list[ChoiceResult], counter: UsageCounter) -> Response:
        best = 0
        if len(results) > 1:  # `best_of`: the sequence the model finds most likely
            best = max(range(len(results)),
                       key=lambda i: sum(scored.logprob for _, scored in results[i].logprobs if scored is not None))
        sequences = [self._sequence(result, i, counter) for i, result in enumerate(results)]
        chosen = sequences[best]
        body = GenerateResponse(chosen.generated_text)
        if self.answer.details:
            others = [sequence for i, sequence in enumerate(sequences) if i != best]
            body.details = Details(chosen.finish_reason, chosen.generated_tokens, chosen.seed, chosen.prefill,
                                   chosen.tokens, others if others else UNSET, chosen.top_tokens)
        body.raw_output = self.extras.whole_raw_output(best, results[best])
        self.watch.saw_text(best, results[best].text)
        body.schema_violations = self.watch.report(best, results[best].finish_reason or "stop")
        perf = self.extras.perf(counter)
        body.perf_metrics = self.extras.body_perf(perf)
        elapsed = self.clock.finished - self.clock.started if self.clock.finished else 0.0
        headers = {**self.extras.headers(perf), "x-prompt-tokens": str(counter.prompt_tokens),
                   "x-generated-tokens": str(chosen.generated_tokens), "x-compute-time": f"{elapsed:.6f}",
                   "x-total-time": str(round(elapsed * 1000))}
        return Response([body] if self.listed else body, headers=headers)
