"""The engine's events as llama-server's `/completion` answers: one object (a list of them for
several prompts or `n_cmpl`), or server-sent events, one per token (`stop: false`), then each
choice's last event (`stop: true`) with the settings, the stop type and the `timings`. Nothing
ends the stream but the last choice's event, as llama-server's native stream has no `[DONE]`."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import msgspec
from litestar.response import Response
from msgspec import UNSET

from app.api.common.logprobs import TokenTexts, token_texts
from app.api.common.timings import timings
from app.api.llamacpp.plan import CompletionAnswer
from app.api.llamacpp.tokens import valid_prefix
from app.api.llamacpp.wire import (
    LlamaCompletionChunk,
    LlamaCompletionResponse,
    LlamaError,
    LlamaErrorBody,
    StopType,
    TokenProbability,
    TopProbability,
)
from app.pipeline.errors import ApiError
from app.pipeline.prepare import PreparedRequest
from app.pipeline.run import ChoiceResult
from app.pipeline.stream_buffer import Entry, Piece
from app.pipeline.usage import RequestClock, UsageCounter

SLOT = 0  # `id_slot`: Fireside's slots are its engine's, not named to clients
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 501: "not_supported_error", 503: "unavailable_error"}


def error_body(status: int, message: str) -> LlamaError:
    """llama-server's `{"error": {"code", "message", "type"}}` (`format_error_response`)."""
    kind = ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return LlamaError(LlamaErrorBody(status, message, kind))


def stop_type(reason: str, stop_sequence: str | None) -> StopType:
    if reason == "length":
        return "limit"
    return "word" if stop_sequence is not None else "eos"


@dataclass
class CompletionShaper:
    prepared: PreparedRequest
    clock: RequestClock
    answer: CompletionAnswer
    model: str
    texts: TokenTexts = field(init=False)
    predicted: dict[int, int] = field(default_factory=dict)  # per streamed choice: its tokens so far
    newline: set[int] = field(default_factory=set)  # streamed choices whose text has had a newline
    first_piece: float | None = None  # when the stream's first token came (`timings_per_token`)

    def __post_init__(self) -> None:
        served = self.prepared.served
        assert served is not None  # `acquire_model` refused an upstream model before the plan ran
        self.texts = token_texts(served.model)

    def _prompt_tokens(self, choice: int) -> tuple[int, ...]:
        return self.prepared.job.prompts[choice // self.prepared.job.n].tokens

    def _probabilities(self, entries: list[Entry]) -> list[TokenProbability]:
        out = []
        for token, scored in entries:
            assert scored is not None  # asked for with n_probs, so always computed
            piece = self.texts.get(token).piece
            out.append(TokenProbability(token, valid_prefix(piece), list(piece), scored.logprob, [
                TopProbability(top, valid_prefix(self.texts.get(top).piece), self.texts.get(top).bytes, logprob)
                for top, logprob in scored.top]))
        return out

    def _final(self, choice: int, text: str, tokens: list[int], reason: str, counter: UsageCounter,
               predicted: int, newline: bool) -> LlamaCompletionResponse:
        prompt = self._prompt_tokens(choice)
        served = self.prepared.served
        assert served is not None
        unbounded = self.prepared.plan.max_tokens is None
        return LlamaCompletionResponse(
            choice, text, tokens if self.answer.return_tokens else [], SLOT, True, self.model, predicted,
            len(prompt), self.answer.settings | {"n_ctx": served.engine.ctx_size},
            served.model.detokenize(list(prompt), special=True), newline,
            reason == "length" and unbounded, stop_type(reason, counter.stop_sequences.get(choice)),
            counter.stop_sequences.get(choice) or "", len(prompt) + predicted,
            timings(self.clock, counter))

    # ---- a stream ----------------------------------------------------------------------------

    def opening(self) -> list[Any]:
        return []

    def prompt_scored(self, choice: int, entries: list[Entry]) -> list[Any]:
        return []  # the plan never asks for the prompt's scores

    def piece(self, choice: int, piece: Piece) -> list[Any]:
        if not piece.text and not piece.tokens:
            return []
        predicted = self.predicted[choice] = self.predicted.get(choice, 0) + len(piece.tokens)
        if "\n" in piece.text:
            self.newline.add(choice)
        chunk = LlamaCompletionChunk(choice, piece.text, list(piece.tokens), False, SLOT, predicted,
                                len(self._prompt_tokens(choice)))
        if self.answer.n_probs and piece.logprobs:
            chunk.completion_probabilities = self._probabilities(piece.logprobs)
        if self.answer.timings_per_token:
            if self.first_piece is None:
                self.first_piece = time.perf_counter()
            chunk.timings = timings(self.clock, UsageCounter(1), len(self._prompt_tokens(choice)), predicted,
                                    self.first_piece)
        return [chunk]

    def finished(self, choice: int, reason: str, last: bool, counter: UsageCounter) -> list[Any]:
        return [self._final(choice, "", [], reason, counter, counter.generated.get(choice, 0),
                            choice in self.newline)]

    def usage(self, counter: UsageCounter) -> None:
        return None  # llama-server's stream carries no usage event (the plan never asks for one)

    def failed(self, error: ApiError) -> LlamaError:
        return error_body(error.status_code, error.message)

    # ---- a whole answer ----------------------------------------------------------------------

    def whole(self, results: list[ChoiceResult], counter: UsageCounter) -> Response:
        bodies = []
        for choice, result in enumerate(results):
            body = self._final(choice, result.text, list(result.tokens), result.finish_reason or "length", counter,
                               counter.generated.get(choice, len(result.tokens)), "\n" in result.text)
            if self.answer.n_probs:
                body.completion_probabilities = self._probabilities(result.logprobs)
            bodies.append(self._fields(body))
        return Response(bodies[0] if len(bodies) == 1 else bodies)

    def _fields(self, body: LlamaCompletionResponse) -> Any:
        """Only the `response_fields` asked for, `a/b` lifting `b` out of `a` (llama-server's
        `json_get_nested_values`); fields that are not there are left out."""
        if not self.answer.response_fields:
            return body
        whole = msgspec.to_builtins(body)
        out = {}
        for path in self.answer.response_fields:
            value: Any = whole
            for part in path.split("/"):
                value = value.get(part, UNSET) if isinstance(value, dict) else UNSET
            if value is not UNSET:
                out[path.split("/")[-1]] = value
        return out
