"""`POST /v1/completions`: prompts as text or token ids, answered whole or as an SSE stream."""

from __future__ import annotations

from dataclasses import dataclass

from litestar.response import Response, Stream
from litestar.types import Receive
from msgspec import UNSET, UnsetType

from app.choice_extras import ChoiceExtras, RequestLog
from app.errors import BadRequest
from app.generation import (
    ChoiceResult,
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
    cache_keys,
    check_meaning,
    check_token_ids,
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
from app.reasoning_controls import completion_reasoning_budget
from app.request_types import CompletionRequest
from app.response_types import (
    ChoiceLogprobs,
    CompletionChoice,
    CompletionResponse,
    CompletionStreamResponse,
    UsageInfo,
)
from app.settings import ApiSettings
from app.stream_buffer import Piece
from backends.jobs import GenerationJob, PromptSpec
from backends.llama_model import LlamaModel
from backends.registry import Lease, ModelRegistry

# OpenAI's (and Fireworks') default for the legacy completions endpoint.
DEFAULT_MAX_TOKENS = 16


@dataclass(frozen=True)
class Prompt:
    tokens: list[int]
    text: str | None  # as the request gave it (echo returns it verbatim); None for token ids


def prompt_tokens(prompt: str | list, model: LlamaModel) -> list[Prompt]:
    """Each prompt's tokens, with its text when it came as text."""
    if isinstance(prompt, str):
        items: list = [prompt]
    elif isinstance(prompt[0], int):
        items = [prompt]
    else:
        items = prompt
    prompts = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            tokens = model.tokenize(item, add_special=True, parse_special=True)
            text: str | None = item
        else:
            check_token_ids(item, model.n_vocab, "prompt")
            tokens, text = list(item), None
        if not tokens:
            if model.bos_token_id < 0:
                raise BadRequest(f"prompt {i} is empty", param="prompt")
            tokens = [model.bos_token_id]  # an empty prompt starts from the beginning of text
        prompts.append(Prompt(tokens, text))
    return prompts


@dataclass
class CompletionStreamShape:
    id: str
    created: int
    model: str
    extras: ChoiceExtras

    def _chunk(self, choices: list[CompletionChoice], usage: UsageInfo | UnsetType = UNSET,
               perf: dict[str, object] | UnsetType = UNSET) -> CompletionStreamResponse:
        return CompletionStreamResponse(self.id, self.created, self.model, choices, usage, perf_metrics=perf)

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
        logprobs = extras.logprobs(choice, piece.logprobs)
        return [self._chunk([self._choice(choice, piece.text, logprobs=logprobs, tokens=piece.tokens)])]

    def finished(self, choice: int, reason: str, last: bool, counter: UsageCounter) -> list[CompletionStreamResponse]:
        final = self._choice(choice, "", finish_reason=reason)
        final.raw_output = self.extras.stream_raw_output(choice)
        perf = UNSET
        if last:
            perf = self.extras.stream_perf(counter)
        return [self._chunk([final], perf=perf)]

    def usage(self, usage: UsageInfo) -> CompletionStreamResponse:
        return self._chunk([], usage)


async def create_completion(registry: ModelRegistry, settings: ApiSettings, body: bytes,
                            receive: Receive) -> Response | Stream:
    clock = RequestClock()
    request = decode_request(body, CompletionRequest)
    check_meaning(request)
    return await with_model(registry, request.model, lambda lease: _complete(lease, request, settings, receive, clock))


async def _complete(lease: Lease, request: CompletionRequest, settings: ApiSettings, receive: Receive,
                    clock: RequestClock) -> Response | Stream:
    served = lease.served
    model = served.model
    options = output_options(request, settings.max_logprobs)
    prompts = prompt_tokens(request.prompt, model)
    requested = requested_max_tokens(request, served.defaults)
    grammar = await output_grammar(request, served)
    draft = draft_tokens(request, model)
    prompt_texts = [p.text if p.text is not None else model.detokenize(p.tokens) for p in prompts]
    budget = completion_reasoning_budget(served, request, prompt_texts)
    job = GenerationJob(
        prompts=tuple(
            PromptSpec(
                tuple(prompt.tokens),
                fit_max_tokens(len(prompt.tokens), requested, DEFAULT_MAX_TOKENS, served.engine.ctx_size,
                               request.context_length_exceeded_behavior),
            )
            for prompt in prompts
        ),
        n=request.n,
        sampling=sampling_params(request, model.n_vocab, served.defaults),
        stop=stop_sequences(request, served.defaults),
        cache=cache_keys(request),
        stream=bool(request.stream),
        grammar=grammar,
        logprobs=options.logprobs,
        draft=draft,
        priority=request.service_tier == "priority",
        reasoning_budget=budget,
    )
    extras = ChoiceExtras.for_job(
        options, served, job, clock, request_log=RequestLog(request.metadata, request.user),
        fragments=[[prompt.text] if prompt.text is not None else list(prompt.tokens) for prompt in prompts],
        prompt_texts=prompt_texts,
    )
    handle = submit(served, job)
    response_id, created = new_id("cmpl"), now()
    if request.stream:
        shape = CompletionStreamShape(response_id, created, request.model, extras)
        stream_options = StreamOptions(include_usage(request), stream_buffer(request))
        return sse_response(handle, shape, stream_options, clock, on_close=lease.release)
    try:
        results, counter = await collect(handle, receive, clock)
    finally:
        lease.release()
    choices = [_choice(i, result, extras) for i, result in enumerate(results)]
    perf = extras.perf(counter)
    return Response(CompletionResponse(response_id, created, request.model, choices, counter.usage(),
                                       perf_metrics=extras.body_perf(perf)),
                    headers=extras.headers(perf))


def _choice(index: int, result: ChoiceResult, extras: ChoiceExtras) -> CompletionChoice:
    return CompletionChoice(
        index, extras.echo(index) + result.text, result.finish_reason,  # type: ignore[arg-type]
        extras.whole_logprobs(index, result),
        raw_output=extras.whole_raw_output(index, result),
        prompt_token_ids=extras.prompt_ids(index),
        token_ids=extras.token_ids(result.tokens),
    )
